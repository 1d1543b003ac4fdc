#!/usr/bin/env bash
# install.sh - `make install DESTDIR=... PREFIX=/usr` and `make uninstall`, and the installed
# programs at work on the fake CUDA driver.
#
#   layout       msched and mschedd in usr/bin, libmsched (libcuda.so.1, libcuda.so,
#                libmsched.so) in usr/lib/msched, man pages msched.1 and mschedd.1 that name
#                every command, bash completion, the LICENSE
#   completion   the installed completion completes commands, a command's options and values
#   run          the installed `msched run` puts the installed libmsched first on the library
#                path, and a test program under it on the fake driver joins an mschedd that the
#                installed msched started from the installed bindir, and finishes intact
#   LIBDIR       with LIBDIR=/usr/lib64 the library goes there and <bindir>/../lib/msched links to
#                it (where `msched run` looks)
#   uninstall    removes every file install put there
# The build directory's sanitizers are kept (make is called with the SANITIZE its name says).
. "$(dirname "$0")/../daemon/lib.sh"

SHIMDIR=$BUILD/lib/msched
FAKELIB=$BUILD/lib/fakecuda/libcuda.so.1
STRESS=$BUILD/tests/shim/engine_stress
if [ ! -e "$SHIMDIR/libcuda.so.1" ] || [ ! -e "$FAKELIB" ] || [ ! -x "$STRESS" ]; then
    echo "SKIP: libmsched, the fake driver or its test programs are not built (no CUDA headers?)"
    exit 0
