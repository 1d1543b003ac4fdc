#!/usr/bin/env bash
# daemon_metrics_http.sh - mschedd's HTTP metrics endpoint (metrics_listen) and its exit logs.
#
#   endpoint     mschedd --metrics-listen 127.0.0.1:0 (the kernel picks the port, read back from
#                the log); two engine_stress clients on the fake CUDA driver under libmsched;
#                `curl /metrics` shows msched_up 1, per-task series for each client's pid with
#                its uid, and the switch histograms with switches counted (+Inf bucket = count)
#   paths        /nope is 404, POST 405, a malformed request 400, an over-long head 431
#   bounded      8 idle connections fill the endpoint: a 9th is answered 503, `msched status`
#                still answers at once (the loop never waits on a scraper), and the idle ones
#                are closed by the daemon's timeout
#   clean exit   the clients exit as CUDA runtime programs do (their shim closes the session
#                before the process is gone): no warning in the log
#   lingering    a fake shim that closes its connection and keeps running: one warning, about
#                2 s later
#   bad address  a name instead of a number is refused at start (exit 2)
. "$(dirname "$0")/../daemon/lib.sh"
need_fake_cuda
command -v curl >/dev/null || fail "curl is missing (scripts/setup.sh installs it)"
build_fake

start_daemon --budget 48MiB --slice 20ms --metrics-listen 127.0.0.1:0
for i in $(seq 1 40); do
    PORT=$(sed -n 's|.*metrics: http://127.0.0.1:\([0-9]*\)/metrics.*|\1|p' "$T/daemon.log")
    [ -n "$PORT" ] && break
    sleep 0.05
done
[ -n "$PORT" ] || fail "the daemon did not say where its metrics are"
URL=http://127.0.0.1:$PORT/metrics

client() {
    local name=$1
    shift
    env LD_LIBRARY_PATH="$SHIMDIR" MSCHED_REAL_LIBCUDA="$FAKELIB" MS_FAKECUDA="$FAKELIB" \
        STRESS_EXIT_RELEASE_MS=1 "$STRESS" "$@" >"$T/$name.out" 2>&1 &
    local p=$!
    PIDS+=("$p")
    eval "PID_$name=$p"
}
# Sanitizer builds run several times slower: fewer rounds.
ROUNDS=60
case "$BUILD" in *thread* | *address*) ROUNDS=20 ;; esac
client a "$ROUNDS" 1 cycle
client b "$ROUNDS" 2 cycle

# ---- endpoint --------------------------------------------------------------------------------
uid=$(id -u)
for i in $(seq 1 600); do
    curl -sS --max-time 5 "$URL" >"$T/m.txt" 2>"$T/curl.err" || fail "curl: $(cat "$T/curl.err")"
    grep -q "msched_task_resident_bytes{.*pid=\"$PID_a\".*uid=\"$uid\"" "$T/m.txt" &&
        grep -q "msched_task_resident_bytes{.*pid=\"$PID_b\".*uid=\"$uid\"" "$T/m.txt" &&
        awk '$1 ~ /^msched_switch_duration_seconds_count/ && $2 > 2 { f = 1 } END { exit !f }' \
            "$T/m.txt" &&
        awk '$1 ~ /^msched_switch_moved_bytes_sum/ && $2 > 0 { f = 1 } END { exit !f }' \
            "$T/m.txt" && break
    sleep 0.05
done
grep -q '^msched_up{gpu="0"} 1$' "$T/m.txt" || fail "no msched_up 1: $(head -5 "$T/m.txt")"
for f in msched_task_resident_bytes msched_task_footprint_bytes msched_task_slices_total \
    msched_task_run_seconds_total msched_task_state; do
    grep "^$f{" "$T/m.txt" | grep -q "pid=\"$PID_a\"" || fail "no $f series for client a"
done
grep "^msched_task_state{" "$T/m.txt" | grep "pid=\"$PID_a\"" | grep -q 'name="engine_stress"' ||
    fail "the task's name label is missing"
grep -q '^# TYPE msched_switch_duration_seconds histogram' "$T/m.txt" ||
    fail "no switch duration histogram"
