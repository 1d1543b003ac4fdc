#!/usr/bin/env bash
# daemon_expand.sh - an expandable segment under mschedd (engine_stress expand: 30 handles of
# 4 MiB side by side, twelve 9 MiB tensors in it) with a 16 MiB limit: a pointer names its
# mapping and those after it within reach (an eighth of the limit, 2 MiB here), so a tensor's
# third mapping lies beyond it. Under the daemon a mapping stays mapped nowhere until its first
# population: such a mapping must be named wherever it lies, or the kernel that first writes the
# tensor touches unmapped memory (the fake's oracle kills it). The data is checked. On the fake
# CUDA driver.
. "$(dirname "$0")/../daemon/lib.sh"

need_fake_cuda
[ -x "$MSCHEDD" ] || fail "no mschedd at $MSCHEDD"

start_daemon --budget 16MiB --slice 20ms
env LD_LIBRARY_PATH="$SHIMDIR" MSCHED_REAL_LIBCUDA="$FAKELIB" MS_FAKECUDA="$FAKELIB" \
    MSCHED_VERBOSE=1 MSCHED_BUDGET=16MiB timeout 120 "$STRESS" 3 1 expand >"$T/x.out" 2>&1 ||
    fail "expand under the daemon: $(tail -n 4 "$T/x.out")"
grep -q "daemon: connected" "$T/x.out" || fail "it did not run under the daemon: $(tail -n 3 "$T/x.out")"
grep -q "ENGINE_EXPAND rounds=3 adds=36 .*mismatches=0" "$T/x.out" ||
    fail "expand: $(grep -E 'EXPAND|FAIL' "$T/x.out")"
pass "an expandable segment under the daemon: mappings beyond the reach populated before use, data right"
