#!/usr/bin/env bash
# daemon_misses.sh - misses are visible in `msched status` (docs/engine.md, "Always mapped"):
# a client under mschedd whose commands name one buffer larger than its limit (engine_stress
# onebuf, limited to 150 MiB) runs them with what fits resident and the rest on host chunks;
# its shim reports how many commands ran so in DEMAND and STOPPED, and `msched status --json`,
# the table and the Prometheus text show the count while it runs, and the host memory its shim
# pinned for the chunks on the host (with its host limit). On the fake CUDA driver.
. "$(dirname "$0")/../daemon/lib.sh"

need_fake_cuda
[ -x "$MSCHEDD" ] || fail "no mschedd at $MSCHEDD"

start_daemon --budget 512MiB --slice 20ms
env LD_LIBRARY_PATH="$SHIMDIR" MSCHED_REAL_LIBCUDA="$FAKELIB" MS_FAKECUDA="$FAKELIB" \
    MSCHED_VERBOSE=1 MSCHED_BUDGET=150MiB "$STRESS" 20000 1 onebuf >"$T/one.out" 2>&1 &
PID_one=$!
PIDS+=("$PID_one")
misses=0
for _ in $(seq 1 300); do
    misses=$("$MSCHED" status --json 2>/dev/null | python3 -c '
import json, sys
p = int(sys.argv[1])
print(next((t["misses"] for t in json.load(sys.stdin)["tasks"] if t["pid"] == p), 0))' "$PID_one")
    [ "${misses:-0}" -gt 0 ] && break
    kill -0 "$PID_one" 2>/dev/null || fail "the client ended early: $(tail -n 3 "$T/one.out")"
    sleep 0.1
done
[ "${misses:-0}" -gt 0 ] || fail "msched status --json shows no misses for the client"
"$MSCHED" status | awk -v p="$PID_one" '$2 == p' | grep -Eq " [1-9][0-9]* +engine_stress$" ||
    fail "the status table has no misses column for it: $("$MSCHED" status)"
"$MSCHED" status --prometheus | grep -Eq "^msched_task_misses_total\{.*pid=\"$PID_one\".*\} [1-9]" ||
    fail "no msched_task_misses_total for it"
pass "misses in msched status, its JSON and its metrics while the client runs ($misses so far)"
# Its never-populated chunks beyond the limit went to host chunks: pinned host memory the
# status reports (JSON host_bytes, the HOST column, msched_task_host_bytes), with its limit.
read -r hostb hostl < <("$MSCHED" status --json 2>/dev/null | python3 -c '
import json, sys
p = int(sys.argv[1])
t = next((t for t in json.load(sys.stdin)["tasks"] if t["pid"] == p), {})
print(t.get("host_bytes", 0), t.get("host_limit_bytes", 0))' "$PID_one")
[ "${hostb:-0}" -gt 0 ] || fail "msched status --json shows no pinned host bytes for the client"
[ "${hostl:-0}" -gt 0 ] || fail "msched status --json shows no host limit for the client"
"$MSCHED" status | grep -q "^host: .* pinned by the tasks' shims" ||
    fail "the status text has no host line: $("$MSCHED" status)"
"$MSCHED" status --prometheus | grep -Eq "^msched_task_host_bytes\{.*pid=\"$PID_one\".*\} [1-9]" ||
    fail "no msched_task_host_bytes for it"
pass "pinned host memory in msched status, its JSON and its metrics ($hostb bytes of $hostl)"
kill "$PID_one" 2>/dev/null
wait "$PID_one" 2>/dev/null

# The same program, 20 rounds to the end: every command that names more than the limit runs at
# once on what fits (before, each waited a second for a population the daemon had no reason
# to send: 15 repeated demands, 16 s), with no word lost and its misses in the exit summary.
t0=$(date +%s%N)
env LD_LIBRARY_PATH="$SHIMDIR" MSCHED_REAL_LIBCUDA="$FAKELIB" MS_FAKECUDA="$FAKELIB" \
    MSCHED_VERBOSE=1 MSCHED_BUDGET=150MiB timeout 120 "$STRESS" 20 1 onebuf >"$T/one20.out" 2>&1 ||
    fail "onebuf under the daemon: $(tail -n 3 "$T/one20.out")"
ms=$((($(date +%s%N) - t0) / 1000000))
grep -q "ENGINE_ONEBUF rounds=20 mismatches=0" "$T/one20.out" || fail "onebuf: $(tail -n 3 "$T/one20.out")"
grep -q "daemon: connected, .*(0 repeated)" "$T/one20.out" ||
    fail "demands went unanswered: $(grep 'daemon:' "$T/one20.out")"
grep -Eq "misses: [1-9][0-9]* commands" "$T/one20.out" || fail "no misses counted: $(grep misses "$T/one20.out")"
case "$BUILD" in *thread* | *address*) lim=60000 ;; *) lim=10000 ;; esac
[ "$ms" -lt "$lim" ] || fail "20 rounds took $ms ms under the daemon"
pass "commands naming more than the limit run at once under the daemon (20 rounds in $ms ms)"