grep -q '^# TYPE msched_switch_moved_bytes histogram' "$T/m.txt" || fail "no moved bytes histogram"
count=$(awk '$1 ~ /^msched_switch_duration_seconds_count/ { print $2 }' "$T/m.txt")
inf=$(awk '$1 ~ /^msched_switch_duration_seconds_bucket.*le="\+Inf"/ { print $2 }' "$T/m.txt")
mcount=$(awk '$1 ~ /^msched_switch_moved_bytes_count/ { print $2 }' "$T/m.txt")
msum=$(awk '$1 ~ /^msched_switch_moved_bytes_sum/ { print $2 }' "$T/m.txt")
[ "${count:-0}" -gt 2 ] || fail "no switches counted in the histogram: $(grep switch_duration "$T/m.txt")"
[ "$inf" = "$count" ] && [ "$mcount" = "$count" ] || fail "+Inf bucket $inf, counts $count/$mcount"
[ "${msum:-0}" -gt 0 ] || fail "the switches moved no bytes (budget below the footprints)"
# Buckets are cumulative.
awk '$1 ~ /^msched_switch_duration_seconds_bucket/ { if ($2 < prev) exit 1; prev = $2 }' \
    "$T/m.txt" || fail "the duration buckets are not cumulative"
# The CLI's text is the same exposition.
"$MSCHED" status --prometheus | grep -q "^msched_switch_moved_bytes_bucket{" ||
    fail "msched status --prometheus lacks the histograms"
hdr=$(curl -sS -D - -o /dev/null "$URL")
echo "$hdr" | grep -qi '^Content-Type: text/plain; version=0.0.4' || fail "content type: $hdr"
pass "curl $URL: msched_up, per-task series of both clients (pid, uid, name), histograms"

# The Grafana dashboard asks only for series the daemon serves, with labels it sets.
python3 - "$ROOT/docs/grafana/msched-dashboard.json" "$T/m.txt" <<'PY' || fail "the dashboard"
import json, re, sys
dash = json.load(open(sys.argv[1]))
text = open(sys.argv[2]).read()
served = set(re.findall(r"^(msched_[a-z_]+)", text, re.M))
labels = set(re.findall(r'([a-z_]+)="', text)) | {"instance", "le"}
n = 0
for p in dash["panels"]:
    for t in p["targets"]:
        for name in re.findall(r"\b(msched_[a-z_]+)", t["expr"]):
            assert name in served, "%s: %s is not served" % (p["title"], name)
            n += 1
        for lab in re.findall(r"\{\{(\w+)\}\}", t["legendFormat"]) + re.findall(r"by \(([^)]*)\)", t["expr"]):
            for l in lab.split(","):
                assert l.strip() in labels, "%s: label %s is not set" % (p["title"], l)
assert n >= 10, n
PY
pass "docs/grafana/msched-dashboard.json uses only served series and labels"

