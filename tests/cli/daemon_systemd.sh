#!/usr/bin/env bash
# daemon_systemd.sh - mschedd under a service manager, with tests/daemon/sd_helper.py playing
# systemd's part (socket activation and the notification socket) on the daemon's real code.
#
#   activation   the helper holds the socket; a client's connection starts mschedd with it
#                as fd 3 (LISTEN_FDS, LISTEN_PID); the daemon serves it, says READY=1 (and
#                "socket activated") on NOTIFY_SOCKET, exits after idle_exit leaving the socket
#                file to the helper, and the next connection starts it again
#   notify       SIGHUP sends RELOADING=1 with MONOTONIC_USEC, then READY=1; SIGTERM STOPPING=1
#   reload       SIGHUP re-reads the file: a runtime option (budget) changes, a flag (--slice)
#                still wins over the file, a fixed option (max_tasks) is named in a warning and
#                kept, and a file that does not parse changes nothing
#   save         `msched config set --save` changes the daemon and the file (comments kept, the
#                key's line replaced once); a fixed option goes to the file only; a bad value
#                to neither
#   journal      with JOURNAL_STREAM naming its stderr, lines are "<6>info: ..." with no time
#                of their own; naming another file, the usual format
#   units        packaging/systemd's units pass `systemd-analyze verify` (when it is there),
#                and the shipped msched.conf is one mschedd reads
. "$(dirname "$0")/../daemon/lib.sh"
[ -x "$MSCHEDD" ] || fail "no mschedd at $MSCHEDD"
HELPER="$ROOT/tests/daemon/sd_helper.py"
SD=$T/sd.log
N=$T/notify.sock

cat >"$T/d.conf" <<CONF
# a test configuration
budget = 1GiB
slice = 50ms
idle_exit = 1s
CONF

# helper_pid_of N: the pid of the Nth start (bounded wait).
started() {
    local n=$1 i p
    for i in $(seq 1 100); do
        p=$(awk '$1 == "started" { print $2 }' "$SD" 2>/dev/null | sed -n "${n}p")
        [ -n "$p" ] && { echo "$p"; return 0; }
        sleep 0.05
    done
    return 1
}
# wait_log FILE PATTERN: until FILE has a line matching PATTERN (bounded).
wait_log() {
    local i
    for i in $(seq 1 200); do
        grep -q -- "$2" "$1" 2>/dev/null && return 0
        sleep 0.05
    done
    return 1
}

# ---- activation ------------------------------------------------------------------------------
python3 "$HELPER" --listen "$MSCHED_SOCKET" --notify "$N" --log "$SD" --starts 2 -- \
    "$MSCHEDD" --foreground --check --log-level info --config "$T/d.conf" --slice 30ms \
    >>"$T/daemon.log" 2>&1 &
HPID=$!
PIDS+=("$HPID")
for i in $(seq 1 100); do [ -S "$MSCHED_SOCKET" ] && break; sleep 0.05; done
[ -S "$MSCHED_SOCKET" ] || fail "the helper did not bind the socket"
[ -z "$(awk '$1 == "started"' "$SD" 2>/dev/null)" ] || fail "started before any connection"
"$MSCHED" status >"$T/st.out" 2>&1 || fail "msched status through an activated daemon: $(cat "$T/st.out")"
p1=$(started 1) || fail "no daemon was started: $(cat "$SD")"
PIDS+=("$p1")
wait_log "$SD" "notify $p1: READY=1|STATUS=serving GPU 0 on $MSCHED_SOCKET (socket activated)" ||
    fail "no READY=1 from the activated daemon: $(cat "$SD")"
grep -q "of 1.00 GiB budget" "$T/st.out" || fail "the configuration file was not read: $(cat "$T/st.out")"
wait_log "$SD" "^exited $p1 0$" || fail "the daemon did not exit after idle_exit: $(cat "$SD")"
[ -S "$MSCHED_SOCKET" ] || fail "the daemon removed the socket it was passed"
"$MSCHED" status >/dev/null 2>&1 || fail "msched status after the idle exit"
p2=$(started 2) || fail "the next connection did not start the daemon again: $(cat "$SD")"
PIDS+=("$p2")
pass "socket activation: started at the first connection, READY=1, idle exit keeps the socket, started again"

