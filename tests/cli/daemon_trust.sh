#!/usr/bin/env bash
# daemon_trust.sh - no trust in shared directories, against another local user (created here):
#
#   log link       that user pre-creates the daemon's default socket directory with a link where
#                  the log goes: a root daemon refuses the directory and writes nothing through
#                  the link
#   nofollow       a --log-file or --config that is a link is refused (O_NOFOLLOW)
#   sticky         a socket directory others may write is refused even with the sticky bit
#   squatter       that user listens where a client looks for the daemon and answers like one
#                  (tests/daemon/fake_daemon --squat: WELCOME, never RUN): `msched status` and a
#                  program under libmsched refuse it in one line, give away no HELLO, and do
#                  not hang; in the user's own directory, in a sticky shared one, and moved
#                  into root's own directory (only the listener's credentials tell)
. "$(dirname "$0")/../daemon/lib.sh"
need_root "the hostile-user checks"
FAKED=$BUILD/tests/fake_daemon
[ -x "$FAKED" ] || fail "no fake daemon at $FAKED (make test builds it)"
unset MSCHED_SOCKET XDG_RUNTIME_DIR
chmod 711 "$T"
new_user evil
mkdir -m 700 "$T/own"

# ---- log link -------------------------------------------------------------------------------
mkdir -m 711 "$T/xdg"
mkdir -m 755 "$T/xdg/msched"
chown "$evil" "$T/xdg/msched"
as_user "$evil" ln -s "$T/target" "$T/xdg/msched/gpu0.sock.log"
XDG_RUNTIME_DIR=$T/xdg timeout 20 "$MSCHEDD" --idle-exit 2s >"$T/link.out" 2>&1
rc=$?
[ -e "$T/target" ] && fail "the daemon wrote through the link (rc $rc): $(cat "$T/target")"
[ $rc -eq 1 ] || fail "the daemon accepted another user's directory (rc $rc): $(cat "$T/link.out")"
grep -q "belongs to uid $(id -u "$evil")" "$T/link.out" ||
    fail "no clear reason: $(cat "$T/link.out")"
pass "a socket directory planted by another user is refused; nothing written through its link"

# ---- nofollow ---------------------------------------------------------------------------------
mkdir -m 755 "$T/evil"
chown "$evil" "$T/evil"
as_user "$evil" ln -s "$T/target2" "$T/evil/d.log"
timeout 20 "$MSCHEDD" --socket "$T/own/a.sock" --log-file "$T/evil/d.log" --idle-exit 2s \
    >"$T/nofollow.out" 2>&1
rc=$?
[ -e "$T/target2" ] && fail "the daemon logged through a link (rc $rc)"
[ $rc -eq 1 ] || fail "a log file that is a link was accepted (rc $rc)"
grep -q "symbolic link" "$T/nofollow.out" || fail "no clear reason: $(cat "$T/nofollow.out")"
echo "slice = 50ms" >"$T/real.conf"
as_user "$evil" ln -s "$T/real.conf" "$T/evil/c.conf"
timeout 20 "$MSCHEDD" --socket "$T/own/b.sock" --config "$T/evil/c.conf" --idle-exit 2s \
    >"$T/conf.out" 2>&1
rc=$?
[ $rc -ne 0 ] || fail "a configuration file that is a link was read"
grep -q "symbolic link" "$T/conf.out" || fail "no clear reason: $(cat "$T/conf.out")"
pass "a log or configuration file that is a link is refused"

# ---- sticky -------------------------------------------------------------------------------------
mkdir -m 1777 "$T/pub"
timeout 20 "$MSCHEDD" --socket "$T/pub/gpu0.sock" --idle-exit 2s >"$T/sticky.out" 2>&1
rc=$?
[ $rc -eq 1 ] || fail "a world-writable sticky directory was accepted (rc $rc)"
grep -q "writable by others" "$T/sticky.out" || fail "no clear reason: $(cat "$T/sticky.out")"
pass "a socket directory others may write is refused, sticky bit or not"

