#!/usr/bin/env bash
# bench/shim/launch_cost_fake.sh [BATCHES] - libmsched's own cost per kernel launch, on the fake
# CUDA driver (no GPU): tests/shim/engine_stress's `launches` mode (batches of 20000 launches of
# a two-pointer kernel, nanoseconds per launch, median of BATCHES, default 15) run three ways,
# interleaved three times: straight on the fake driver, behind libmsched observing (no budget),
# and behind libmsched with the engine on (MSCHED_BUDGET=1GiB, everything fits). The differences
# of the medians are what interposition and the engine's gate add to each launch on this CPU;
# the fake's launch itself (the kernel is a host loop over 1024 words) is the same in all three.
# BIG_MIB=N: the kernel's first pointer is the start of an N MiB allocation (a weights buffer,
# named whole at allocation granularity: N/64 chunks per launch), the engine's budget 4 x N.
# Builds what it needs first (make test-build). Prints one line per run and the medians.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
BATCHES=${1:-15}
BUILD=${BUILD:-build}
BIG_MIB=${BIG_MIB:-0}
BUDGET=1GiB
[ "$BIG_MIB" -gt 0 ] && BUDGET=$((BIG_MIB * 4))MiB
make -s -j"$(nproc)" BUILD="$BUILD" test-build >/dev/null || exit 1
FAKE=$ROOT/$BUILD/lib/fakecuda/libcuda.so.1
SHIM=$ROOT/$BUILD/lib/msched
STRESS=$ROOT/$BUILD/tests/shim/engine_stress
declare -A all
for round in 1 2 3; do
    for sys in direct observe engine; do
        case $sys in
        direct) env=(LD_LIBRARY_PATH="$(dirname "$FAKE")") ;;
        observe) env=(LD_LIBRARY_PATH="$SHIM" MSCHED_REAL_LIBCUDA="$FAKE") ;;
        engine) env=(LD_LIBRARY_PATH="$SHIM" MSCHED_REAL_LIBCUDA="$FAKE" MSCHED_BUDGET=$BUDGET) ;;
        esac
        line=$(env -u MSCHED_BUDGET -u LD_PRELOAD "${env[@]}" MS_FAKECUDA="$FAKE" \
            STRESS_LAUNCH_BIG_MIB="$BIG_MIB" "$STRESS" "$BATCHES" 1 launches) || {
            echo "launch_cost_fake.sh: $sys failed: $line" >&2
            exit 1
        }
        echo "round $round $sys: $line"
        all[$sys]="${all[$sys]:-} $(sed -n 's/.*median=\([0-9.]*\).*/\1/p' <<<"$line")"
    done
done
python3 - "${all[direct]}" "${all[observe]}" "${all[engine]}" <<'PY'
import statistics, sys
d, o, e = (statistics.median(float(x) for x in a.split()) for a in sys.argv[1:4])
print(f"median ns per launch: direct {d:.1f}, observe {o:.1f} (+{o - d:.1f}), "
      f"engine {e:.1f} (+{e - d:.1f})")
PY
