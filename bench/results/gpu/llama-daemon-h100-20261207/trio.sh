#!/usr/bin/env bash
# Three one-buffer Llamas under one mschedd of 12 GiB (187 %: three footprints of 7660 MiB), adaptive
# policy, OPT eviction against whole-process swapping (--evict whole). XA: the program's own
# options (default --new 32: one request; "--new 32 --seconds 45": requests for 45 s). From the
# repository root, OUT set to a results directory.
set -u
export PYTHONUNBUFFERED=1 CUBLAS_WORKSPACE_CONFIG=:4096:8
T0=$(date +%s)
make -s -j16 build/bin/msched build/bin/mschedd shim > /dev/null 2>&1 || echo build failed
L=(python3 bench/workloads/llama_onebuf.py --weights-gib 7 --kv-gib 0.5 --compat)
for ev in ${EVS:-opt whole}; do
  sd=$(mktemp -d)
  build/bin/mschedd --socket $sd/gpu0.sock --budget ${BUD:-12GiB} --policy adaptive --evict $ev --foreground -v > $OUT/trio-$ev-mschedd.log 2>&1 &
  dp=$!
  for _ in $(seq 1 100); do [ -S $sd/gpu0.sock ] && break; sleep 0.1; done
  s0=$(date +%s%N)
  for i in 1 2 3; do
    MSCHED_SOCKET=$sd/gpu0.sock MSCHED_PROGRESS_MS=10000 /usr/bin/time -f "trio-$ev-$i wall %e s" timeout ${PT:-150} build/bin/msched run --templates off --verbose -- "${L[@]}" ${XA:---new 32} > $OUT/trio-$ev-$i.out 2> $OUT/trio-$ev-$i.err &
    eval "p$i=\$!"
  done
  wait $p1; r1=$?; wait $p2; r2=$?; wait $p3; r3=$?
  echo "== $ev rc=$r1,$r2,$r3 all three in $(( ($(date +%s%N) - s0) / 1000000 )) ms"
  MSCHED_SOCKET=$sd/gpu0.sock build/bin/msched status --prometheus 2>/dev/null | grep -E "^msched_(switches|refills|switch_seconds|populated_bytes|evicted_bytes)_total" | tee $OUT/trio-$ev-status.txt
  kill $dp; wait $dp 2>/dev/null
  for i in 1 2 3; do grep "wall\|daemon: connected" $OUT/trio-$ev-$i.err | cut -c1-200; grep -o "RESULT llama_onebuf [0-9a-f]\{16\}\|\"tasks_per_s\": [0-9.]*\|\"requests\": [0-9]*" $OUT/trio-$ev-$i.out | tr '\n' ' '; echo; done
done
cd $OUT && tar czf w3.tgz trio-* 2>/dev/null; rm -f trio-*
echo "end at $(( $(date +%s) - T0 ))s"
