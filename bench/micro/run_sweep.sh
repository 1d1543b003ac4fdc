#!/usr/bin/env bash
# bench/micro/run_sweep.sh OUTDIR "PRESSURES" "SYSTEMS" [SECONDS] [SLICE]
#
# The section 7.1 microbenchmark as a sweep: two vector-add and two matmul processes
# (bench/micro/micro.cu), each a quarter of PRESSURE % of a 16 GiB budget, under each SYSTEM.
# WORKLOAD=D runs four instances of workload D instead (bench/workloads/llm.py: Llama models of
# a quarter of the pressure each, greedy decode, tokens per second); WORKLOAD=A the four
# scientific kernels of bench/workloads/sci.cu (hotspot, dwt2d, cfd, nn); WORKLOAD=B the four
# DNNs of bench/workloads/dnn.py (ResNet152, VGG19, InceptionV3, DenseNet201 inference, batch
# sized to the footprint, images per second); WORKLOAD=C three of them and one Llama; WORKLOAD=L
# three instances of bench/workloads/llama_onebuf.py (all weights in one allocation, the KV cache
# one preallocated pool, as llama.cpp and vLLM allocate; a third of the pressure each, decode
# tokens per second), each predicted by the templates MSCHED_TEMPLATES names (default the
# user's store; bench/templates/run_llama3.sh learns them first). Systems:
#   ref     the four processes at once, no msched, no budget (the normalization)
#   slice   mschedd with a budget above the total: time slicing, no memory movement (with
#           --set share=off: the four would fit, and sharing would run them at once)
#   opt     mschedd, 16 GiB budget, OPT eviction (msched)
#   lru     mschedd, 16 GiB budget, LRU eviction
#   alloc   opt's daemon, the processes predicting whole allocations (`msched run --templates
#           off`): allocation granularity, the baseline of the templates
#   whole   mschedd, 16 GiB budget, whole-process swapping
#   demand  mschedd, 16 GiB budget, LRU eviction, managed memory faulted in (--engine demand):
#           the demand-paging baseline, its device emulated by the budget (which flatters it)
# The other daemon systems keep the daemon's default, share=on: at a pressure up to 100 % their
# four processes fit in the budget and run at once, without slices (docs/daemon.md, Sharing).
# Every daemon system uses the same round-robin slice (SLICE, default 1s). SLICE=adaptive: at
# each pressure `opt` runs first under `--policy adaptive` (base slice 1 s), and the slice it
# chose (its tasks' GPU time over its switches in the window) is then every other system's
# round-robin slice: all systems at the slice msched's adaptive policy picks. ADAPTIVE_OPTS adds
# mschedd options to that adaptive run (e.g. "--set switch_frac=5"; recorded as adaptive_opts in
# its window record; default none, the daemon's defaults). Each process runs
# one warm-up task, waits at a start barrier (bench/workloads/progress.py: the harness releases
# the four together once every live one has arrived, at most BARRIER_S seconds, default 600),
# then runs SECONDS (default 25) of tasks and prints tasks per second with progress samples
# (bench/records.py rates each over the window all four ran in). The daemon's metrics are read
# twice inside the timed loops (from W s after their start, default 5, to SECONDS-4 s), so the
# bytes moved and switch times cover steady state.
# Every run is bounded: a process still running LOOP_GRACE seconds (default 90) after its timed
# loop should have ended is killed, after the harness has kept what shows where it was stuck
# (hung_ps.txt: the process tree with kernel wait channels; hung_status.txt and hung.prom: the
# daemon's view; Python programs print their stacks on SIGUSR1, bench/workloads/progress.py,
# into their output). Its record then says "error": killed, and the run goes on to the next
# system. The raw archive is rewritten after every run and when the script is terminated, so
# what ran is kept even when a part is cut off.
# Writes OUTDIR/sweep.jsonl (one line per process and one per daemon window) and
# OUTDIR/raw-<pressures>.tgz (every output and daemon log); bench/micro/summarize_sweep.py turns
# the JSONL into the tables of docs/evaluation.md. Each daemon run also keeps three frames of
# `msched top` (top.txt in the raw archive).
# Run from the repository root after `make build/bin/msched build/bin/mschedd shim`.
set -u
OUT=${1:?usage: run_sweep.sh OUTDIR PRESSURES SYSTEMS [SECONDS] [SLICE]}
PRESSURES=${2:?pressures, e.g. "100 150"}
SYSTEMS=${3:?systems, e.g. "ref opt whole demand"}
SECS=${4:-25}
SLICE=${5:-1s}
# The budget the pressures are relative to (BUDGET_MIB, default 16 GiB).
BUDGET_MIB=${BUDGET_MIB:-16384}
MSCHED=$PWD/build/bin/msched
MSCHEDD=$PWD/build/bin/mschedd
REC=$PWD/bench/records.py
WORKLOAD=${WORKLOAD:-micro}
case $WORKLOAD in
micro | A | B | C | D | L) ;;
*) echo "run_sweep.sh: unknown WORKLOAD '$WORKLOAD' (micro, A, B, C, D, L)" >&2; exit 2 ;;
esac
# Processes per run: three Llamas for L, else four.
NPROC=4
[ "$WORKLOAD" = L ] && NPROC=3
for sys in $SYSTEMS; do
    case $sys in
    ref | slice | opt | alloc | lru | whole | demand) ;;
    *) echo "run_sweep.sh: unknown system '$sys' (ref, slice, opt, alloc, lru, whole, demand)" >&2; exit 2 ;;
    esac
