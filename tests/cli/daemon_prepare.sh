#!/usr/bin/env bash
# daemon_prepare.sh - host memory ahead of a switch (docs/daemon.md, prepare_host) on the fake
# CUDA driver: while a task runs and another waits, the daemon tells it (PREPARE) how much of its
# never-evicted memory the next switch will likely evict, and its shim pins host chunks for that
# between messages, so the switch's eviction takes them from the pool instead of pinning.
#
# Two engine_stress onebuf programs (a 256 MiB buffer in 64 MiB chunks and a 32 MiB one, each)
# under a 400 MiB budget and 300 ms slices, with the fake driver taking 100 ms to pin each 64 MiB
# host chunk (MSCHED_FAKE_PIN_MS), first with prepare_host on, then off (msched config set). On:
# the daemon sent hints, each program's shim made host chunks ahead and its evictions took them
# from the pool, and every result is right. Off: no hint, no host chunk made ahead, and every
# result right. The switch times of both pairs are reported, not compared (a loaded CI machine
# makes timings noisy).
. "$(dirname "$0")/../daemon/lib.sh"

need_fake_cuda
[ -x "$MSCHEDD" ] || fail "no mschedd at $MSCHEDD"
ROUNDS=300 LIMIT=120
case "$BUILD" in *thread* | *address*) ROUNDS=8 LIMIT=300 ;; esac

start_daemon --budget 400MiB --slice 300ms --share off
"$MSCHED" config get prepare_host 2>&1 | grep -Eq "(on|true|1)" ||
    fail "prepare_host is not on by default: $("$MSCHED" config get prepare_host 2>&1)"

# pair TAG: two onebuf programs at once; both must finish with every result right.
pair() {
    local c
    for c in "$1a" "$1b"; do
        client "$c" MSCHED_FAKE_PIN_MS=100 -- "$ROUNDS" 3 onebuf
    done
    for c in "$1a" "$1b"; do
        client_done "$c" "$LIMIT" "ENGINE_ONEBUF rounds=$ROUNDS mismatches=0"
    done
}

# ahead NAME: "hints made taken" from NAME's summary (0 0 0 without the line).
ahead() {
    local a t
    a=$(sed -n 's/.*host memory ahead of evictions: \([0-9]*\) PREPARE hints ([0-9]* given up), \([0-9]*\) host chunks made ahead .*/\1 \2/p' "$T/$1.out")
    t=$(sed -n 's/.*host memory pool: \([0-9]*\) host chunks taken from it .*/\1/p' "$T/$1.out")
    echo "${a:-0 0} ${t:-0}"
}

pair on
hints_on=$(metric msched_prepare_hints_total)
sw_on=$(metric msched_switch_seconds_total)
n_on=$(metric msched_switches_total)
[ "${hints_on:-0}" -ge 1 ] || fail "prepare_host on: the daemon sent no PREPARE ($n_on switches)"
made=0 taken=0 evicts=0
for c in ona onb; do
    read -r h m k <<<"$(ahead "$c")"
    made=$((made + m)) taken=$((taken + k))
    # A shim that made host chunks ahead and was then told to evict took them from the pool (a
    # short run on a slow machine may end before its memory is ever evicted: 0 evict orders).
    e=$(sed -n 's/.*daemon: connected, .*, \([0-9]*\) evict orders,.*/\1/p' "$T/$c.out")
    evicts=$((evicts + ${e:-0}))
    [ "$m" -eq 0 ] || [ "${e:-0}" -eq 0 ] || [ "$k" -ge 1 ] ||
        fail "$c got $h hints, made $m host chunks ahead and $e evict orders, but its evictions took none from the pool: $(grep 'ahead' "$T/$c.out")"
done
# the full-length runs (not the sanitizers' 8 rounds) always switch with evictions
[ "$ROUNDS" -lt 300 ] || [ "$evicts" -ge 1 ] || fail "prepare_host on: no evict order in $ROUNDS rounds"
[ "$made" -ge 1 ] || fail "prepare_host on: no host chunk made ahead: $(grep -h 'ahead\|daemon:' "$T"/on?.out)"
pass "prepare_host on: $hints_on hints, $made host chunks made ahead, $taken taken from the pool by evictions; $n_on switches, $sw_on s switching"

"$MSCHED" config set prepare_host off >/dev/null || fail "msched config set prepare_host off failed"
pair off
hints_off=$(metric msched_prepare_hints_total)
sw_off=$(metric msched_switch_seconds_total)
n_off=$(metric msched_switches_total)
[ "$hints_off" = "$hints_on" ] || fail "prepare_host off: the daemon still sent hints ($hints_on, now $hints_off)"
for c in offa offb; do
    read -r h m k <<<"$(ahead "$c")"
    [ "$h" -eq 0 ] && [ "$m" -eq 0 ] || fail "$c: made host chunks ahead with prepare_host off: $(grep 'ahead' "$T/$c.out")"
done
pass "prepare_host off: no hint, nothing made ahead; $((n_off - n_on)) switches, $(awk -v a="$sw_off" -v b="$sw_on" 'BEGIN { printf "%.3f", a - b }') s switching"
check_log_clean
exit 0
