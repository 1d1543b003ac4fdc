#!/usr/bin/env bash
# status_json.sh - machine-readable status: `msched status --json` and `msched top --json`
# validate against docs/status.schema.json (python3-jsonschema), and `top` streams frames into
# a pipe.
#
#   schema       docs/status.schema.json is a valid JSON Schema, and it rejects an object
#                missing a required field or carrying an unknown one
#   status       --json on an empty daemon and while three fake shims run: valid, one line,
#                the budget and the tasks' names as the daemon has them, and the same numbers
#                as the Prometheus text
#   top --json   --count 3 --interval 100ms gives 3 valid frames numbered 1-3; from the second
#                on, interval_s and rates
#   top piped    --count 3 into a pipe prints 3 plain frames; without --count or --interval,
#                one (as before); --once one
#   errors       --json with no daemon: exit 1, one line, nothing on stdout
. "$(dirname "$0")/../daemon/lib.sh"
build_fake
SCHEMA=$ROOT/docs/status.schema.json
PY=""
for p in /usr/bin/python3 python3; do
    if "$p" -c "import jsonschema" 2>/dev/null; then
        PY=$p
        break
    fi
done
[ -n "$PY" ] || fail "no python3 with jsonschema (scripts/setup.sh installs python3-jsonschema)"

# validate FILE: every line of FILE is one object valid against the schema.
validate() {
    "$PY" - "$SCHEMA" "$1" <<'EOF' || fail "$1 does not validate: $(head -c 600 "$1")"
import json, sys, jsonschema
schema = json.load(open(sys.argv[1]))
v = jsonschema.Draft202012Validator(schema)
lines = open(sys.argv[2]).read().splitlines()
if not lines:
    sys.exit("no output")
for i, line in enumerate(lines, 1):
    errs = sorted(v.iter_errors(json.loads(line)), key=str)
    if errs:
        sys.exit("line %d: %s" % (i, errs[0].message))
EOF
}

# field FILE LINE EXPR: a Python expression over the object o on that line.
field() {
    "$PY" -c 'import json, sys; o = json.loads(open(sys.argv[1]).read().splitlines()[int(sys.argv[2]) - 1]); print(eval(sys.argv[3]))' "$@"
}

"$PY" - "$SCHEMA" <<'EOF' || fail "the schema check failed"
import json, sys, jsonschema
schema = json.load(open(sys.argv[1]))
jsonschema.Draft202012Validator.check_schema(schema)
v = jsonschema.Draft202012Validator(schema)
good = {"schema": "msched-status", "version": 1, "time_unix_ns": 1, "gpu": 0, "daemon_pid": 1,
        "uptime_ns": 1, "policy": "rr", "evict": "opt", "mode": "sliced", "slice_ns": 1,
        "budget_bytes": 1,
        "resident_bytes": 0, "switches": 0, "switch_ns_total": 0, "switch_ns_max": 0,
        "bytes_in": 0, "bytes_out": 0, "tasks": []}
assert v.is_valid(good)
bad = dict(good); del bad["tasks"]
assert not v.is_valid(bad), "missing field accepted"
bad = dict(good, invented=1)
assert not v.is_valid(bad), "unknown field accepted"
bad = dict(good, version=2)
assert not v.is_valid(bad), "another version accepted"
bad = dict(good, mode="both")
assert not v.is_valid(bad), "an unknown mode accepted"
EOF
pass "the schema is valid and strict"

start_daemon --budget 64MiB --slice 20ms
"$MSCHED" status --json >"$T/empty.json" || fail "status --json failed"
[ "$(wc -l <"$T/empty.json")" -eq 1 ] || fail "status --json is not one line"
validate "$T/empty.json"
[ "$(field "$T/empty.json" 1 'o["budget_bytes"]')" -eq $((64 << 20)) ] || fail "budget_bytes"
[ "$(field "$T/empty.json" 1 'len(o["tasks"])')" -eq 0 ] || fail "tasks on an empty daemon"
[ "$(field "$T/empty.json" 1 'o["daemon_pid"]')" -eq "$DAEMON" ] || fail "daemon_pid"
[ "$(field "$T/empty.json" 1 'o["mode"]')" = shared ] || fail "mode on an empty daemon"
pass "status --json on an empty daemon"