done
# The metrics window starts W s into the timed loops (past the first round of switches).
W=${W:-5}
BARRIER_S=${BARRIER_S:-600}
LOOP_GRACE=${LOOP_GRACE:-90}
D=$((SECS - 4 - W))
if [ "$D" -lt 5 ]; then
    echo "run_sweep.sh: SECONDS ($SECS) must exceed the window start W ($W) by at least 9" >&2
    exit 2
fi
if [ "$SLICE" = adaptive ] && ! grep -qw opt <<<"$SYSTEMS"; then
    echo "run_sweep.sh: SLICE=adaptive needs opt among the systems (it picks the slice)" >&2
    exit 2
fi
BIN=$(mktemp -d)
RAW=$BIN/raw
mkdir -p "$RAW" "$OUT"
# MICRO=path runs another program with micro's arguments and output (a check of this script).
if [ -n "${MICRO:-}" ]; then
    cp "$MICRO" "$BIN/micro"
else
    nvcc -O2 -o "$BIN/micro" bench/micro/micro.cu -lcublas || exit 1
fi
[ "$WORKLOAD" = A ] && { nvcc -O2 -o "$BIN/sci" bench/workloads/sci.cu || exit 1; }
kinds=(vecadd vecadd matmul matmul)
akinds=(hotspot dwt2d cfd nn)
bkinds=(resnet152 vgg19 inception_v3 densenet201)
ckinds=(resnet152 vgg19 densenet201)
# cmd I GIB: process I's command line.
cmd() {
    if [ -n "${MICRO:-}" ] && [ "$WORKLOAD" = L ]; then
        echo "$BIN/micro vecadd $2 $SECS" # the harness's check (MICRO=)
    elif [ "$WORKLOAD" = L ]; then
        # GIB is the process's footprint: a 0.5 GiB KV pool, about 0.25 GiB of activations and
        # workspaces, the rest weights (seed I: each instance its own weights and prompts).
        echo "python3 $PWD/bench/workloads/llama_onebuf.py --weights-gib $(python3 -c "print(round(max(0.5, $2 - 0.75), 3))") --kv-gib 0.5 --seed $1 --seconds $SECS"
    elif [ "$WORKLOAD" = D ] || { [ "$WORKLOAD" = C ] && [ "$1" = 3 ]; }; then
        echo "python3 $PWD/bench/workloads/llm.py $2 $SECS"
    elif [ "$WORKLOAD" = C ]; then
        echo "python3 $PWD/bench/workloads/dnn.py ${ckinds[$1]} --gib $2 $SECS"
    elif [ "$WORKLOAD" = B ]; then
        echo "python3 $PWD/bench/workloads/dnn.py ${bkinds[$1]} --gib $2 $SECS"
    elif [ "$WORKLOAD" = A ]; then
        echo "$BIN/sci ${akinds[$1]} $2 $SECS"
    else
        echo "$BIN/micro ${kinds[$1]} $2 $SECS"
    fi
}

# prom FILE: the daemon's Prometheus text (bounded: a daemon that does not answer gives none).
prom() { timeout 10 "$MSCHED" status --prometheus >"$1" 2>&1; }

# save_raw: (re)write the raw archive with everything so far.
save_raw() { tar -C "$RAW" -czf "$OUT/raw-$WORKLOAD-$(echo $PRESSURES | tr ' ' '-').tgz" . 2>/dev/null; }
# Terminated: end this run's processes (each `timeout` wrapper is its own process group, out
# of reach of a signal to ours) and daemon, keep the raw outputs.
pids=() dpid=""
on_term() {
    local p
    for p in "${pids[@]}" $dpid; do kill -TERM "$p" 2>/dev/null; done
    echo "run_sweep.sh: terminated; raw outputs so far kept" >&2
    save_raw
    exit 143
}
trap on_term TERM INT

