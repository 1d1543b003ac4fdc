#!/usr/bin/env bash
# daemon_small.sh - small allocations packed into slabs (docs/engine.md, "Small allocations share
# slabs") under mschedd: two clients at once, each 1500 allocations of 4 KiB added in pairs, with
# a 64 MiB limit each under a 128 MiB daemon budget. As regions of their own each client's 3000
# MiB footprint would move through its limit every round; packed, each needs three slabs. Both
# end with their data right and their exit summaries say how they were packed. On the fake CUDA
# driver.
. "$(dirname "$0")/../daemon/lib.sh"

need_fake_cuda
[ -x "$MSCHEDD" ] || fail "no mschedd at $MSCHEDD"

start_daemon --budget 128MiB --slice 20ms
for c in a b; do
    env LD_LIBRARY_PATH="$SHIMDIR" MSCHED_REAL_LIBCUDA="$FAKELIB" MS_FAKECUDA="$FAKELIB" \
        MSCHED_VERBOSE=1 MSCHED_BUDGET=64MiB timeout 120 "$STRESS" 50 "$c" small >"$T/$c.out" 2>&1 &
    eval "PID_$c=\$!"
done
PIDS+=("$PID_a" "$PID_b")
wait "$PID_a" || fail "client a: $(tail -n 3 "$T/a.out")"
wait "$PID_b" || fail "client b: $(tail -n 3 "$T/b.out")"
for c in a b; do
    grep -q "daemon: connected" "$T/$c.out" || fail "client $c did not run under the daemon"
    grep -q "ENGINE_SMALL rounds=50 buffers=1500 .*mismatches=0" "$T/$c.out" ||
        fail "client $c: $(grep -E 'SMALL|FAIL' "$T/$c.out")"
    slabs=$(grep -o "1500 packed into slabs of 2 MiB, at most [0-9]* slabs" "$T/$c.out" | grep -o "[0-9]* slabs" | grep -o "[0-9]*")
    [ "${slabs:-9}" -le 3 ] || fail "client $c: not packed: $(grep -E 'small allocations|engine \(' "$T/$c.out")"
    inmib=$(grep -o " in [0-9]* MiB" "$T/$c.out" | grep -o "[0-9]*")
    [ "${inmib:-9999}" -le 64 ] || fail "client $c moved $inmib MiB in: $(grep 'engine (' "$T/$c.out")"
done
pass "two clients of 1500 small allocations each under one daemon: right data, 3 slabs each, little moved"
