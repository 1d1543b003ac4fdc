#!/usr/bin/env bash
# daemon_share.sh - sharing (docs/daemon.md, Sharing) end to end with fake shims: tasks whose
# memory fits in the budget together run at once, memory pressure turns sharing off (slices,
# evictions) and its end turns it back on; the mode shows in `msched status`, --json, the
# Prometheus text and the daemon's log.
#
#   empty        an empty daemon shares (mode: shared, msched_sharing 1)
#   overlap      a and b, 16 MiB each in 64 MiB, each holding the GPU for 2 s: both are listed
#                running at once, and they finish in well under the 4 s slices would take
#   pressure     a2 and b2 share; big (48 MiB) joins: "sharing: off" in the log, mode sliced,
#                at most one task running while sliced; when big is done, sharing comes back
#                ("sharing: on" again) and a2 and b2 finish
#   config       msched config set share off: sliced at once; on again: shared
. "$(dirname "$0")/../daemon/lib.sh"
build_fake
start_daemon --budget 64MiB --slice 20ms

"$MSCHED" status | grep -q "^mode: shared" || fail "empty daemon: $("$MSCHED" status)"
[ "$(metric msched_sharing)" -eq 1 ] || fail "msched_sharing on an empty daemon"
pass "an empty daemon shares"

# sample: RUNNING, the tasks `msched status` lists as running, and MODE, from one `msched status`.
sample() {
    "$MSCHED" status 2>/dev/null >"$T/st.txt"
    RUNNING=$(grep -c " running " "$T/st.txt")
    MODE=$(sed -n 's/^mode: \([a-z]*\).*/\1/p' "$T/st.txt")
}

t0=$(date +%s%N)
shim a --chunks 8 --work 2000
shim b --chunks 8 --work 2000
both=0
for i in $(seq 1 150); do
    sample
    if [ "$RUNNING" -ge 2 ]; then
        [ "$MODE" = shared ] || fail "two running in mode $MODE: $(cat "$T/st.txt")"
        both=1
        break
    fi
    sleep 0.02
done
[ "$both" -eq 1 ] || fail "a and b were never running at once: $(cat "$T/st.txt")"
wait_shim a 0 20
wait_shim b 0 20
ms=$((($(date +%s%N) - t0) / 1000000))
[ "$ms" -lt 3500 ] || fail "a and b took $ms ms for 2 s of GPU time each: not at once"
grep -q "done" "$T/a.out" && grep -q "done" "$T/b.out" || fail "a or b did not finish"
[ "$(metric msched_switches_total)" -eq 0 ] || fail "switches while sharing"
pass "two tasks that fit run at once ($ms ms for 2 x 2 s of GPU time)"

shim a2 --chunks 8 --work 3000
shim b2 --chunks 8 --work 3000
for i in $(seq 1 150); do
    sample
    [ "$RUNNING" -ge 2 ] && break
    sleep 0.02
done
[ "$RUNNING" -ge 2 ] || fail "a2 and b2 were never running at once: $(cat "$T/st.txt")"
shim big --chunks 24 --work 300 # 16 + 16 + 48 MiB > 64 MiB
sliced=0
while kill -0 "$PID_big" 2>/dev/null; do
    sample
    if [ "$MODE" = sliced ]; then
        sliced=1
        [ "$RUNNING" -le 1 ] || fail "$RUNNING running while sliced: $(cat "$T/st.txt")"
    fi
    check_budget
    sleep 0.02
done
wait_shim big 0 20
[ "$sliced" -eq 1 ] || fail "status never showed the sliced mode while big ran"
grep -q "sharing: off (task [0-9]* demands" "$T/daemon.log" || fail "no 'sharing: off' line"
back=0
for i in $(seq 1 150); do
    sample
    if [ "$MODE" = shared ] && [ "$RUNNING" -ge 2 ]; then
        back=1
        break
    fi
    kill -0 "$PID_a2" 2>/dev/null && kill -0 "$PID_b2" 2>/dev/null || break
    sleep 0.02
done
[ "$back" -eq 1 ] || fail "sharing did not come back after big: $(cat "$T/st.txt")"
[ "$(grep -c "sharing: on (" "$T/daemon.log")" -ge 2 ] || fail "no second 'sharing: on' line"
wait_shim a2 0 20
wait_shim b2 0 20
pass "pressure turns sharing off (at most one running), its end turns it back on"

shim c --chunks 4 --work 1500
shim d --chunks 4 --work 1500
for i in $(seq 1 150); do
    sample
    [ "$RUNNING" -ge 2 ] && break
    sleep 0.02
done
"$MSCHED" config set share off >/dev/null || fail "config set share off"
sample
[ "$MODE" = sliced ] || fail "share off: mode $MODE"
for i in $(seq 1 10); do
    sample
    [ "$RUNNING" -le 1 ] || fail "share off: $RUNNING running"
    sleep 0.02
done
[ "$("$MSCHED" status --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["mode"])')" = sliced ] ||
    fail "--json mode"
[ "$(metric msched_sharing)" -eq 0 ] || fail "msched_sharing while sliced"
grep -q "sharing: off (turned off)" "$T/daemon.log" || fail "no 'turned off' line"
"$MSCHED" config set share on >/dev/null || fail "config set share on"
for i in $(seq 1 50); do
    sample
    [ "$MODE" = shared ] && break
    sleep 0.02
done
[ "$MODE" = shared ] || fail "share on: mode $MODE"
wait_shim c 0 20
wait_shim d 0 20
pass "msched config set share off/on switches the mode"
check_log_clean
