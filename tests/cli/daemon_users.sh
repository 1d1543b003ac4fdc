#!/usr/bin/env bash
# daemon_users.sh - one root daemon serving several users through a group socket (socket_group),
# with an admin group (admin_group), on the fake CUDA driver. Users are created here:
#
#   ua, ub     members of the socket group: their programs (engine_stress under libmsched) run
#              at once under the daemon, zero mismatches; neither may change the configuration
#              (budget, idle_exit), nor ask for a priority or weight above the user limits
#   uadm       also in the admin group: may change the configuration
#   uc         not in the socket group: cannot reach the daemon at all
. "$(dirname "$0")/../daemon/lib.sh"
need_root "the multi-user service checks"
need_fake_cuda
chmod 711 "$T"
new_group grp
new_group adm
new_user ua -G "$grp"
new_user ub -G "$grp"
new_user uadm -G "$grp,$adm"
new_user uc
export MSCHED_SOCKET=$T/svc/gpu0.sock
start_daemon --budget 48MiB --slice 20ms --socket-group "$grp" --admin-group "$adm"
[ "$(stat -c '%a %U %G' "$T/svc")" = "750 root $grp" ] ||
    fail "the socket directory is $(stat -c '%a %U %G' "$T/svc")"
[ "$(stat -c '%a %G' "$MSCHED_SOCKET")" = "660 $grp" ] ||
    fail "the socket is $(stat -c '%a %G' "$MSCHED_SOCKET")"
pass "socket_group: directory 0750 and socket 0660, owned by the group"

OPS=200
case "$BUILD" in *thread* | *address*) OPS=60 ;; esac

# prog USER NAME [VAR=VALUE...]: engine_stress as USER under libmsched, output in $T/NAME.out
prog() {
    local u=$1 name=$2
    shift 2
    as_user_bg "$u" env LD_LIBRARY_PATH="$SHIMDIR" MSCHED_REAL_LIBCUDA="$FAKELIB" \
        MS_FAKECUDA="$FAKELIB" MSCHED_VERBOSE=1 "$@" "$STRESS" "$OPS" 7 >"$T/$name.out" 2>&1 &
    local p=$!
    PIDS+=("$p")
    eval "PID_$name=$p"
}

prog "$ua" a
prog "$ub" b
both=0
for _ in $(seq 1 200); do
    out=$(as_user "$ua" "$MSCHED" status 2>&1)
    echo "$out" | awk -v a="$PID_a" -v b="$PID_b" '$2 == a { x = 1 } $2 == b { y = 1 } END { exit !(x && y) }' &&
        both=1 && break
    sleep 0.05
done
[ $both = 1 ] || fail "the two users' programs ($PID_a, $PID_b) were never listed together: $out"
wait_shim a 0 120
wait_shim b 0 120
for n in a b; do
    grep -q "mismatches=0" "$T/$n.out" || fail "$n: $(tail -n 3 "$T/$n.out")"
    grep -q "daemon: connected, [1-9][0-9]* slices" "$T/$n.out" ||
        fail "$n did not run under the daemon: $(grep msched "$T/$n.out" | tail -n 3)"
done
pass "two users' programs share the daemon: zero mismatches"

for u in "$ua" "$ub"; do
    for kv in "budget 1GiB" "idle_exit 1ms" "max_user_priority 10"; do
        # shellcheck disable=SC2086
        as_user "$u" "$MSCHED" config set $kv >"$T/set.out" 2>&1 &&
            fail "$u changed $kv: $(cat "$T/set.out")"
        grep -q "changing the configuration needs an admin" "$T/set.out" ||
            fail "$u: $(cat "$T/set.out")"
    done
    as_user "$u" "$MSCHED" config get budget | grep -q "48" || fail "$u cannot read the configuration"
done
"$MSCHED" config get budget | grep -q "48" || fail "the budget changed"
kill -0 "$DAEMON" || fail "the daemon exited"
pass "users may read the configuration but not change it, nor stop the daemon"

as_user "$uadm" "$MSCHED" config set slice 30ms >"$T/set.out" 2>&1 ||
    fail "the admin group's member could not set slice: $(cat "$T/set.out")"
"$MSCHED" config set slice 20ms >/dev/null || fail "root could not set slice"
pass "the admin group and root may change the configuration"

prog "$ua" rt MSCHED_PRIORITY=rt
prog "$ub" heavy MSCHED_WEIGHT=1000
prog "$uadm" admrt MSCHED_PRIORITY=rt
wait_shim rt 0 120
wait_shim heavy 0 120
wait_shim admrt 0 120
grep -q "the daemon refused this process: priority 10 is above max_user_priority 5" "$T/rt.out" ||
    fail "rt: $(grep msched "$T/rt.out" | tail -n 3)"
grep -q "the daemon refused this process: weight 1000 is above max_user_weight 10" "$T/heavy.out" ||
    fail "heavy: $(grep msched "$T/heavy.out" | tail -n 3)"
grep -q "daemon: connected, [1-9][0-9]* slices" "$T/admrt.out" ||
    fail "the admin's rt program did not run under the daemon: $(grep msched "$T/admrt.out" | tail -n 3)"
pass "priority and weight above the user limits: refused for users, allowed for admins"

as_user "$uc" "$MSCHED" status >"$T/uc.out" 2>&1 && fail "a user outside the group reached the daemon"
grep -q "Permission denied" "$T/uc.out" || fail "uc: $(cat "$T/uc.out")"
pass "a user outside the socket group cannot connect"
check_log_clean
