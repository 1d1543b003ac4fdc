#!/usr/bin/env bash
# bench/shim/run_alloc_check.sh OUTDIR - does the shim see every allocation? Each PyTorch
# identity program runs once under `msched run --no-daemon` (observation only) and reports the
# bytes the shim tracks as live (shim_live_bytes), PyTorch's reserved bytes, and the device
# memory the process gained after its context was created (device_used_delta_bytes, from
# cuMemGetInfo; the GPU is not shared during the run). Writes OUTDIR/alloc_check.jsonl.
set -u
OUT=${1:?usage: run_alloc_check.sh OUTDIR}
MSCHED=${MSCHED:-build/bin/msched}
export PYTHONUNBUFFERED=1 CUBLAS_WORKSPACE_CONFIG=:4096:8
for prog in llama resnet compiled blas_dnn; do
    timeout 180 "$MSCHED" run --no-daemon -- python3 bench/shim/$prog.py 2>/dev/null |
        grep '^{' | tail -n 1 >>"$OUT/alloc_check.jsonl"
done
python3 - "$OUT/alloc_check.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    live, dev = r.get("shim_live_bytes"), r.get("device_used_delta_bytes")
    if live is None or dev is None:
        print(r.get("program"), "no figures")
        continue
    print(f"{r['program']:14s} shim live {live / 2**20:9.1f} MiB  device gained "
          f"{dev / 2**20:9.1f} MiB  difference {(dev - live) / 2**20:8.1f} MiB")
PY
