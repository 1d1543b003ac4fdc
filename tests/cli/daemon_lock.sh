#!/usr/bin/env bash
# daemon_lock.sh - one daemon per socket: a second one refuses with a clear message (in the
# foreground and when daemonizing), the first keeps serving; a daemon started in the background
# is ready when its command returns and stops on SIGTERM.
. "$(dirname "$0")/../daemon/lib.sh"
build_fake
start_daemon --budget 64MiB

if timeout 5 "$MSCHEDD" --foreground --budget 64MiB 2>"$T/second.err"; then
    fail "a second daemon started"
fi
grep -q "already running" "$T/second.err" || fail "second daemon message: $(cat "$T/second.err")"
grep -q "pid $DAEMON" "$T/second.err" || fail "the message does not name the first daemon's pid"
if timeout 5 "$MSCHEDD" --budget 64MiB 2>"$T/third.err"; then
    fail "a second background daemon started"
fi
grep -q "already running" "$T/third.err" || fail "background message: $(cat "$T/third.err")"
"$MSCHED" status >/dev/null || fail "the first daemon stopped answering"
pass "a second daemon refuses; the first keeps serving"

kill -TERM "$DAEMON"
wait "$DAEMON"
export MSCHED_SOCKET="$T/bg.sock"
timeout 10 "$MSCHEDD" --budget 32MiB --log-level info || fail "background start failed"
"$MSCHED" status | grep -q "32.0 MiB budget" || fail "background daemon not ready on return"
bg=$(head -n1 "$T/bg.sock.lock")
[ -n "$bg" ] && kill -0 "$bg" || fail "no pid in the lock file"
PIDS+=("$bg")
grep -q "serving GPU 0" "$T/bg.sock.log" || fail "the background daemon does not log to its file"
kill -TERM "$bg"
for i in $(seq 1 100); do
    kill -0 "$bg" 2>/dev/null || break
    sleep 0.05
done
kill -0 "$bg" 2>/dev/null && fail "background daemon ignored SIGTERM"
[ -e "$T/bg.sock" ] && fail "socket left behind"
pass "background daemon: ready on return, stops on SIGTERM"
check_log_clean
