#!/usr/bin/env bash
# bench/shim/launch_instr_fake.sh [OUTDIR] - libmsched's instructions per kernel launch, on the
# fake CUDA driver under valgrind's callgrind: exact and repeatable where nanoseconds are not
# (a 2-core CI machine's timings spread by 10 %; a GPU host's cache misses scale with the count).
#
# tests/shim/engine_stress's `launches` mode (one batch of 20000 launches of a two-pointer
# kernel after a warm-up batch) runs four ways: behind libmsched observing (no budget), with
# the engine on (MSCHED_BUDGET, everything fits), the same with MSCHED_SETTLED=1 (settled),
# and joined to an mschedd on a private socket;
# each with a small allocation (small), with the kernel's first pointer the start of a
# BIG_MIB allocation (default 7168: 112 chunks of 64 MiB named whole: big), and with a struct
# of STRUCT_BYTES (default 512) of sizes and strides passed by value besides the pointers, as
# PyTorch's elementwise kernels take (every word scanned, none an address: struct). For each, the
# instructions inside libmsched's cuLaunchKernel hook less those inside the fake driver's
# cuLaunchKernel, per launch, and the functions of libmsched (and the C library calls it
# makes) that cost most per launch. OUTDIR (default: a temporary directory, removed) keeps the
# callgrind files and the per-function tables. LIB_BUILD=DIR takes libmsched, the fake driver
# and mschedd from another build directory (an older commit's, for a side-by-side comparison)
# while the test program stays this tree's. Needs valgrind. About 1-2 minutes.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
case "${1:-}" in -h | --help)
    sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
esac
command -v valgrind >/dev/null || {
    echo "launch_instr_fake.sh: valgrind is not installed" >&2
    exit 2
}
BUILD=${BUILD:-build}
BIG_MIB=${BIG_MIB:-7168}
STRUCT_BYTES=${STRUCT_BYTES:-512}
make -s -j"$(nproc)" BUILD="$BUILD" test-build >/dev/null || exit 1
LIB=${LIB_BUILD:-$ROOT/$BUILD}
FAKE=$LIB/lib/fakecuda/libcuda.so.1
SHIM=$LIB/lib/msched
STRESS=$ROOT/$BUILD/tests/shim/engine_stress
[ -f "$SHIM/libcuda.so.1" ] && [ -x "$LIB/bin/mschedd" ] || {
    echo "launch_instr_fake.sh: no libmsched or mschedd in $LIB" >&2
    exit 2
}
T=$(mktemp -d /tmp/msched-launch-instr.XXXXXX)
OUT=${1:-$T/out}
mkdir -p "$OUT" || exit 1
SOCK=$T/gpu0.sock
"$LIB/bin/mschedd" --foreground --log-level info --socket "$SOCK" --budget $((BIG_MIB * 4))MiB \
    >"$T/daemon.log" 2>&1 &
DPID=$!
trap 'kill $DPID 2>/dev/null; wait $DPID 2>/dev/null; rm -rf "$T"' EXIT
for _ in $(seq 1 100); do
    MSCHED_SOCKET=$SOCK "$LIB/bin/msched" status >/dev/null 2>&1 && break
    sleep 0.05
done
rc=0
for size in small big struct; do
    big=0 sb=0
    [ $size = big ] && big=$BIG_MIB
    [ $size = struct ] && sb=$STRUCT_BYTES
    for sys in observe engine settled daemon; do
        case $sys in
        observe) env=() ;;
        engine) env=(MSCHED_BUDGET=$((BIG_MIB * 4))MiB) ;;
        settled) env=(MSCHED_BUDGET=$((BIG_MIB * 4))MiB MSCHED_SETTLED=1) ;;
        daemon) env=(MSCHED_SOCKET="$SOCK") ;;
        esac
        cg=$OUT/callgrind-$sys-$size.out
        env -u MSCHED_BUDGET -u MSCHED_SOCKET -u LD_PRELOAD LD_LIBRARY_PATH="$SHIM" \
            MSCHED_REAL_LIBCUDA="$FAKE" MS_FAKECUDA="$FAKE" MSCHED_DAEMON=$([ $sys = daemon ] && echo on || echo off) \
            "${env[@]}" STRESS_LAUNCH_BIG_MIB="$big" STRESS_LAUNCH_STRUCT="$sb" \
            valgrind --tool=callgrind --callgrind-out-file="$cg" "$STRESS" 1 1 launches \
            >"$OUT/run-$sys-$size.txt" 2>&1 || {
            echo "launch_instr_fake.sh: $sys $size failed:" >&2
            tail -5 "$OUT/run-$sys-$size.txt" >&2
            rc=1
            continue
        }
        python3 "$ROOT/bench/shim/callgrind_launch.py" "$cg" "$sys $size" "$OUT/top-$sys-$size.txt" || rc=1
    done
done
exit $rc
