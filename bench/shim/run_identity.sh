#!/usr/bin/env bash
# bench/shim/run_identity.sh OUTDIR - the shim's acceptance runs on a GPU machine.
#
# For each program: run it without the shim, under `msched run` (library-path mode) and under
# `msched run --preload`; every run prints one JSON line (digest of its results, the GPU's own
# kernel count from torch.profiler, the shim's launch count over the same region). Then the
# launch-overhead microbenchmark with and without the shim, interleaved, three times each.
# Results: OUTDIR/identity.jsonl, OUTDIR/overhead.jsonl, each run's output in OUTDIR/logs.tgz.
# Run from the repository root after `make build/bin/msched shim`.
set -u
OUT=${1:?usage: run_identity.sh OUTDIR}
MSCHED=${MSCHED:-build/bin/msched}
BIN=$(mktemp -d)
mkdir -p "$OUT/logs"
export PYTHONUNBUFFERED=1 CUBLAS_WORKSPACE_CONFIG=:4096:8
nvcc -O2 -o "$BIN/own_program" bench/shim/own_program.cu || exit 1
nvcc -O2 -o "$BIN/launch_overhead" bench/shim/launch_overhead.cu || exit 1

programs=(
    "own_cuda|$BIN/own_program"
    "llama|python3 bench/shim/llama.py"
    "resnet50|python3 bench/shim/resnet.py"
    "torch_compile|python3 bench/shim/compiled.py"
    "cupy|python3 bench/shim/cupy_prog.py"
    "cublas_cudnn|python3 bench/shim/blas_dnn.py"
)
: >"$OUT/identity.jsonl"
for entry in "${programs[@]}"; do
    name=${entry%%|*}
    cmd=${entry#*|}
    for mode in plain shim preload; do
        case $mode in
        plain) runner=() ;;
        shim) runner=("$MSCHED" run --no-daemon --verbose --) ;;
        preload) runner=("$MSCHED" run --no-daemon --preload --verbose --) ;;
        esac
        # shellcheck disable=SC2086
        timeout 300 "${runner[@]}" $cmd >"$OUT/logs/$name.$mode.out" 2>"$OUT/logs/$name.$mode.err"
        rc=$?
        line=$(grep '^{' "$OUT/logs/$name.$mode.out" | tail -n 1)
        echo "$name $mode rc=$rc $line" >&2
        printf '{"mode": "%s", "rc": %d, "result": %s}\n' "$mode" "$rc" "${line:-null}" \
            >>"$OUT/identity.jsonl"
    done
done
: >"$OUT/overhead.jsonl"
for rep in 1 2 3; do
    "$BIN/launch_overhead" plain >>"$OUT/overhead.jsonl"
    "$MSCHED" run -- "$BIN/launch_overhead" shim >>"$OUT/overhead.jsonl"
done
cat "$OUT/overhead.jsonl" >&2
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
rm -rf "$BIN"
