#!/usr/bin/env bash
# daemon_stall.sh - a program stopped with Ctrl-Z (SIGSTOP) while it holds the GPU does not
# stall everyone (docs/daemon.md, "Stalled tasks"), on the fake CUDA driver.
#
# Client a (tests/shim/engine_stress cycle: 96 MiB, all of it resident under its 112 MiB limit,
# so it holds the GPU without migrating) runs alone under mschedd (budget 160 MiB, stop_timeout
# 300 ms) and is stopped with SIGSTOP. Client b (limited to 8 MiB) then asks for the GPU: the
# daemon's STOP to a goes unanswered, so after stop_timeout a is listed as stalled, its memory
# set aside, and b runs in the rest of the budget and finishes.
# a is never dropped: after SIGCONT it answers its STOP, waits for memory like any task and
# finishes under the daemon with zero mismatches. Before stalls, a was dropped after
# stop_timeout and ran on alone (its connection gone).
. "$(dirname "$0")/../daemon/lib.sh"

need_fake_cuda
[ -x "$MSCHEDD" ] || fail "no mschedd at $MSCHEDD"

ROUNDS_A=1000 ROUNDS_B=20 LIMIT=120
case "$BUILD" in
*thread* | *address*) ROUNDS_A=200 ROUNDS_B=6 LIMIT=400 ;;
esac

# state_of PID: the task's state in `msched status --json` (empty when not listed).
state_of() {
    "$MSCHED" status --json 2>/dev/null |
        python3 -c 'import json,sys; p=int(sys.argv[1]); print(next((t["state"] for t in json.load(sys.stdin)["tasks"] if t["pid"]==p), ""))' "$1"
}

# wait_state PID STATE SECONDS
wait_state() {
    local i
    for i in $(seq 1 $(($3 * 10))); do
        [ "$(state_of "$1")" = "$2" ] && return 0
        sleep 0.1
    done
    fail "task of pid $1 is '$(state_of "$1")', not $2, after $3 s"
}

start_daemon --budget 160MiB --slice 20ms --stop_timeout 300ms
client a MSCHED_BUDGET=112MiB -- "$ROUNDS_A" 4 cycle
wait_state "$PID_a" running 20
kill -STOP "$PID_a"
client b MSCHED_BUDGET=8MiB -- "$ROUNDS_B" 5 cycle
wait_state "$PID_a" stalled 20
wait_shim b 0 "$LIMIT"
grep -q "ENGINE_CYCLE\|mismatches=0" "$T/b.out" || fail "b: $(tail -n 3 "$T/b.out")"
grep -q "daemon: connected" "$T/b.out" || fail "b did not run under the daemon"
[ "$(state_of "$PID_a")" = stalled ] || fail "a is '$(state_of "$PID_a")' after b ended, not stalled"
grep -q "within 300 ms (stopped or hung)" "$T/daemon.log" || fail "no stall line in the daemon's log"
pass "a stopped task is set aside: another runs beside its memory and finishes"

kill -CONT "$PID_a"
wait_shim a 0 "$LIMIT"
grep -q "ENGINE_CYCLE\|mismatches=0" "$T/a.out" || fail "a: $(tail -n 3 "$T/a.out")"
grep -q "daemon: connected" "$T/a.out" ||
    fail "a lost the daemon: $(grep msched "$T/a.out" | tail -n 3)"
grep -q "answered .* after .* s stalled" "$T/daemon.log" || fail "no end-of-stall line in the daemon's log"
grep -Eq "in time|did not stop in" "$T/daemon.log" && fail "a task was dropped: $(grep -E "in time" "$T/daemon.log")"
pass "resumed, it answers its STOP and finishes under the daemon"
