#!/usr/bin/env bash
# bench/micro/run_micro.sh OUTDIR [GIB_EACH] [SECONDS] - the section 7.1 microbenchmark, small.
# Two vector-add and two matmul processes of GIB_EACH each (default 6: 24 GiB in all, 150 % of a
# 16 GiB budget). First all four at once with no budget and no msched (the reference), then the
# same four under mschedd (16 GiB budget, 500 ms round-robin slices, OPT). Each process prints
# its tasks per second; normalized throughput = under msched / reference, per process.
# Run from the repository root after `make build/bin/msched shim`.
set -u
OUT=${1:?usage: run_micro.sh OUTDIR [GIB_EACH] [SECONDS]}
GIB=${2:-6}
SECS=${3:-30}
BIN=$(mktemp -d)
nvcc -O2 -o "$BIN/micro" bench/micro/micro.cu -lcublas || exit 1
kinds=(vecadd vecadd matmul matmul)
for i in 0 1 2 3; do
    timeout $((SECS + 60)) "$BIN/micro" "${kinds[$i]}" "$GIB" "$SECS" >"$OUT/ref_$i.json" 2>&1 &
done
wait
export MSCHED_SOCKET=$BIN/gpu0.sock
build/bin/mschedd --socket "$MSCHED_SOCKET" --budget 16GiB --slice 500ms --foreground \
    >"$BIN/mschedd.log" 2>&1 &
dpid=$!
sleep 1
for i in 0 1 2 3; do
    timeout $((SECS + 120)) build/bin/msched run -- "$BIN/micro" "${kinds[$i]}" "$GIB" "$SECS" \
        >"$OUT/ms_$i.json" 2>&1 &
done
sleep $((SECS / 2 + 10))
build/bin/msched status >"$OUT/status.txt" 2>&1
wait $(jobs -p | grep -v "^$dpid$") 2>/dev/null
build/bin/msched status >>"$OUT/status.txt" 2>&1
kill "$dpid"
wait "$dpid" 2>/dev/null
cp "$BIN/mschedd.log" "$OUT/mschedd.log"
rm -rf "$BIN"
for i in 0 1 2 3; do echo "ref $i: $(tail -n 1 "$OUT/ref_$i.json")"; echo "ms  $i: $(tail -n 1 "$OUT/ms_$i.json")"; done
