#!/usr/bin/env bash
# daemon_capture_begin.sh - a stream capture that begins while mschedd stops its task must not be
# invalidated by the stop's drain (shim/client_orders.c, ms__cl_drain). tests/shim/capture.c
# (its capture begins right after its last command before it) runs again and again beside a busy
# cycling client under a 20 ms slice, so STOPs and EVICTs arrive at every point of it. Before the
# capture-begin gate, a capture that began while the drain waited for that last command was
# invalidated by the drain's context synchronization (CUDA_ERROR_STREAM_CAPTURE_INVALIDATED at
# the first captured launch: 3 of 25 runs on the fake driver; shim_daemon.sh's capture section
# failed so in CI now and then). On the fake CUDA driver, which invalidates a capture that way.
. "$(dirname "$0")/../daemon/lib.sh"

need_fake_cuda
CAP=$BUILD/tests/shim/capture
[ -x "$CAP" ] || {
    echo "SKIP: tests/shim/capture is not built"
    exit 0
}
[ -x "$MSCHEDD" ] || fail "no mschedd at $MSCHEDD"
RUNS=30
case "$BUILD" in *thread* | *address*) RUNS=10 ;; esac

start_daemon --budget 48MiB --slice 20ms --share off
client busy -- 100000 4 cycle
for i in $(seq 1 "$RUNS"); do
    env LD_LIBRARY_PATH="$SHIMDIR" MSCHED_REAL_LIBCUDA="$FAKELIB" MS_FAKECUDA="$FAKELIB" \
        MSCHED_VERBOSE=1 timeout 120 "$CAP" >"$T/cap$i.out" 2>&1
    grep -q "CAPTURE ok" "$T/cap$i.out" || fail "capture run $i of $RUNS: $(grep -E 'CAPTURE|msched' "$T/cap$i.out" | tail -n 3)"
    kill -0 "$PID_busy" 2>/dev/null || fail "the busy client ended early: $(tail -n 3 "$T/busy.out")"
done
kill "$PID_busy" 2>/dev/null
wait "$PID_busy" 2>/dev/null
pass "$RUNS captures beside a busy client under a 20 ms slice: every one gave its graph"
check_log_clean
exit 0