fi
san=${BUILD##*/}
san=${san#build}
san=${san#-}
san=${san//-/,}

# mk TARGET VAR=VALUE...: the top-level make, quiet, outside the make that runs the tests.
mk() {
    env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -C "$ROOT" --no-print-directory \
        SANITIZE="$san" "$@" >"$T/make.out" 2>&1 || fail "make $*: $(tail -n 5 "$T/make.out")"
}

D=$T/dest
mk install DESTDIR="$D" PREFIX=/usr
for f in usr/bin/msched usr/bin/mschedd usr/lib/msched/libcuda.so.1 usr/lib/msched/libmsched.so \
    usr/share/man/man1/msched.1 usr/share/man/man1/mschedd.1 \
    usr/share/bash-completion/completions/msched usr/share/doc/msched/LICENSE \
    usr/lib/systemd/system/mschedd.service usr/lib/systemd/system/mschedd.socket \
    etc/msched/msched.conf; do
    [ -f "$D/$f" ] || fail "install did not write $f: $(find "$D" | sort)"
done
[ "$(readlink "$D/usr/lib/msched/libcuda.so")" = libcuda.so.1 ] || fail "no libcuda.so link"
[ -x "$D/usr/bin/msched" ] && [ -x "$D/usr/bin/mschedd" ] || fail "binaries not executable"
grep -q "^\.TH MSCHED 1" "$D/usr/share/man/man1/msched.1" || fail "msched.1 is not a man page"
for c in run status top config sim demo; do
    grep -q "^\.SS $c$" "$D/usr/share/man/man1/msched.1" || fail "msched.1 lacks the command $c"
done
grep -q "idle_exit" "$D/usr/share/man/man1/mschedd.1" || fail "mschedd.1 lacks the option table"
if command -v groff >/dev/null; then
    groff -man -Tutf8 -ww -z "$D/usr/share/man/man1/msched.1" 2>"$T/groff.err"
    [ -s "$T/groff.err" ] && fail "groff warns on msched.1: $(head -n 3 "$T/groff.err")"
fi
grep -q "MIT License" "$D/usr/share/doc/msched/LICENSE" || fail "LICENSE"
grep -q "^ExecStart=/usr/bin/mschedd --foreground --config /etc/msched/msched.conf$" \
    "$D/usr/lib/systemd/system/mschedd.service" || fail "mschedd.service: $(grep Exec "$D/usr/lib/systemd/system/mschedd.service")"
# An administrator's configuration survives a new install and an uninstall.
echo "budget = 1GiB" >>"$D/etc/msched/msched.conf"
mk install DESTDIR="$D" PREFIX=/usr
grep -q "^budget = 1GiB$" "$D/etc/msched/msched.conf" || fail "install replaced a changed msched.conf"
pass "install: binaries, libmsched, man pages, completion, LICENSE, systemd units, msched.conf"

# complete WORDS...: what the installed completion offers for the last word.
complete_words() {
    PATH="$D/usr/bin:$PATH" bash -c '
        . "$1"; shift
        COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1))
        _msched; printf "%s\n" "${COMPREPLY[@]}"' _ \
        "$D/usr/share/bash-completion/completions/msched" "$@"
}
[ "$(complete_words msched s | tr '\n' ' ')" = "status sim " ] ||
    fail "completion of 'msched s': $(complete_words msched s)"
complete_words msched sim --wor | grep -qx -- --workload || fail "completion of 'sim --wor'"
complete_words msched top --so | grep -qx -- --socket || fail "completion of 'top --so'"
[ "$(complete_words msched sim --workload r)" = random ] || fail "completion of a workload"
complete_words msched config set sl | grep -qx slice || fail "completion of a config key"
pass "completion: commands, options, values, config keys"

# The installed msched puts the installed libmsched first on the library path.
out=$("$D/usr/bin/msched" run --no-daemon -- sh -c 'echo "LDP=$LD_LIBRARY_PATH"') ||
    fail "installed msched run: $out"
ldp=$(sed -n 's/^LDP=//p' <<<"$out")
[ "$(realpath "${ldp%%:*}")" = "$(realpath "$D/usr/lib/msched")" ] ||
    fail "installed msched run: library path $ldp"

# A program under the installed msched run, on the fake driver, joins the daemon that the
# installed msched started.
env MSCHED_REAL_LIBCUDA="$FAKELIB" MS_FAKECUDA="$FAKELIB" MSCHED_VERBOSE=1 \
    "$D/usr/bin/msched" run --verbose -- "$STRESS" 4 1 cycle >"$T/run.out" 2>&1 &
PID_run=$!
PIDS+=("$PID_run")
wait_shim run 0 90
grep -q "started mschedd on $MSCHED_SOCKET" "$T/run.out" || fail "no daemon started: $(tail -n 5 "$T/run.out")"
grep -q "ENGINE_CYCLE" "$T/run.out" || fail "the program did not finish: $(tail -n 5 "$T/run.out")"
grep -q "daemon: connected, [1-9][0-9]* slices" "$T/run.out" ||
    fail "the program did not run under the daemon: $(grep msched "$T/run.out" | tail -n 3)"
dpid=$("$D/usr/bin/msched" status | sed -n 's/.*mschedd pid \([0-9]*\).*/\1/p' | head -n 1)
[ -n "$dpid" ] || fail "installed msched status does not find the daemon"
PIDS+=("$dpid")
[ "$(readlink "/proc/$dpid/exe")" = "$(realpath "$D/usr/bin/mschedd")" ] ||
    fail "the daemon is $(readlink "/proc/$dpid/exe"), not the installed mschedd"
kill "$dpid"
pass "installed msched run: the program joins the installed mschedd on the fake driver"

mk uninstall DESTDIR="$D" PREFIX=/usr
left=$(find "$D" -not -type d)
[ "$left" = "$D/etc/msched/msched.conf" ] || fail "uninstall left: $left"
rm "$D/etc/msched/msched.conf"
pass "uninstall removes every installed file but a changed msched.conf"

D2=$T/dest64
mk install DESTDIR="$D2" PREFIX=/usr LIBDIR=/usr/lib64
[ -f "$D2/usr/lib64/msched/libcuda.so.1" ] || fail "LIBDIR: no library in usr/lib64/msched"
[ "$(readlink "$D2/usr/lib/msched")" = /usr/lib64/msched ] ||
    fail "LIBDIR: usr/lib/msched does not link to /usr/lib64/msched"
mk uninstall DESTDIR="$D2" PREFIX=/usr LIBDIR=/usr/lib64
left=$(find "$D2" -not -type d)
[ -z "$left" ] || fail "uninstall (LIBDIR) left: $left"
pass "LIBDIR=/usr/lib64: the library there, linked from where msched run looks"