# ---- paths -----------------------------------------------------------------------------------
code=$(curl -sS -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/nope")
[ "$code" = 404 ] || fail "/nope answered $code"
code=$(curl -sS -o /dev/null -w '%{http_code}' -X POST -d x=1 "$URL")
[ "$code" = 405 ] || fail "POST answered $code"
raw() { # raw BYTES: what the endpoint answers to them (its status line)
    python3 - "$PORT" "$1" <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
s.sendall(sys.argv[2].encode().decode("unicode_escape").encode("latin-1"))
data = b""
while True:
    b = s.recv(4096)
    if not b:
        break
    data += b
print(data.split(b"\r\n")[0].decode())
PY
}
[ "$(raw 'GARBAGE\r\n\r\n')" = "HTTP/1.1 400 Bad Request" ] || fail "garbage: $(raw 'GARBAGE\r\n\r\n')"
long="GET /metrics HTTP/1.1\\r\\nX: $(head -c 5000 /dev/zero | tr '\0' a)\\r\\n\\r\\n"
got=$(raw "$long")
[ "$got" = "HTTP/1.1 431 Request Header Fields Too Large" ] || fail "a 5000-byte head: $got"
[ "$(raw 'GET /metrics HTTP/1.0\n\n' | cut -d' ' -f2)" = 200 ] || fail "HTTP/1.0 with bare LF"
pass "404 for other paths, 405 for POST, 400 for garbage, 431 for a long head"

# ---- bounded ---------------------------------------------------------------------------------
python3 - "$PORT" "$MSCHED" >"$T/idle.out" 2>&1 <<'PY' || fail "idle connections: $(cat "$T/idle.out")"
import socket, subprocess, sys, time
port, msched = int(sys.argv[1]), sys.argv[2]
idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(8)]
idle[0].sendall(b"GET /metr")  # half a request line: waits for the rest
time.sleep(0.3)
extra = socket.create_connection(("127.0.0.1", port), timeout=5)
line = extra.recv(200).split(b"\r\n")[0]
assert line == b"HTTP/1.1 503 Service Unavailable", line
t0 = time.time()
subprocess.run([msched, "status"], check=True, stdout=subprocess.DEVNULL, timeout=5)
assert time.time() - t0 < 2, "msched status took %.1f s" % (time.time() - t0)
for s in idle:
    s.settimeout(10)
    assert s.recv(100) == b"", "an idle connection got an answer"
took = time.time() - t0
assert 2 < took < 9, "the idle connections were closed after %.1f s" % took
print("closed after %.1f s" % took)
PY
code=$(curl -sS -o /dev/null -w '%{http_code}' "$URL")
[ "$code" = 200 ] || fail "after the idle connections: $code"
pass "8 idle connections: a 9th gets 503, the daemon answers meanwhile, they time out ($(cat "$T/idle.out"))"

# ---- clean exit ------------------------------------------------------------------------------
wait "$PID_a" || fail "client a failed: $(tail -n 3 "$T/a.out")"
wait "$PID_b" || fail "client b failed: $(tail -n 3 "$T/b.out")"
for i in $(seq 1 100); do
    "$MSCHED" status | grep -q "no tasks" && break
    sleep 0.05
done
"$MSCHED" status | grep -q "no tasks" || fail "the clients' tasks are still listed"
grep -q "closed its connection but still runs\|is gone" "$T/daemon.log" ||
    fail "the clients' exits were not logged"
if grep -E " (warn|error): " "$T/daemon.log"; then
    fail "a clean client exit logged a warning"
fi
pass "two clients exiting cleanly: no warning"

# ---- lingering -------------------------------------------------------------------------------
shim closer --chunks 4 --work 3000 --close-at run:1
for i in $(seq 1 100); do
    grep -q "closing at RUN" "$T/closer.out" 2>/dev/null && break
    sleep 0.05
done
grep -q "closing at RUN" "$T/closer.out" || fail "closer did not close at its RUN"
for i in $(seq 1 80); do
    grep -q "warn: task .* (pid $PID_closer) closed its connection 2 s ago and still runs" \
        "$T/daemon.log" && break
    sleep 0.05
done
grep -q "warn: task .* (pid $PID_closer) closed its connection 2 s ago and still runs" \
    "$T/daemon.log" || fail "no warning for a process that closed its connection and runs on"
[ "$(grep -c "closed its connection 2 s ago" "$T/daemon.log")" -eq 1 ] || fail "warned twice"
kill -9 "$PID_closer"
wait "$PID_closer" 2>/dev/null
pass "a process that closes its connection and runs on: one warning after 2 s"

# ---- bad address -----------------------------------------------------------------------------
"$MSCHEDD" --foreground --socket "$T/other.sock" --metrics-listen localhost:9400 \
    >"$T/bad.out" 2>&1
rc=$?
[ "$rc" -eq 2 ] || fail "a host name: exit $rc: $(cat "$T/bad.out")"
grep -q "not a numeric IPv4 address" "$T/bad.out" || fail "no reason: $(cat "$T/bad.out")"
pass "a host name as metrics address is refused (exit 2)"

kill -0 "$DAEMON" || fail "the daemon died"
check_log_clean
