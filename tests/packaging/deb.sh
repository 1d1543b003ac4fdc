#!/usr/bin/env bash
# tests/packaging/deb.sh - the Debian package installs, works and removes cleanly. It changes the
# system (dpkg -i as root), so `make test` does not run it; .ci/run does, after the test suite.
#
#   build     packaging/build-deb.sh makes msched_<version>_<arch>.deb from the plain build
#   install   dpkg -i: msched and mschedd on the PATH in /usr/bin, their man pages found by man
#   run       `msched demo` from the package in a scratch directory: the table and the plot;
#             the installed `msched run` puts /usr/lib/msched first on the library path
#   systemd   mschedd.service (naming /usr/bin/mschedd and /etc/msched/msched.conf) and
#             mschedd.socket in /usr/lib/systemd/system, verified by systemd-analyze when there;
#             /etc/msched/msched.conf a conffile that mschedd parses
#   remove    dpkg -r: every file the package listed is gone but the conffile; dpkg -P
#             removes that too, and dpkg keeps no trace of the package
# Ends with "N passed, N failed"; exits non-zero on a failure. Needs root (skips otherwise) and
# refuses to touch a system where a package named msched is already installed.
set -u
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
pass=0
fail=0
ok() {
    pass=$((pass + 1))
    echo "ok: $*"
}
bad() {
    fail=$((fail + 1))
    echo "FAIL: $*"
}
if [ "$(id -u)" -ne 0 ]; then
    echo "SKIP: dpkg -i needs root"
    echo "0 passed, 0 failed"
    exit 0
fi
if dpkg-query -W -f='${Status}' msched 2>/dev/null | grep -q "installed"; then
    echo "FAIL: a package msched is already installed here; not touching it"
    echo "0 passed, 1 failed"
    exit 1
fi
T=$(mktemp -d)
installed=0
cleanup() {
    [ "$installed" = 1 ] && dpkg -P msched >/dev/null 2>&1
    rm -rf "$T"
}
trap cleanup EXIT

deb=$(BUILD=$BUILD packaging/build-deb.sh "$T/deb" 2>"$T/build.err" | tail -n 1)
if [ -f "$deb" ]; then
    ok "built $(basename "$deb")"
else
    bad "build-deb.sh: $(tail -n 5 "$T/build.err")"
    echo "$pass passed, $fail failed"
    exit 1
fi

if dpkg -i "$deb" >"$T/dpkg.out" 2>&1; then
    installed=1
    ok "dpkg -i"
else
    bad "dpkg -i: $(tail -n 5 "$T/dpkg.out")"
    echo "$pass passed, $fail failed"
    exit 1
fi
dpkg -L msched >"$T/files"
[ "$(command -v msched)" = /usr/bin/msched ] && [ -x /usr/bin/mschedd ] &&
    ok "msched and mschedd in /usr/bin" || bad "not on the PATH: $(command -v msched)"
if command -v man >/dev/null; then
    [ "$(man -w msched 2>/dev/null)" = /usr/share/man/man1/msched.1.gz ] &&
        ok "man msched finds the page" || bad "man -w msched: $(man -w msched 2>&1)"
fi

mkdir "$T/work"
(cd "$T/work" && /usr/bin/msched demo >"$T/demo.out" 2>"$T/demo.err")
rc=$?
if [ "$rc" -eq 0 ] && grep -q "^  opt " "$T/demo.out" && [ -s "$T/work/msched-demo.svg" ]; then
    ok "msched demo from the package: table and plot"
else
    bad "msched demo: exit $rc: $(tail -n 3 "$T/demo.err")"
fi
ldp=$(/usr/bin/msched run --no-daemon -- sh -c 'echo "$LD_LIBRARY_PATH"' 2>&1)
[ "$(realpath -m "${ldp%%:*}")" = /usr/lib/msched ] && ok "msched run uses /usr/lib/msched" ||
    bad "msched run: library path '$ldp'"

U=/usr/lib/systemd/system
if [ -f $U/mschedd.service ] && [ -f $U/mschedd.socket ] &&
    grep -q "^ExecStart=/usr/bin/mschedd --foreground --config /etc/msched/msched.conf$" \
        $U/mschedd.service; then
    ok "systemd units in $U"
else
    bad "systemd units: $(ls $U/mschedd.* 2>&1)"
fi
if command -v systemd-analyze >/dev/null; then
    systemd-analyze verify --man=no $U/mschedd.socket $U/mschedd.service >"$T/verify.out" 2>&1 &&
        ok "systemd-analyze verify" || bad "systemd-analyze verify: $(tail -n 5 "$T/verify.out")"
fi
grep -qx /etc/msched/msched.conf /var/lib/dpkg/info/msched.conffiles 2>/dev/null &&
    ok "/etc/msched/msched.conf is a conffile" || bad "no conffile /etc/msched/msched.conf"
/usr/bin/mschedd --foreground --config /etc/msched/msched.conf --socket "$T/c.sock" \
    --metrics-listen "" >"$T/conf.out" 2>&1 &
cpid=$!
for _ in $(seq 1 50); do
    [ -S "$T/c.sock" ] && break
    sleep 0.1
done
if [ -S "$T/c.sock" ]; then ok "mschedd runs with /etc/msched/msched.conf"; else
    bad "mschedd with /etc/msched/msched.conf: $(cat "$T/conf.out")"
fi
kill "$cpid" 2>/dev/null
wait "$cpid" 2>/dev/null

if dpkg -r msched >"$T/dpkg.out" 2>&1; then
    installed=0
    ok "dpkg -r"
else
    bad "dpkg -r: $(tail -n 5 "$T/dpkg.out")"
fi
left=""
while read -r f; do
    [ -d "$f" ] && [ ! -L "$f" ] && continue
    [ "$f" = /etc/msched/msched.conf ] && continue
    [ -e "$f" ] || [ -L "$f" ] && left="$left $f"
done <"$T/files"
for d in /usr/lib/msched /usr/share/doc/msched; do
    [ -e "$d" ] && left="$left $d"
done
[ -z "$left" ] && ok "dpkg -r removed every file but the conffile" || bad "left after dpkg -r:$left"
[ -f /etc/msched/msched.conf ] && ok "dpkg -r keeps the conffile" || bad "dpkg -r removed the conffile"
dpkg -P msched >"$T/dpkg.out" 2>&1 || bad "dpkg -P: $(tail -n 5 "$T/dpkg.out")"
[ ! -e /etc/msched/msched.conf ] && [ ! -e /etc/msched ] && ok "dpkg -P removed /etc/msched" ||
    bad "left after dpkg -P: $(ls -la /etc/msched 2>&1)"
status=$(dpkg-query -W -f='${Status}' msched 2>/dev/null)
case $status in
"" | *not-installed*) ok "dpkg keeps no trace ($status)" ;;
*) bad "dpkg status after removal: $status" ;;
esac

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
