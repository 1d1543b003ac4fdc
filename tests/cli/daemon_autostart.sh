#!/usr/bin/env bash
# daemon_autostart.sh - `msched run` starts mschedd on demand: once, next to msched, on the
# socket the shim will use; --no-daemon starts nothing and tells the shim to run alone; a daemon
# with idle_exit leaves by itself once no client is connected.
. "$(dirname "$0")/../daemon/lib.sh"
[ -x "$MSCHEDD" ] || fail "no mschedd at $MSCHEDD"

out=$("$MSCHED" run --verbose -- sh -c 'test -S "$MSCHED_SOCKET" && echo UP' 2>&1)
grep -q "started mschedd on $MSCHED_SOCKET" <<<"$out" || fail "no daemon started: $out"
grep -q "^UP$" <<<"$out" || fail "the program did not find the socket: $out"
pid=$("$MSCHED" status | sed -n 's/.*mschedd pid \([0-9]*\).*/\1/p' | head -n 1)
[ -n "$pid" ] || fail "msched status does not find the started daemon: $("$MSCHED" status 2>&1)"
PIDS+=("$pid")
pass "msched run started mschedd (pid $pid)"

out=$("$MSCHED" run --verbose -- true 2>&1)
grep -q "started mschedd" <<<"$out" && fail "a second daemon was started: $out"
[ "$(pgrep -c -f "mschedd --socket $MSCHED_SOCKET")" -eq 1 ] || fail "not exactly one daemon"
pass "a running daemon is joined, not started again"
kill "$pid"

export MSCHED_SOCKET="$T/other.sock"
out=$("$MSCHED" run --verbose --no-daemon -- sh -c 'echo "daemon=$MSCHED_DAEMON"' 2>&1)
grep -q "^daemon=off$" <<<"$out" || fail "--no-daemon did not reach the shim: $out"
[ -e "$MSCHED_SOCKET" ] && fail "--no-daemon started a daemon"
out=$(MSCHED_DAEMON=off "$MSCHED" run -- true 2>&1)
[ -e "$MSCHED_SOCKET" ] && fail "MSCHED_DAEMON=off started a daemon"
pass "--no-daemon and MSCHED_DAEMON=off start nothing"

start=$(date +%s)
timeout 10 "$MSCHEDD" --socket "$T/idle.sock" --idle-exit 1s --foreground >"$T/idle.out" 2>&1
rc=$?
[ $rc -eq 0 ] || fail "idle_exit: status $rc: $(cat "$T/idle.out")"
[ $(($(date +%s) - start)) -le 4 ] || fail "idle_exit 1s took more than 4 s"
pass "idle_exit: the daemon leaves by itself"
