#!/usr/bin/env bash
# daemon_threads.sh - 64 threads of one process race kernels, copies, allocations and frees
# under mschedd (tests/shim/thread_race.c), beside a cycling client, on the fake CUDA driver
# whose non-resident memory is PROT_NONE: a command admitted by the daemon-mode gate must keep
# its memory until the driver has it, whatever the other threads' commands and the daemon's
# orders do (docs/daemon.md, threat model: "threads cannot lose data"). Zero mismatches, zero
# errors, and the process ran under the daemon the whole time. The alone-mode twin is
# tests/shim's engine/thread-race.
. "$(dirname "$0")/../daemon/lib.sh"

SHIMDIR=$BUILD/lib/msched
FAKELIB=$BUILD/lib/fakecuda/libcuda.so.1
RACE=$BUILD/tests/shim/thread_race
STRESS=$BUILD/tests/shim/engine_stress
if [ ! -e "$SHIMDIR/libcuda.so.1" ] || [ ! -e "$FAKELIB" ] || [ ! -x "$RACE" ] ||
    [ ! -x "$STRESS" ]; then
    echo "SKIP: libmsched, the fake driver or the test programs are not built (no CUDA headers?)"
    exit 0
fi
[ -x "$MSCHEDD" ] || fail "no mschedd at $MSCHEDD"

ROUNDS=20 CYCLE=200 LIMIT=240
case "$BUILD" in
*thread* | *address*) ROUNDS=4 CYCLE=40 LIMIT=500 ;;
esac

run_bg() { # NAME CMD...: under libmsched on the fake driver, in the background
    local name=$1
    shift
    env LD_LIBRARY_PATH="$SHIMDIR" MSCHED_REAL_LIBCUDA="$FAKELIB" MS_FAKECUDA="$FAKELIB" \
        MSCHED_VERBOSE=1 "$@" >"$T/$name.out" 2>&1 &
    local p=$!
    PIDS+=("$p")
    eval "PID_$name=$p"
}

# The budget (48 MiB) is far below the racer's footprint (64 threads x 4 MiB) and the cycle's.
start_daemon --budget 48MiB --slice 20ms
run_bg cycle "$STRESS" "$CYCLE" 3 cycle
run_bg race "$RACE" 64 "$ROUNDS"
wait_shim race 0 "$LIMIT"
wait_shim cycle 0 "$LIMIT"
grep -q "THREAD_RACE threads=64 .*mismatches=0 errors=0" "$T/race.out" ||
    fail "race: $(grep -E 'THREAD_RACE|FAIL|msched' "$T/race.out" | tail -n 3)"
grep -q "daemon: connected, [1-9][0-9]* slices" "$T/race.out" ||
    fail "the racer did not run under the daemon: $(grep msched "$T/race.out" | tail -n 3)"
grep -q "ENGINE_CYCLE" "$T/cycle.out" || fail "cycle: $(tail -n 3 "$T/cycle.out")"
pass "64 threads racing under the daemon beside another client: zero mismatches, zero errors"
