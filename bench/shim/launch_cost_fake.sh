#!/usr/bin/env bash
# bench/shim/launch_cost_fake.sh [BATCHES] - libmsched's own cost per kernel launch, on the fake
# CUDA driver (no GPU): tests/shim/engine_stress's `launches` mode (batches of 20000 launches of
# a two-pointer kernel, nanoseconds per launch, median of BATCHES, default 15) run three ways,
# interleaved three times: straight on the fake driver, behind libmsched observing (no budget),
# behind libmsched with the engine on (MSCHED_BUDGET=1GiB, everything fits), and joined to an
# mschedd of that budget on a private socket (the daemon path: the overhead benchmark's
# `msched` system; the only task, so it runs at once and keeps RUN). The differences
# of the medians are what interposition and the engine's gate add to each launch on this CPU;
# the fake's launch itself (the kernel is a host loop over 1024 words) is the same in all three.
# BIG_MIB=N: the kernel's first pointer is the start of an N MiB allocation (a weights buffer,
# named whole at allocation granularity: N/64 chunks per launch), the engine's budget 4 x N.
# STRUCT_BYTES=B: the kernel also takes a struct of B bytes of sizes and strides by value
# (PyTorch's elementwise kernels: every word scanned, none an address).
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
T=$(mktemp -d /tmp/msched-launch-cost.XXXXXX)
SOCK=$T/gpu0.sock
"$ROOT/$BUILD/bin/mschedd" --foreground --log-level info --socket "$SOCK" --budget "$BUDGET" >"$T/daemon.log" 2>&1 &
DPID=$!
trap 'kill $DPID 2>/dev/null; wait $DPID 2>/dev/null; rm -rf "$T"' EXIT
for _ in $(seq 1 100); do
    MSCHED_SOCKET=$SOCK "$ROOT/$BUILD/bin/msched" status >/dev/null 2>&1 && break
    sleep 0.05
done
declare -A all
for round in 1 2 3; do
    for sys in direct observe engine daemon; do
        case $sys in
        direct) env=(LD_LIBRARY_PATH="$(dirname "$FAKE")") ;;
        observe) env=(LD_LIBRARY_PATH="$SHIM" MSCHED_REAL_LIBCUDA="$FAKE") ;;
        engine) env=(LD_LIBRARY_PATH="$SHIM" MSCHED_REAL_LIBCUDA="$FAKE" MSCHED_BUDGET=$BUDGET) ;;
        daemon) env=(LD_LIBRARY_PATH="$SHIM" MSCHED_REAL_LIBCUDA="$FAKE" MSCHED_SOCKET="$SOCK") ;;
        esac
        line=$(env -u MSCHED_BUDGET -u MSCHED_SOCKET -u LD_PRELOAD "${env[@]}" MS_FAKECUDA="$FAKE" \
            STRESS_LAUNCH_BIG_MIB="$BIG_MIB" STRESS_LAUNCH_STRUCT="${STRUCT_BYTES:-0}" "$STRESS" "$BATCHES" 1 launches) || {
            echo "launch_cost_fake.sh: $sys failed: $line" >&2
            exit 1
        }
        echo "round $round $sys: $line"
        all[$sys]="${all[$sys]:-} $(sed -n 's/.*median=\([0-9.]*\).*/\1/p' <<<"$line")"
    done
done
grep -q "task 1: pid" "$T/daemon.log" || echo "launch_cost_fake.sh: no task joined the daemon" >&2
python3 - "${all[direct]}" "${all[observe]}" "${all[engine]}" "${all[daemon]}" <<'PY'
import statistics, sys
d, o, e, m = (statistics.median(float(x) for x in a.split()) for a in sys.argv[1:5])
print(f"median ns per launch: direct {d:.1f}, observe {o:.1f} (+{o - d:.1f}), "
      f"engine {e:.1f} (+{e - d:.1f}), daemon {m:.1f} (+{m - d:.1f})")
PY