for n in a b c; do
    shim "$n" --chunks 12 --work 400
done
seen=0
for i in $(seq 1 60); do
    "$MSCHED" status --json >"$T/s.json" || fail "status --json failed while tasks run"
    if [ "$(field "$T/s.json" 1 'sorted(t["name"] for t in o["tasks"])')" = "['a', 'b', 'c']" ]; then
        seen=1
        break
    fi
    sleep 0.02
done
[ "$seen" -eq 1 ] || fail "status --json never listed a, b and c: $(cat "$T/s.json")"
validate "$T/s.json"
pass "status --json lists the running tasks"

"$MSCHED" top --json --count 3 --interval 100ms >"$T/top.json" || fail "top --json failed"
[ "$(wc -l <"$T/top.json")" -eq 3 ] || fail "top --json --count 3: $(wc -l <"$T/top.json") lines"
validate "$T/top.json"
for k in 1 2 3; do
    [ "$(field "$T/top.json" $k 'o["frame"]')" -eq $k ] || fail "frame $k is numbered wrong"
done
[ "$(field "$T/top.json" 1 '"rates" in o or "interval_s" in o')" = False ] ||
    fail "the first frame has rates"
iv=$(field "$T/top.json" 2 'o["interval_s"]')
field "$T/top.json" 2 '0.05 < o["interval_s"] < 2' | grep -q True || fail "interval_s $iv"
field "$T/top.json" 3 '"switches_per_s" in o["rates"]' | grep -q True || fail "no rates in frame 3"
pass "top --json: 3 valid frames, rates from the second on"

"$MSCHED" top --count 3 --interval 100ms | cat >"$T/top.txt"
n=$(grep -c "^msched: GPU" "$T/top.txt")
[ "$n" -eq 3 ] || fail "top --count 3 into a pipe printed $n frames: $(cat "$T/top.txt")"
n=$("$MSCHED" top | cat | grep -c "^msched: GPU")
[ "$n" -eq 1 ] || fail "top into a pipe printed $n frames"
n=$("$MSCHED" top --once | grep -c "^msched: GPU")
[ "$n" -eq 1 ] || fail "top --once printed $n frames"
pass "top into a pipe: --count frames, else one"

# The JSON numbers are the daemon's: the same as its Prometheus text at rest.
for n in a b c; do
    wait_shim "$n" 0 20
done
"$MSCHED" status --json >"$T/end.json"
validate "$T/end.json"
for pair in switches:msched_switches_total budget_bytes:msched_budget_bytes \
    resident_bytes:msched_resident_bytes; do
    j=$(field "$T/end.json" 1 "o['${pair%%:*}']")
    m=$(metric "${pair#*:}")
    [ "$j" = "$m" ] || fail "${pair%%:*} is $j in JSON, $m in the metrics"
done
[ "$(field "$T/end.json" 1 'o["switches"] > 0 and o["bytes_out"] > 0')" = True ] ||
    fail "no switches or evictions in the JSON"
pass "status --json agrees with the Prometheus text"

kill -TERM "$DAEMON"
wait "$DAEMON"
"$MSCHED" status --json >"$T/out" 2>"$T/err"
rc=$?
[ "$rc" -eq 1 ] && [ "$(wc -l <"$T/err")" -eq 1 ] && [ ! -s "$T/out" ] ||
    fail "status --json without a daemon: exit $rc, stdout '$(cat "$T/out")', stderr '$(cat "$T/err")'"
"$MSCHED" top --json --count 2 --interval 100ms >"$T/out" 2>"$T/err"
rc=$?
[ "$rc" -eq 1 ] && [ ! -s "$T/out" ] || fail "top --json without a daemon: exit $rc"
pass "no daemon: exit 1, one line, nothing on stdout"
check_log_clean
