#!/usr/bin/env bash
# daemon_fresh.sh - mschedd on a fresh machine, where no socket directory exists yet: the daemon
# creates it (mode 0700) before anything else, its log included, and `msched run` starts it on
# demand and the program joins it. Both default places are tried: a new, empty
# XDG_RUNTIME_DIR, and (as root, for a user created here, so nobody's real daemon is touched)
# no XDG_RUNTIME_DIR and no /tmp/msched-UID.
. "$(dirname "$0")/../daemon/lib.sh"
need_fake_cuda
unset MSCHED_SOCKET
chmod 711 "$T"
mkdir -m 755 "$T/pub"

# A program on the fake driver that reports whether it ran under the daemon.
{
    fake_program_env
    echo "exec $STRESS 3 1 cycle"
} >"$T/pub/prog.sh"
chmod 755 "$T/pub/prog.sh"

# daemon_pid [CMD...]: the pid `msched status` reports (the environment names the socket); CMD
# runs it (as_user NAME).
daemon_pid() {
    "$@" "$MSCHED" status 2>/dev/null | sed -n 's/.*mschedd pid \([0-9]*\).*/\1/p' | head -n 1
}

# stop_daemon PID: SIGTERM, and wait until it is gone.
stop_daemon() {
    kill "$1" 2>/dev/null
    for _ in $(seq 1 100); do
        kill -0 "$1" 2>/dev/null || return 0
        sleep 0.05
    done
    fail "the daemon (pid $1) did not stop"
}

# joined OUT: the program finished under the daemon.
joined() {
    grep -q "ENGINE_CYCLE" "$1" || fail "the program failed: $(tail -n 5 "$1")"
    grep -q "daemon: connected, [1-9][0-9]* slices" "$1" ||
        fail "the program did not run under the daemon: $(grep msched "$1" | tail -n 5)"
}

# ---- a fresh XDG_RUNTIME_DIR -------------------------------------------------------------------
export XDG_RUNTIME_DIR=$T/xdg
mkdir -m 700 "$XDG_RUNTIME_DIR"
sock=$XDG_RUNTIME_DIR/msched/gpu0.sock
"$MSCHEDD" --idle-exit 30s >"$T/bg.out" 2>&1 ||
    fail "mschedd did not start with an empty XDG_RUNTIME_DIR: $(cat "$T/bg.out")"
pid=$(daemon_pid)
[ -n "$pid" ] || fail "msched status does not find the daemon: $("$MSCHED" status 2>&1)"
PIDS+=("$pid")
[ -S "$sock" ] || fail "no socket at $sock"
[ "$(stat -c %a "$XDG_RUNTIME_DIR/msched")" = 700 ] ||
    fail "$XDG_RUNTIME_DIR/msched has mode $(stat -c %a "$XDG_RUNTIME_DIR/msched"), not 700"
[ -f "$sock.log" ] || fail "no log beside the socket"
stop_daemon "$pid"
pass "mschedd starts in an empty XDG_RUNTIME_DIR: directory 0700, socket and log in it"

rm -rf "$XDG_RUNTIME_DIR/msched"
"$MSCHED" run --verbose -- "$T/pub/prog.sh" >"$T/xdg-run.out" 2>&1 ||
    fail "msched run failed: $(tail -n 5 "$T/xdg-run.out")"
grep -q "started mschedd on $sock" "$T/xdg-run.out" ||
    fail "msched run did not start the daemon: $(grep msched "$T/xdg-run.out" | tail -n 5)"
pid=$(daemon_pid)
[ -n "$pid" ] && PIDS+=("$pid")
joined "$T/xdg-run.out"
[ -n "$pid" ] && stop_daemon "$pid"
pass "msched run with an empty XDG_RUNTIME_DIR starts the daemon and the program joins it"

# ---- no XDG_RUNTIME_DIR, no /tmp/msched-UID -------------------------------------------------------
need_root "the /tmp/msched-UID case (a fresh user, so no real daemon is disturbed)"
new_user fresh
uid=$(id -u "$fresh")
rm -rf "/tmp/msched-$uid" # a uid reused from a removed user
unset XDG_RUNTIME_DIR
sock=/tmp/msched-$uid/gpu0.sock
as_user "$fresh" env HOME=/ "$MSCHED" run --verbose -- "$T/pub/prog.sh" >"$T/tmp-run.out" 2>&1 ||
    fail "msched run as a fresh user failed: $(tail -n 5 "$T/tmp-run.out")"
grep -q "started mschedd on $sock" "$T/tmp-run.out" ||
    fail "msched run did not start the daemon: $(grep msched "$T/tmp-run.out" | tail -n 5)"
pid=$(daemon_pid as_user "$fresh")
[ -n "$pid" ] && PIDS+=("$pid")
joined "$T/tmp-run.out"
[ "$(stat -c '%a %u' "/tmp/msched-$uid")" = "700 $uid" ] ||
    fail "/tmp/msched-$uid is $(stat -c '%a %u' "/tmp/msched-$uid"), not 700 $uid"
[ -n "$pid" ] && stop_daemon "$pid"
pass "msched run without XDG_RUNTIME_DIR or /tmp/msched-UID starts the daemon and joins it"
