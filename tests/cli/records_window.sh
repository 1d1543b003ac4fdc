#!/usr/bin/env bash
# tests/cli/records_window.sh - bench/records.py `procs`: the processes of one run compared over
# the window they all ran in. Hand-made process outputs (a shim log line, then the program's
# JSON with progress samples) and rates worked out by hand: three processes run 10 tasks/s from
# t=100 to 140, a fourth starts at 120 (5 tasks/s to 130, then 10/s) and runs alone to 170, so
# the window is [120, 140] and its rate there is 7.5/s, not its own-loop 9/s. Also: a failed
# process is left out of the window, a process without samples leaves every rate as reported,
# and a window shorter than 5 s keeps the reported rates; a process the harness killed
# (proc_I.killed) carries the harness's reason as its error. Needs no build.
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
T=$(mktemp -d /tmp/msched-records.XXXXXX)
trap 'rm -rf "$T"' EXIT
fail() {
    echo "FAIL: $*"
    exit 1
}
pass() { echo "ok: $*"; }

# out DIR I RATE PROGRESS: process I's output file.
out() {
    mkdir -p "$1"
    {
        echo "msched[1]: memory engine on (vmm)"
        if [ -n "$4" ]; then
            echo "{\"program\": \"t\", \"tasks_per_s\": $3, \"progress\": $4}"
        else
            echo "{\"program\": \"t\", \"tasks_per_s\": $3}"
        fi
    } >"$1/proc_$2.json"
}
EVEN='[[100, 0], [110, 100], [140, 400]]'
LATE='[[120, 0], [130, 50], [170, 450]]'

# check DIR PYTHON-ASSERTIONS: the records of `procs DIR 4` as `r` (a list, by proc).
check() {
    python3 "$ROOT/bench/records.py" procs "$1" 4 system=opt pressure=150 >"$T/recs.jsonl" ||
        fail "records.py procs $1 exited $?"
    python3 - "$T/recs.jsonl" "$2" <<'PY' || fail "$1: $(python3 -c 'import sys; print(open(sys.argv[1]).read())' "$T/recs.jsonl")"
import json, sys
r = [json.loads(l) for l in open(sys.argv[1])]
assert [x["proc"] for x in r] == [0, 1, 2, 3], r
assert all(x["system"] == "opt" and x["pressure"] == 150 for x in r), r
assert all("progress" not in x for x in r), "samples left in a record"
exec(sys.argv[2])
PY
}

for i in 0 1 2; do out "$T/late" $i 10 "$EVEN"; done
out "$T/late" 3 9 "$LATE"
check "$T/late" '
assert [x["tasks_per_s"] for x in r] == [10, 10, 10, 7.5], r
assert [x["tasks_per_s_own"] for x in r] == [10, 10, 10, 9], r
assert all(x["overlap_s"] == 20 for x in r), r'
pass "a late process is rated over the common window (7.5/s, own loop 9/s)"

for i in 0 1 2; do out "$T/failed" $i 10 "$EVEN"; done
echo "Traceback: RuntimeError" >"$T/failed/proc_3.json"
check "$T/failed" '
assert [x["tasks_per_s"] for x in r[:3]] == [10, 10, 10] and r[0]["overlap_s"] == 40, r
assert "error" in r[3] and "overlap_s" not in r[3], r[3]'
pass "a failed process is left out of the window"

for i in 0 1 2; do out "$T/killed" $i 10 "$EVEN"; done
echo "Stack (most recent call first):" >"$T/killed/proc_3.json"
echo "killed: still running 90 s after its timed loop should have ended" >"$T/killed/proc_3.killed"
check "$T/killed" '
assert r[3]["error"] == "killed: still running 90 s after its timed loop should have ended", r[3]
assert r[2]["tasks_per_s"] == 10 and "error" not in r[2], r[2]'
pass "a process the harness killed says so in its record"

for i in 0 1 2; do out "$T/nosamples" $i 10 "$EVEN"; done
out "$T/nosamples" 3 9 ""
check "$T/nosamples" '
assert [x["tasks_per_s"] for x in r] == [10, 10, 10, 9], r
assert all("overlap_s" not in x and "tasks_per_s_own" not in x for x in r), r'
pass "without every process's samples the reported rates stay"

for i in 0 1 2; do out "$T/short" $i 10 "$EVEN"; done
out "$T/short" 3 9 '[[137, 0], [170, 300]]'
check "$T/short" '
assert [x["tasks_per_s"] for x in r] == [10, 10, 10, 9], r
assert all(x["overlap_s"] == 3 and "tasks_per_s_own" not in x for x in r), r'
pass "a window under 5 s keeps the reported rates"

python3 "$ROOT/bench/records.py" procs "$T/late" x >/dev/null 2>&1
[ $? = 2 ] || fail "a non-numeric process count should exit 2"
pass "bad usage exits 2"