# bounded_wait DIR LIMIT PID...: wait for one run's processes (PID I writes DIR/proc_I.json);
# those still running LIMIT seconds from now are killed, after the diagnostics (header).
bounded_wait() {
    local dir=$1 lim=$2 t0=$SECONDS p i n
    shift 2
    while :; do
        n=0
        for p in "$@"; do kill -0 "$p" 2>/dev/null && n=$((n + 1)); done
        [ "$n" = 0 ] && break
        if [ $((SECONDS - t0)) -ge "$lim" ]; then
            echo "[$(date +%T)]   $n process(es) still running $LOOP_GRACE s after the loops should have ended: killed (diagnostics in the raw archive)" >&2
            ps -eo pid,ppid,stat,wchan:32,etimes,args --forest >"$dir/hung_ps.txt" 2>&1
            if [ -n "${MSCHED_SOCKET:-}" ]; then
                timeout 10 "$MSCHED" status >"$dir/hung_status.txt" 2>&1
                timeout 10 "$MSCHED" status --prometheus >"$dir/hung.prom" 2>&1
            fi
            # Python programs print their stacks on SIGUSR1 (the children of timeout [msched run])
            for p in "$@"; do
                kill -0 "$p" 2>/dev/null && pkill -USR1 -f -P "$p" 'python3' 2>/dev/null
            done
            sleep 2
            i=0
            for p in "$@"; do
                if kill -0 "$p" 2>/dev/null; then
                    echo "killed: still running $LOOP_GRACE s after its timed loop should have ended" \
                        >"$dir/proc_$i.killed"
                    kill -TERM "$p" 2>/dev/null
                fi
                i=$((i + 1))
            done
            sleep 5
            for p in "$@"; do kill -KILL "$p" 2>/dev/null; done
            break
        fi
        sleep 0.5
    done
    wait "$@" 2>/dev/null
}

# release DIR PID...: once every process still running has reached the start barrier in DIR
# (DIR/ready.<pid>), or after BARRIER_S seconds, let them all start their timed loops.
release() {
    local bar=$1 t0=$SECONDS n alive p
    shift
    while :; do
        n=$(find "$bar" -maxdepth 1 -name 'ready.*' | wc -l)
        alive=0
        for p in "$@"; do kill -0 "$p" 2>/dev/null && alive=$((alive + 1)); done
        [ "$n" -ge "$alive" ] && break
        if [ $((SECONDS - t0)) -ge "$BARRIER_S" ]; then
            echo "run_sweep.sh: $n of $alive processes at the start barrier after $BARRIER_S s; starting anyway" >&2
            break
        fi
        sleep 0.1
    done
    touch "$bar/go"
    echo "[$(date +%T)]   timed loops start after $((SECONDS - t0)) s of warm-up" >&2
}

for p in $PRESSURES; do
    gib=$(python3 -c "print(round($BUDGET_MIB / 1024 * $p / 100 / $NPROC, 3))")
    order=$SYSTEMS chosen=1s
    # adaptive: opt first, the others at the slice it picks
    [ "$SLICE" = adaptive ] && order="$(for s in $SYSTEMS; do [ "$s" = opt ] && echo opt; done)
