#!/usr/bin/env bash
# bench/workloads/run_rtbe.sh OUTDIR "SYSTEMS" [SECONDS] [RT_PAD_GIB] [BE_PAD_GIB] [INTERVAL_MS]
#
# The RT+BE experiment (bench/workloads/rtbe.py): a real-time ResNet152 service (batch 1, one
# request every INTERVAL_MS, default 200, plus RT_PAD_GIB of state, default 5.5: about 6.5 GiB)
# next to a best-effort VGG19 job (batch 32, plus BE_PAD_GIB, default 8: about 12.5 GiB),
# together about 120 % of a 16 GiB budget, each alone within it. Systems:
#   ref     both at once, no msched, no budget (CUDA's own sharing; the latency floor)
#   msched  mschedd --policy prio, 16 GiB, OPT, VMM engine; the service runs --priority rt
#   tslice  the same priority time slicing, memory by demand paging (--evict lru, --engine
#           demand): time slicing without memory scheduling
#   slice   mschedd --policy prio with a budget above the total: priority slicing, no memory
#           moves
# Each system: both processes start together; the BE job runs SECONDS + 20 s (BE_EXTRA) so it is busy for
# the whole of the service's SECONDS (default 40) of requests. Appends to OUTDIR/rtbe.jsonl one
# line per process ({"workload": "rtbe", "system": S, "role": rt|be, ...rtbe.py's output}) and
# one window line per daemon system (the daemon's switch and byte counters over the service's
# run); raw outputs in OUTDIR/raw-rtbe.tgz. Run from the repository root after
# `make build/bin/msched build/bin/mschedd shim`. RTBE_CMD replaces `python3 rtbe.py` (a
# program taking the same arguments and printing the same JSON: the harness's own test runs
# one on the fake driver) and BUDGET_MIB the 16 GiB budget.
set -u
OUT=${1:?usage: run_rtbe.sh OUTDIR SYSTEMS [SECONDS] [RT_PAD_GIB] [BE_PAD_GIB] [INTERVAL_MS]}
SYSTEMS=${2:?systems, e.g. "ref msched tslice"}
SECS=${3:-40}
RT_PAD=${4:-5.5}
BE_PAD=${5:-8}
INTERVAL=${6:-200}
BUDGET_MIB=${BUDGET_MIB:-16384}
MSCHED=$PWD/build/bin/msched
MSCHEDD=$PWD/build/bin/mschedd
REC=$PWD/bench/records.py
read -r -a PROG <<<"${RTBE_CMD:-python3 $PWD/bench/workloads/rtbe.py}"
RAW=$(mktemp -d)
mkdir -p "$OUT"
prom() { "$MSCHED" status --prometheus >"$1" 2>&1; }

for sys in $SYSTEMS; do
    dir=$RAW/rtbe_$sys
    mkdir -p "$dir"
    echo "[$(date +%T)] rtbe: $sys" >&2
    rt=("${PROG[@]}" rt "$RT_PAD" "$SECS" "$INTERVAL")
    be=("${PROG[@]}" be "$BE_PAD" $((SECS + ${BE_EXTRA:-20})))
    case $sys in
    ref)
        timeout $((SECS + 150)) "${be[@]}" >"$dir/be.json" 2>&1 &
        bp=$!
        timeout $((SECS + 150)) "${rt[@]}" >"$dir/rt.json" 2>&1
        wait $bp
        ;;
    msched | tslice | slice)
        budget=${BUDGET_MIB}MiB evict=opt engine=vmm
        [ "$sys" = tslice ] && { evict=lru; engine=demand; }
        [ "$sys" = slice ] && budget=200GiB
        export MSCHED_SOCKET=$RAW/gpu0.sock
        "$MSCHEDD" -v --socket "$MSCHED_SOCKET" --budget "$budget" --policy prio --evict "$evict" \
            --foreground >"$dir/mschedd.log" 2>&1 &
        dpid=$!
        for k in $(seq 1 50); do [ -S "$MSCHED_SOCKET" ] && break; sleep 0.1; done
        timeout $((SECS + 300)) "$MSCHED" run --engine "$engine" --priority be --verbose -- \
            "${be[@]}" >"$dir/be.json" 2>&1 &
        bp=$!
        prom "$dir/m0.prom"
        timeout $((SECS + 240)) "$MSCHED" run --engine "$engine" --priority rt --verbose -- \
            "${rt[@]}" >"$dir/rt.json" 2>&1
        prom "$dir/m1.prom"
        "$MSCHED" status >"$dir/status.txt" 2>&1
        wait $bp
        kill "$dpid"
        wait "$dpid" 2>/dev/null
        unset MSCHED_SOCKET
        ;;
    *)
        echo "run_rtbe.sh: unknown system '$sys' (ref msched tslice slice)" >&2
        exit 2
        ;;
    esac
    for role in rt be; do
        python3 "$REC" proc "$dir" "$role.json" workload=rtbe system="$sys" role="$role"
    done >>"$OUT/rtbe.jsonl"
    [ "$sys" = ref ] || python3 "$REC" window "$dir" workload=rtbe system="$sys" >>"$OUT/rtbe.jsonl"
done
tar -C "$RAW" -czf "$OUT/raw-rtbe.tgz" .
rm -rf "$RAW"
