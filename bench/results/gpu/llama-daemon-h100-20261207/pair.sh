#!/usr/bin/env bash
# Two one-buffer Llamas under one mschedd at a quarter of their footprint (3584 MiB: half one's
# weights): native alone, alone at half (--no-daemon), then the pair under the adaptive policy with
# progress lines, the daemon's log at -v and its counters at the end. From the repository root,
# OUT set to a results directory.
set -u
export PYTHONUNBUFFERED=1 CUBLAS_WORKSPACE_CONFIG=:4096:8
T0=$(date +%s)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $OUT/env.txt 2>&1
make -s -j16 build/bin/msched build/bin/mschedd shim > /dev/null 2>&1 || echo build failed
L=(python3 bench/workloads/llama_onebuf.py --weights-gib 7 --kv-gib 0.5 --compat)
/usr/bin/time -f "native wall %e s" "${L[@]}" --new 32 > $OUT/native.out 2>&1; tail -2 $OUT/native.out | cut -c1-300
/usr/bin/time -f "alone-half wall %e s" timeout 120 build/bin/msched run --no-daemon --budget 3584MiB --templates off -- "${L[@]}" --new 32 > $OUT/alone.out 2>&1; tail -2 $OUT/alone.out | cut -c1-300
for pol in ${POLS:-adaptive}; do
  sd=$(mktemp -d)
  build/bin/mschedd --socket $sd/gpu0.sock --budget 3584MiB --policy $pol --foreground -v > $OUT/pair-$pol-mschedd.log 2>&1 &
  dp=$!
  for _ in $(seq 1 100); do [ -S $sd/gpu0.sock ] && break; sleep 0.1; done
  s0=$(date +%s.%N)
  for i in 1 2; do
    MSCHED_SOCKET=$sd/gpu0.sock MSCHED_PROGRESS_MS=10000 /usr/bin/time -f "pair-$i wall %e s" timeout ${PT:-200} build/bin/msched run --templates off --verbose -- "${L[@]}" --new 32 > $OUT/pair-$pol-$i.out 2> $OUT/pair-$pol-$i.err &
    eval "p$i=\$!"
  done
  wait $p1; r1=$?; wait $p2; r2=$?
  MSCHED_SOCKET=$sd/gpu0.sock build/bin/msched status > $OUT/pair-$pol-status.txt 2>&1
  MSCHED_SOCKET=$sd/gpu0.sock build/bin/msched status --prometheus 2>/dev/null | grep -E "^msched_(switches|refills|switch_seconds)_total" >> $OUT/pair-$pol-status.txt
  kill $dp; wait $dp 2>/dev/null
  echo "== $pol rc=$r1,$r2"; for i in 1 2; do grep "after [0-9]" $OUT/pair-$pol-$i.err | tail -1 | cut -c1-400; grep "wall\|daemon: connected" $OUT/pair-$pol-$i.err | cut -c1-300; tail -1 $OUT/pair-$pol-$i.out | cut -c1-300; done
  grep "^msched_" $OUT/pair-$pol-status.txt
done
cd $OUT && tar czf w2.tgz *.out *.err *.log *.txt 2>/dev/null; rm -f *.out *.err *.log pair-*status.txt
echo "end at $(( $(date +%s) - T0 ))s"
