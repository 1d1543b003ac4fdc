#!/usr/bin/env bash
# bench/engine/run_um.sh OUTDIR - the memory engines side by side on one GPU machine.
#   1. stress_gpu under a 320 MiB budget with --engine unified and --engine demand: zero
#      mismatches (managed memory moved by msched's prefetches or by the GPU's page faults)
#   2. the Llama program (bench/engine/llama_budget.py, 16 layers, 5.77 GiB of weights) without
#      msched, then at a 2900 MiB budget (half) under --engine vmm, unified and demand: the same
#      tokens, and decode tokens per second of each
# Writes OUTDIR/stress_um.txt and OUTDIR/llama_engines.txt. Run from the repository root after
# `make build/bin/msched shim`.
set -u
OUT=${1:?usage: run_um.sh OUTDIR}
MSCHED=${MSCHED:-build/bin/msched}
BIN=$(mktemp -d)
export PYTHONUNBUFFERED=1
nvcc -O2 -o "$BIN/stress_gpu" bench/engine/stress_gpu.cu -lcublas || exit 1
for eng in unified demand; do
    echo "== stress_gpu --engine $eng --budget 320MiB" >>"$OUT/stress_um.txt"
    timeout 60 "$MSCHED" run --no-daemon --engine $eng --budget 320MiB --verbose -- "$BIN/stress_gpu" 800 7 \
        >>"$OUT/stress_um.txt" 2>&1
    echo "stress_gpu $eng rc=$?" | tee -a "$OUT/stress_um.txt" >&2
done
echo "== plain" >>"$OUT/llama_engines.txt"
timeout 90 python3 bench/engine/llama_budget.py 16 32 >>"$OUT/llama_engines.txt" 2>&1
echo "llama plain rc=$?" >&2
for eng in vmm unified demand; do
    echo "== --engine $eng --budget 2900MiB" >>"$OUT/llama_engines.txt"
    lim=90
    [ $eng = unified ] && lim=120
    [ $eng = demand ] && lim=150
    timeout $lim "$MSCHED" run --no-daemon --engine $eng --budget 2900MiB --verbose -- \
        python3 bench/engine/llama_budget.py 16 32 >>"$OUT/llama_engines.txt" 2>&1
    echo "llama $eng rc=$?" | tee -a "$OUT/llama_engines.txt" >&2
done
rm -rf "$BIN"
grep -h -E '^==|^\{|engine \(|refused|rc=|error' "$OUT/stress_um.txt" "$OUT/llama_engines.txt" >&2
