#!/usr/bin/env bash
# daemon_basic.sh - mschedd with several fake shims on a private socket: everyone gets the GPU
# in turn and finishes, memory stays within the budget (over-subscribed 72 MiB in 64 MiB, so
# evictions must happen), `msched status`, `top --once`, `status --prometheus` and
# `config get/set` answer, and SIGTERM stops the daemon cleanly and removes its socket. Sharing
# is off: the turns are the point here (daemon_share.sh tests sharing).
. "$(dirname "$0")/../daemon/lib.sh"
build_fake
start_daemon --budget 64MiB --slice 20ms --share off

out=$("$MSCHED" status) || fail "status failed"
echo "$out" | grep -q "no tasks" || fail "status: expected no tasks: $out"
echo "$out" | grep -q "64.0 MiB budget" || fail "status: no budget line: $out"
pass "status on an empty daemon"

for n in a b c; do
    shim "$n" --chunks 12 --work 300
done
seen=0
for i in $(seq 1 40); do
    out=$("$MSCHED" status) || fail "status failed while tasks run"
    if echo "$out" | grep -q " a$" && echo "$out" | grep -q " c$"; then
        seen=1
        running=$(echo "$out" | grep -c " running ")
        [ "$running" -le 1 ] || fail "more than one task running: $out"
    fi
    check_budget
    sleep 0.02
done
[ "$seen" -eq 1 ] || fail "status never listed the tasks"
pass "status lists the tasks, at most one running, resident within the budget"

top=$("$MSCHED" top --once) || fail "top --once failed"
echo "$top" | grep -q "^TASK" || echo "$top" | grep -q "no tasks" || fail "top --once: $top"
pass "top --once prints a frame"

for n in a b c; do
    wait_shim "$n" 0 20
    grep -q "done" "$T/$n.out" || fail "shim $n did not finish its work: $(cat "$T/$n.out")"
done
pass "three over-subscribed tasks all finished"

out=$("$MSCHED" status)
echo "$out" | grep -q "no tasks" || fail "tasks left after they said goodbye: $out"
[ "$(metric msched_resident_bytes)" -eq 0 ] || fail "memory left resident"
[ "$(metric msched_switches_total)" -ge 3 ] || fail "fewer than 3 switches"
[ "$(metric msched_evicted_bytes_total)" -gt 0 ] || fail "over-subscribed but nothing evicted"
"$MSCHED" status --prometheus | grep -q '^# TYPE msched_task_resident_bytes gauge' ||
    fail "prometheus text lacks the per-task family"
pass "metrics: switches, evictions, all memory returned"

[ "$("$MSCHED" config get slice)" = "slice = 20ms" ] || fail "config get slice"
[ "$("$MSCHED" config set slice 50ms)" = "slice = 50ms" ] || fail "config set slice"
[ "$("$MSCHED" config get slice)" = "slice = 50ms" ] || fail "config get after set"
"$MSCHED" config set budget 1.5GiB | grep -q "budget = 1536MiB" || fail "config set budget"
if "$MSCHED" config set budget lots 2>"$T/err"; then fail "a bad value was accepted"; fi
grep -q "not a size" "$T/err" || fail "bad value message: $(cat "$T/err")"
if "$MSCHED" config set gpu 1 2>"$T/err"; then fail "gpu changed at run time"; fi
grep -q "cannot change" "$T/err" || fail "read-only message: $(cat "$T/err")"
if "$MSCHED" config set nonsense 1 2>/dev/null; then fail "unknown key accepted"; fi
"$MSCHED" config get | grep -q "^policy = rr$" || fail "config get (all)"
pass "config get/set"

check_log_clean
kill -TERM "$DAEMON"
for i in $(seq 1 100); do
    kill -0 "$DAEMON" 2>/dev/null || break
    sleep 0.05
done
kill -0 "$DAEMON" 2>/dev/null && fail "the daemon ignored SIGTERM"
wait "$DAEMON"
rc=$?
[ "$rc" -eq 0 ] || fail "the daemon exited with $rc after SIGTERM"
[ -e "$MSCHED_SOCKET" ] && fail "the socket was left behind"
if "$MSCHED" status 2>"$T/err"; then fail "status succeeded without a daemon"; fi
grep -q "no daemon" "$T/err" || fail "status without a daemon: $(cat "$T/err")"
pass "SIGTERM: clean exit, socket removed, status says no daemon"