# ---- squatter ---------------------------------------------------------------------------------
# squat NAME PATH: the other user's listener on PATH, its output in $T/NAME.sq
squat() {
    as_user_bg "$evil" "$FAKED" "$2" --squat --timeout 120 >"$T/$1.sq" 2>&1 &
    PIDS+=("$!")
    for _ in $(seq 1 100); do
        [ -S "$2" ] && return 0
        sleep 0.05
    done
    fail "the squatter did not listen on $2: $(cat "$T/$1.sq")"
}

# refused NAME WHAT: `msched status` on $MSCHED_SOCKET fails at once with one line saying WHAT,
# and the squatter got no HELLO.
refused() {
    timeout 20 "$MSCHED" status >"$T/$1.st" 2>&1
    local rc=$?
    [ $rc -eq 1 ] || fail "$1: msched status exited $rc: $(cat "$T/$1.st")"
    [ "$(wc -l <"$T/$1.st")" -eq 1 ] || fail "$1: not one line: $(cat "$T/$1.st")"
    grep -q "msched: refusing the daemon socket $MSCHED_SOCKET: $2" "$T/$1.st" ||
        fail "$1: $(cat "$T/$1.st")"
}

mkdir -m 755 "$T/sq"
chown "$evil" "$T/sq"
squat own "$T/sq/gpu0.sock"
export MSCHED_SOCKET=$T/sq/gpu0.sock
refused own "its directory belongs to uid $(id -u "$evil")"
need_fake_cuda
env LD_LIBRARY_PATH="$BUILD/lib/msched" MSCHED_REAL_LIBCUDA="$BUILD/lib/fakecuda/libcuda.so.1" \
    MS_FAKECUDA="$BUILD/lib/fakecuda/libcuda.so.1" timeout 30 "$STRESS" 3 1 cycle \
    >"$T/prog.out" 2>&1
rc=$?
[ $rc -ne 124 ] || fail "the program hung on the squatter"
[ $rc -eq 0 ] && grep -q ENGINE_CYCLE "$T/prog.out" || fail "the program failed: $(tail -n 5 "$T/prog.out")"
[ "$(grep -c "refusing the daemon socket" "$T/prog.out")" -eq 1 ] ||
    fail "the program did not say it once: $(grep msched "$T/prog.out")"
grep -q "HELLO" "$T/own.sq" && fail "the squatter learned: $(grep HELLO "$T/own.sq")"
pass "a listener in another user's directory: refused in one line, no HELLO, no hang"

squat shared "$T/pub/sq.sock"
export MSCHED_SOCKET=$T/pub/sq.sock
refused shared "it belongs to uid $(id -u "$evil")"
grep -q "HELLO" "$T/shared.sq" && fail "the squatter learned: $(grep HELLO "$T/shared.sq")"
pass "another user's socket in a sticky shared directory: refused"

# Moved into root's own directory as root's file (as a hard link, a bind mount or a race
# could): only the listener's credentials tell.
mkdir -m 755 "$T/sq2"
chown "$evil" "$T/sq2"
squat moved "$T/sq2/h.sock"
ln "$T/sq2/h.sock" "$T/own/gpu0.sock"
chown root "$T/own/gpu0.sock"
export MSCHED_SOCKET=$T/own/gpu0.sock
refused moved "its listener (pid [0-9]*) runs as uid $(id -u "$evil")"
for _ in $(seq 1 40); do
    grep -q "connection" "$T/moved.sq" && break
    sleep 0.05
done
grep -q "connection" "$T/moved.sq" || fail "the check did not even connect (a test problem)"
grep -q "HELLO" "$T/moved.sq" && fail "the squatter learned: $(grep HELLO "$T/moved.sq")"
pass "another user's listener behind root's own file: refused by its credentials"
