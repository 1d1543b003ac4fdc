#!/usr/bin/env bash
# bench/engine/run_engine.sh OUTDIR - the memory engine's acceptance runs on a GPU machine.
#   1. migrate_bench: evict / populate / swap bandwidth, 4 and 16 GiB in 64 MiB chunks
#   2. stress_gpu under a 320 MiB budget (footprint up to about 1.2 GiB): zero mismatches
#   3. the Llama program without the shim and at twice its budget: identical tokens
# Run from the repository root after `make build/bin/msched shim gpu`.
set -u
OUT=${1:?usage: run_engine.sh OUTDIR}
MSCHED=${MSCHED:-build/bin/msched}
BIN=$(mktemp -d)
export PYTHONUNBUFFERED=1
nvcc -O2 -o "$BIN/stress_gpu" bench/engine/stress_gpu.cu -lcublas || exit 1
build/gpu/migrate_bench --ptx build/gpu --gib 4,16 --chunk-mib 64 >"$OUT/migrate_bench.jsonl" \
    2>"$OUT/migrate_bench.err"
echo "migrate_bench rc=$?" >&2
timeout 240 "$MSCHED" run --no-daemon --budget 320MiB --verbose -- "$BIN/stress_gpu" 800 7 \
    >"$OUT/stress_gpu.txt" 2>&1
echo "stress_gpu rc=$?" >&2
timeout 100 python3 bench/engine/llama_budget.py 16 32 >"$OUT/llama.txt" 2>&1
echo "llama plain rc=$?" >&2
# 16 layers of this config hold 5.77 GiB of weights: 2900 MiB is half.
timeout 300 "$MSCHED" run --no-daemon --budget 2900MiB --verbose -- python3 bench/engine/llama_budget.py 16 32 \
    >>"$OUT/llama.txt" 2>&1
echo "llama budget rc=$?" >&2
rm -rf "$BIN"
grep -h -v "launch of" "$OUT"/*.jsonl "$OUT"/*.txt | grep -E '^\{|engine:|refused|error' >&2