# ---- notify and reload -----------------------------------------------------------------------
# Keep a client connected so that idle_exit does not end this daemon meanwhile.
build_fake
shim keeper --chunks 1 --work 100000
wait_log "$T/daemon.log" "task .*'keeper'" || fail "the keeper did not register"
[ "$("$MSCHED" config get slice)" = "slice = 30ms" ] || fail "slice: $("$MSCHED" config get slice)"
cat >"$T/d.conf" <<CONF
# a test configuration, changed
budget = 2GiB
slice = 70ms
idle_exit = 1s
max_tasks = 99
CONF
kill -HUP "$p2"
wait_log "$SD" "notify $p2: RELOADING=1|MONOTONIC_USEC=[0-9]" || fail "no RELOADING=1: $(cat "$SD")"
wait_log "$T/daemon.log" "SIGHUP: configuration reloaded" || fail "no reload"
[ "$("$MSCHED" config get budget)" = "budget = 2GiB" ] ||
    fail "budget after SIGHUP: $("$MSCHED" config get budget)"
[ "$("$MSCHED" config get slice)" = "slice = 30ms" ] ||
    fail "the command line's --slice did not win over the file: $("$MSCHED" config get slice)"
grep -q "warn: SIGHUP: max_tasks = 99 takes effect at a restart (keeping 256)" "$T/daemon.log" ||
    fail "no warning about max_tasks"
[ "$("$MSCHED" config get max_tasks)" = "max_tasks = 256" ] || fail "max_tasks changed live"
[ "$(grep -c "notify $p2: READY=1" "$SD")" -ge 2 ] || fail "no READY=1 after the reload: $(cat "$SD")"
printf 'budget = lots\n' >"$T/d.conf"
kill -HUP "$p2"
wait_log "$T/daemon.log" "configuration not reloaded, the running one stays: .*line 1" ||
    fail "a broken file was not reported"
[ "$("$MSCHED" config get budget)" = "budget = 2GiB" ] || fail "a broken file changed the budget"
pass "SIGHUP: RELOADING=1 then READY=1; budget reloaded, the flag wins, max_tasks waits, a bad file changes nothing"

# ---- save ------------------------------------------------------------------------------------
cat >"$T/d.conf" <<CONF
# the operator's comment
budget = 2GiB
slice = 70ms
budget = 2GiB
idle_exit = 1s
CONF
out=$("$MSCHED" config set --save --config "$T/d.conf" budget 3072MiB) || fail "set --save: $out"
[ "$out" = "budget = 3GiB" ] || fail "set --save printed: $out"
[ "$("$MSCHED" config get budget)" = "budget = 3GiB" ] || fail "the daemon did not take it"
grep -q "^# the operator's comment$" "$T/d.conf" || fail "the comment was lost: $(cat "$T/d.conf")"
[ "$(grep -c '^budget' "$T/d.conf")" -eq 1 ] && grep -q '^budget = 3GiB$' "$T/d.conf" ||
    fail "the file after --save: $(cat "$T/d.conf")"
out=$("$MSCHED" config set --save --config "$T/d.conf" max_tasks 77) || fail "fixed --save: $out"
echo "$out" | grep -q "fixed while the daemon runs; saved to $T/d.conf" || fail "fixed: $out"
grep -q '^max_tasks = 77$' "$T/d.conf" || fail "max_tasks not saved: $(cat "$T/d.conf")"
cp "$T/d.conf" "$T/d.before"
if "$MSCHED" config set --save --config "$T/d.conf" budget lots >"$T/bad.out" 2>&1; then
    fail "a bad value was accepted"
fi
cmp -s "$T/d.conf" "$T/d.before" || fail "a refused value changed the file"
MSCHED_CONFIG="$T/env.conf" "$MSCHED" config set --save policy prio >/dev/null ||
    fail "--save to \$MSCHED_CONFIG"
