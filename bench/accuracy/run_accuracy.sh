#!/usr/bin/env bash
# [STRICT=1] bench/accuracy/run_accuracy.sh OUTDIR [SECONDS] - prediction accuracy of every workload's
# kernels on one GPU machine (shim/accuracy.h).
#
# Each program runs alone under `msched run --no-daemon --engine demand` with a budget above its
# footprint and MSCHED_ACCURACY set: every launch starts with the program's memory on the host,
# runs alone, and the driver's fault and migration reports say what it touched. Per program:
# OUTDIR/<name>.jsonl (one line per measured launch, a summary line last) and <name>.log.
# The programs are the workloads' own, small: micro (vecadd, matmul), A (hotspot, dwt2d, cfd,
# nn), B (the four torchvision models), D (the Llama model). MSCHED_ACCURACY_MAX launches each
# (default 1500). Finally OUTDIR/accuracy.jsonl holds one summary record per program
# (bench/accuracy/summarize.py). Run from the repository root after `make build/bin/msched shim`.
#
# STRICT=1 runs the coverage check instead: each program under the VMM engine with
# MSCHED_STRICT=1 (shim/engine.h), so every command runs with only the memory its prediction
# names mapped and a reach past it would end the program with an illegal address. Per program
# OUTDIR/<name>.log and <name>.rc; OUTDIR/strict.jsonl (summarize.py --strict). Programs are
# stopped with SIGINT at their time limit, so Python ones still print the engine's summary.
set -u
OUT=${1:?usage: run_accuracy.sh OUTDIR [SECONDS]}
SECS=${2:-20}
# Each program's time limit (it loads, warms up, then runs SECONDS): ACC_LIMIT, default SECONDS + 90.
LIMIT=${ACC_LIMIT:-$((SECS + 90))}
MSCHED=${MSCHED:-$PWD/build/bin/msched}
PROGRAMS=${PROGRAMS:-"vecadd matmul hotspot dwt2d cfd nn resnet152 vgg19 inception_v3 densenet201 llama"}
export MSCHED_ACCURACY_MAX=${MSCHED_ACCURACY_MAX:-1500}
export PYTHONUNBUFFERED=1
mkdir -p "$OUT"
BIN=$(mktemp -d)
trap 'rm -rf "$BIN"' EXIT
nvcc -O2 -o "$BIN/micro" bench/micro/micro.cu -lcublas || exit 1
nvcc -O2 -o "$BIN/sci" bench/workloads/sci.cu || exit 1

cmd() {
    case $1 in
    vecadd | matmul) echo "$BIN/micro $1 0.5 $SECS" ;;
    hotspot | dwt2d | cfd | nn) echo "$BIN/sci $1 0.5 $SECS" ;;
    llama) echo "python3 $PWD/bench/workloads/llm.py 1.5 $SECS" ;;
    *) echo "python3 $PWD/bench/workloads/dnn.py $1 --gib 1 $SECS" ;;
    esac
}

if [ "${STRICT:-0}" = 1 ]; then
    for p in $PROGRAMS; do
        t0=$SECONDS
        # shellcheck disable=SC2046
        MSCHED_STRICT=1 timeout -s INT -k 10 $LIMIT \
            "$MSCHED" run --no-daemon --engine vmm --budget 16GiB --verbose -- $(cmd "$p") \
            >"$OUT/$p.log" 2>&1
        rc=$?
        echo $rc >"$OUT/$p.rc"
        n=$(sed -n 's/.* launches=\([0-9]*\) .*/\1/p' "$OUT/$p.log" | tail -n 1)
        echo "strict: $p rc=$rc, ${n:-?} launches, $((SECONDS - t0)) s" >&2
    done
    python3 bench/accuracy/summarize.py --strict "$OUT" $PROGRAMS >"$OUT/strict.jsonl"
    exit
fi

for p in $PROGRAMS; do
    rm -f "$OUT/$p.jsonl"
    t0=$SECONDS
    # shellcheck disable=SC2046
    MSCHED_ACCURACY=$OUT/$p.jsonl timeout -k 5 $LIMIT \
        "$MSCHED" run --no-daemon --engine demand --budget 16GiB --verbose -- $(cmd "$p") \
        >"$OUT/$p.log" 2>&1
    rc=$?
    n=$(grep -c '"kernel"' "$OUT/$p.jsonl" 2>/dev/null)
    echo "accuracy: $p rc=$rc, ${n:-0} launches measured, $((SECONDS - t0)) s" >&2
done
python3 bench/accuracy/summarize.py "$OUT" $PROGRAMS >"$OUT/accuracy.jsonl"
