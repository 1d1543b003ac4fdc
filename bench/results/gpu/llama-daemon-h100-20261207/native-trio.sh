#!/usr/bin/env bash
# The same Llama three at once natively (they fit on the card), 45 s of requests each, then one
# alone for 20 s: the throughput the trio under mschedd is compared with. OUT as in trio.sh.
export PYTHONUNBUFFERED=1 CUBLAS_WORKSPACE_CONFIG=:4096:8
L=(python3 bench/workloads/llama_onebuf.py --weights-gib 7 --kv-gib 0.5 --compat --new 32)
for i in 1 2 3; do "${L[@]}" --seconds 45 >$OUT/nat-$i.out 2>&1 & done
wait
"${L[@]}" --seconds 20 >$OUT/nat-alone.out 2>&1
