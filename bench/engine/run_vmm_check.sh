#!/usr/bin/env bash
# bench/engine/run_vmm_check.sh OUTDIR - the application's own VMM memory on a real GPU: the
# Llama program of run_engine.sh with PyTorch's expandable segments (its caching allocator then
# uses cuMemCreate/cuMemMap instead of cuMemAlloc) at a budget (BUDGET, default 8GiB),
# through msched's virtual handles. Compare the digest with run_engine.sh's plain run.
set -u
OUT=${1:?usage: run_vmm_check.sh OUTDIR}
MSCHED=${MSCHED:-build/bin/msched}
export PYTHONUNBUFFERED=1
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True timeout 150 "$MSCHED" run --no-daemon \
    --budget "${BUDGET:-8GiB}" --verbose -- python3 bench/engine/llama_budget.py 16 32 \
    >"$OUT/llama_expandable.txt" 2>&1
echo "rc=$?" >>"$OUT/llama_expandable.txt"
grep -E '^\{|engine \(|rc=|refused|error' "$OUT/llama_expandable.txt" >&2