$(for s in $SYSTEMS; do [ "$s" = opt ] || echo "$s"; done)"
    for sys in $order; do
        dir=$RAW/p${p}_$sys
        [ "$WORKLOAD" = micro ] || dir=$RAW/${WORKLOAD}_p${p}_$sys
        mkdir -p "$dir/barrier"
        export MSCHED_BENCH_BARRIER=$dir/barrier MSCHED_BENCH_BARRIER_S=$BARRIER_S
        t0=$(date +%s.%N)
        echo "[$(date +%T)] pressure $p % ($gib GiB each): $sys" >&2
        if [ "$sys" = ref ]; then
            pids=()
            for i in $(seq 0 $((NPROC - 1))); do
                # shellcheck disable=SC2046
                timeout $((SECS + BARRIER_S + 120)) $(cmd $i "$gib") >"$dir/proc_$i.json" 2>&1 &
                pids+=($!)
            done
            release "$dir/barrier" "${pids[@]}"
            bounded_wait "$dir" $((SECS + LOOP_GRACE)) "${pids[@]}"
        else
            budget=${BUDGET_MIB}MiB evict=opt engine=vmm policy=rr slice=$SLICE extra=() run_opts=()
            if [ "$SLICE" = adaptive ]; then
                slice=$chosen
                [ "$sys" = opt ] && { policy=adaptive; slice=1s; }
            fi
            case $sys in
            slice) budget=200GiB extra=(--set share=off) ;;
            lru) evict=lru ;;
            alloc) run_opts=(--templates off) ;;
            whole) evict=whole ;;
            demand) evict=lru engine=demand ;;
            esac
            export MSCHED_SOCKET=$BIN/gpu0.sock
            [ "$policy" = adaptive ] && read -r -a extra <<<"${ADAPTIVE_OPTS:-}"
            "$MSCHEDD" -v --socket "$MSCHED_SOCKET" --budget "$budget" --slice "$slice" --policy "$policy" \
                --evict "$evict" "${extra[@]}" --foreground >"$dir/mschedd.log" 2>&1 &
            dpid=$!
            for k in $(seq 1 50); do [ -S "$MSCHED_SOCKET" ] && break; sleep 0.1; done
            if ! kill -0 "$dpid" 2>/dev/null; then
                echo "run_sweep.sh: mschedd did not start for $sys: $(tail -n 3 "$dir/mschedd.log")" >&2
                save_raw
                exit 1
            fi
            pids=()
            for i in $(seq 0 $((NPROC - 1))); do
                # shellcheck disable=SC2046
                timeout $((SECS + BARRIER_S + 240)) "$MSCHED" run --engine "$engine" "${run_opts[@]}" --verbose -- \
                    $(cmd $i "$gib") >"$dir/proc_$i.json" 2>&1 &
                pids+=($!)
            done
            release "$dir/barrier" "${pids[@]}"
            t_go=$SECONDS
            sleep $W
            prom "$dir/m0.prom"
            sleep "$D"
            prom "$dir/m1.prom"
            # What `msched top` shows now (three frames, one a second, as on a terminal).
            timeout 15 script -qc "env TERM=dumb $MSCHED top --count 3 --interval 1s" /dev/null \
                >"$dir/top.txt" 2>&1 || timeout 10 "$MSCHED" top --once >"$dir/top.txt" 2>&1
            timeout 10 "$MSCHED" status >"$dir/status.txt" 2>&1
            bounded_wait "$dir" $((SECS + LOOP_GRACE - (SECONDS - t_go))) "${pids[@]}"
            prom "$dir/m2.prom"
            kill "$dpid"
            wait "$dpid" 2>/dev/null
            dpid=""
            unset MSCHED_SOCKET
        fi
        t1=$(date +%s.%N)
        # The slice the adaptive opt run chose: its tasks' GPU time over its switches (window).
        label=$SLICE
        if [ "$SLICE" = adaptive ] && [ "$sys" != ref ]; then
            if [ "$sys" = opt ]; then
                ms=$(python3 - "$dir" <<'PY'
import re, sys
def read(name):
    run, sw = {}, None
    for l in open(f"{sys.argv[1]}/{name}"):
        f = l.split()
        if len(f) == 2 and f[0].startswith("msched_task_run_seconds_total{"):
            run[f[0]] = float(f[1])
        elif len(f) == 2 and re.fullmatch(r'msched_switches_total(\{.*\})?', f[0]):
            sw = float(f[1])
    return run, sw
try:
    (r0, s0), (r1, s1) = read("m0.prom"), read("m1.prom")
except OSError as e:
    sys.exit(f"no daemon metrics for the adaptive slice ({e})")
# tasks present at both ends of the window only (one that exits inside it drops out)
run = sum(r1[k] - r0[k] for k in r1 if k in r0)
if s0 is None or s1 is None or s1 <= s0 or run <= 0:
    sys.exit("the adaptive opt run made no switch in its window: no slice to reuse")
print(max(1, round(1000 * run / (s1 - s0))))
PY
) || { echo "run_sweep.sh: SLICE=adaptive: cannot tell the slice opt picked" >&2; exit 1; }
                chosen=${ms}ms
                label="adaptive:$chosen"
            else
                label=$chosen
            fi
        fi
        python3 "$REC" procs "$dir" "$NPROC" workload="$WORKLOAD" pressure="$p" system="$sys" \
            gib_each="$gib" >>"$OUT/sweep.jsonl"
        if [ "$sys" != ref ]; then
            opts=()
            [ "$sys" = opt ] && [ "$SLICE" = adaptive ] && [ -n "${ADAPTIVE_OPTS:-}" ] &&
                opts=("adaptive_opts=$ADAPTIVE_OPTS")
            python3 "$REC" window "$dir" workload="$WORKLOAD" pressure="$p" system="$sys" \
                window_s="$D" slice="$label" wall_s="$(awk "BEGIN { print $t1 - $t0 }")" \
                "${opts[@]}" >>"$OUT/sweep.jsonl"
        fi
        save_raw
    done
done
save_raw
rm -rf "$BIN"
