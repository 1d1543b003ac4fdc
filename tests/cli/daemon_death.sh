#!/usr/bin/env bash
# daemon_death.sh - tasks die mid-migration (at an EVICT, at a POPULATE): their memory returns
# at once and the others finish. A task that hangs is stalled after the stop timeout (set
# aside: the others finish beside it) and its memory stays charged (its process may hold it)
# until the process is killed.
. "$(dirname "$0")/../daemon/lib.sh"
build_fake
start_daemon --budget 48MiB --slice 20ms --stop-timeout 300ms

shim a --chunks 12 --work 300
shim b --chunks 12 --work 300
shim killed --chunks 12 --work 300 --die-at evict:2
shim crashed --chunks 12 --work 300 --die-at populate:2
wait_shim killed 3 15
wait_shim crashed 3 15
wait_shim a 0 20
wait_shim b 0 20
grep -q "dying at EVICT" "$T/killed.out" || fail "killed did not die at its EVICT"
grep -q "dying at POPULATE" "$T/crashed.out" || fail "crashed did not die at its POPULATE"
out=$("$MSCHED" status)
echo "$out" | grep -q "no tasks" || fail "dead tasks are still listed: $out"
[ "$(metric msched_resident_bytes)" -eq 0 ] || fail "a dead task's memory was not returned"
pass "deaths mid-migration: memory returned, the others finished"

shim hanger --chunks 8 --work 3000 --hang-at stop:1
shim c --chunks 12 --work 300
shim d --chunks 12 --work 300
wait_shim c 0 20
wait_shim d 0 20
out=$("$MSCHED" status)
echo "$out" | grep " hanger$" | grep -q "stalled" || fail "the hung task is not shown stalled: $out"
r=$(metric msched_resident_bytes)
[ "$r" -gt 0 ] || fail "the hung task's memory was released while it lives"
grep -q "(stopped or hung)" "$T/daemon.log" || fail "no stall in the log"
kill -9 "$PID_hanger"
for i in $(seq 1 100); do
    [ "$(metric msched_resident_bytes)" -eq 0 ] && break
    sleep 0.05
done
[ "$(metric msched_resident_bytes)" -eq 0 ] || fail "memory not released after the hung process died"
"$MSCHED" status | grep -q "no tasks" || fail "the ghost is still listed"
pass "a hung task: stalled (set aside, the others finish), memory charged until its process exits"

shim closer --chunks 8 --work 3000 --close-at run:1
for i in $(seq 1 100); do
    grep -q "closing at RUN" "$T/closer.out" 2>/dev/null && break
    sleep 0.05
done
grep -q "closing at RUN" "$T/closer.out" || fail "closer did not close at its RUN"
for i in $(seq 1 100); do
    "$MSCHED" status | grep " closer$" | grep -q "dropped" && break
    sleep 0.05
done
out=$("$MSCHED" status)
echo "$out" | grep " closer$" | grep -q "dropped" || fail "the closed task is not shown dropped: $out"
[ "$(metric msched_resident_bytes)" -eq $((8 * 2097152)) ] ||
    fail "the memory of a task that closed its socket but runs was not kept charged: $out"
kill -9 "$PID_closer"
for i in $(seq 1 100); do
    [ "$(metric msched_resident_bytes)" -eq 0 ] && break
    sleep 0.05
done
[ "$(metric msched_resident_bytes)" -eq 0 ] || fail "memory not released after the closer died"
pass "a task that closes its socket while running: memory charged until its process exits"

kill -0 "$DAEMON" || fail "the daemon died"
check_log_clean
pass "the daemon survived"
