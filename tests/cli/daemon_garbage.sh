#!/usr/bin/env bash
# daemon_garbage.sh - hostile clients: random bytes, a lying length, an oversized frame, another
# protocol version, a reference to an unknown region each get an ERROR and are closed; a client
# that sends requests and never reads is dropped. The daemon stays up and keeps serving.
. "$(dirname "$0")/../daemon/lib.sh"
build_fake
start_daemon --budget 64MiB --slice 20ms --session-out-max 64KiB

for mode in prehello badframe oversize version badregion; do
    shim "g_$mode" --garbage "$mode" --timeout 10
    wait_shim "g_$mode" 0 10
    grep -q "refused with ERROR" "$T/g_$mode.out" || fail "$mode: $(cat "$T/g_$mode.out")"
done
pass "garbage refused with ERROR and closed"

shim flood --flood --timeout 20
wait_shim flood 0 20
grep -q "dropped by the daemon" "$T/flood.out" || fail "flood: $(cat "$T/flood.out")"
pass "a client that does not read is dropped"

pe=$(metric msched_protocol_errors_total)
[ "$pe" -ge 5 ] || fail "protocol errors not counted ($pe)"
shim good --chunks 4 --work 100
wait_shim good 0 15
"$MSCHED" status | grep -q "no tasks" || fail "tasks left over"
[ "$(metric msched_resident_bytes)" -eq 0 ] || fail "memory left resident"
check_log_clean
pass "the daemon still serves"