grep -q '^policy = prio$' "$T/env.conf" || fail "MSCHED_CONFIG was not written"
kill -HUP "$p2"
wait_log "$T/daemon.log" "max_tasks = 77 takes effect at a restart" || fail "no reload of the saved file"
[ "$("$MSCHED" config get budget)" = "budget = 3GiB" ] || fail "the saved file reloaded differently"
pass "config set --save: daemon and file agree; fixed options go to the file; bad values nowhere"

kill "$PID_keeper" 2>/dev/null
kill -TERM "$p2"
wait_log "$SD" "notify $p2: STOPPING=1" || fail "no STOPPING=1: $(cat "$SD")"
wait_log "$SD" "^exited $p2 0$" || fail "the daemon did not stop: $(cat "$SD")"
pass "SIGTERM: STOPPING=1, exit 0"

# ---- journal ---------------------------------------------------------------------------------
J=$T/journal.out
: >"$J"
JOURNAL_STREAM=$(stat -c '%d:%i' "$J") "$MSCHEDD" --foreground --log-level info \
    --socket "$T/j.sock" 2>>"$J" &
JP=$!
PIDS+=("$JP")
wait_log "$J" "serving GPU" || fail "no log line: $(cat "$J")"
kill "$JP"
wait "$JP"
grep -q "^<6>info: serving GPU 0 on $T/j.sock" "$J" || fail "journal format: $(head -n 3 "$J")"
grep -q "^<6>info: signal 15: shutting down$" "$J" || fail "journal format: $(tail -n 3 "$J")"
if grep -v '^<[3467]>' "$J"; then fail "a line without a priority prefix"; fi
if grep -q "mschedd\[" "$J"; then fail "a line with its own pid: $(grep "mschedd\[" "$J")"; fi
: >"$T/other.out"
J2=$T/plain.out
JOURNAL_STREAM=$(stat -c '%d:%i' "$T/other.out") "$MSCHEDD" --foreground --log-level info \
    --socket "$T/j.sock" 2>"$J2" &
JP=$!
PIDS+=("$JP")
wait_log "$J2" "serving GPU" || fail "no log line"
kill "$JP"
wait "$JP"
grep -Eq "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+ mschedd\[$JP\] info: serving GPU" "$J2" ||
    fail "a JOURNAL_STREAM that is not stderr changed the format: $(head -n 1 "$J2")"
pass "JOURNAL_STREAM: <N> priority prefixes and no timestamps when stderr is the journal"

# ---- units -----------------------------------------------------------------------------------
mkdir -p "$T/units"
sed -e "s|@BINDIR@|$BUILD/bin|g" -e "s|@SYSCONFDIR@|$T/etc|g" \
    "$ROOT/packaging/systemd/mschedd.service.in" >"$T/units/mschedd.service"
cp "$ROOT/packaging/systemd/mschedd.socket" "$T/units/"
grep -q "^ExecStart=$BUILD/bin/mschedd --foreground --config $T/etc/msched/msched.conf$" \
    "$T/units/mschedd.service" || fail "ExecStart: $(grep ExecStart "$T/units/mschedd.service")"
grep -q "^Type=notify$" "$T/units/mschedd.service" || fail "not Type=notify"
[ "$(sed -n 's/^ListenStream=//p' "$T/units/mschedd.socket")" = \
    "$(sed -n 's/^socket = //p' "$ROOT/packaging/systemd/msched.conf")" ] ||
    fail "the socket unit and msched.conf name different sockets"
if command -v systemd-analyze >/dev/null; then
    systemd-analyze verify --man=no "$T/units/mschedd.socket" "$T/units/mschedd.service" \
        >"$T/verify.out" 2>&1 || fail "systemd-analyze verify: $(cat "$T/verify.out")"
    pass "systemd-analyze verify: mschedd.socket, mschedd.service"
else
    echo "note: no systemd-analyze here; the units are not verified"
fi
"$MSCHEDD" --foreground --config "$ROOT/packaging/systemd/msched.conf" --socket "$T/u.sock" \
    --log-level info >"$T/u.out" 2>&1 &
UP=$!
PIDS+=("$UP")
wait_log "$T/u.out" "serving GPU 0 on $T/u.sock: budget 16GiB" || fail "msched.conf: $(cat "$T/u.out")"
kill "$UP"
pass "packaging/systemd/msched.conf is read by mschedd"
check_log_clean
