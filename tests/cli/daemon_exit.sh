#!/usr/bin/env bash
# daemon_exit.sh - the daemon goes away under running shims: killed (-9) they notice the closed
# socket, SIGTERM they get a goodbye; either way they go on alone and exit cleanly. A new daemon
# then starts on the same socket although the old one left its socket file behind.
. "$(dirname "$0")/../daemon/lib.sh"
build_fake
start_daemon --budget 32MiB --slice 20ms

shim a --chunks 8 --work 60000
shim b --chunks 8 --work 60000
sleep 0.3
"$MSCHED" status | grep -q " b$" || fail "the shims did not register"
kill -9 "$DAEMON"
wait "$DAEMON" 2>/dev/null
wait_shim a 0 5
wait_shim b 0 5
grep -q "continuing alone" "$T/a.out" || fail "a: $(cat "$T/a.out")"
grep -q "continuing alone" "$T/b.out" || fail "b: $(cat "$T/b.out")"
pass "daemon killed: shims continue alone"

[ -e "$MSCHED_SOCKET" ] || fail "expected the killed daemon's socket file to remain"
start_daemon --budget 32MiB --slice 20ms
pass "a new daemon replaces a dead one's socket"

shim c --chunks 8 --work 60000
sleep 0.3
kill -TERM "$DAEMON"
wait "$DAEMON"
wait_shim c 0 5
grep -q "goodbye" "$T/c.out" || fail "c: $(cat "$T/c.out")"
pass "daemon stopped: shims told goodbye, continue alone"
check_log_clean
