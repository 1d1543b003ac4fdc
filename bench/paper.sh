#!/usr/bin/env bash
# bench/paper.sh [--part P]... [--out DIR] [--list] [--no-page]
#
# The evaluation suite (docs/evaluation.md) on a GPU machine, in parts of under 10 minutes each:
# every part writes its raw results as DIR/<part>.jsonl (replacing that part's earlier results;
# DIR/<part>-<slice>.jsonl for a sweep part at a fixed SLICE, below) and its raw outputs as
# DIR/raw/<part>.tgz (the same name), then bench/paper/make_page.py regenerates the
# measured blocks of docs/evaluation.md and its plots from everything in DIR. Without --part
# every part runs, one after the other. DIR defaults to bench/results/gpu/paper.
#
# Parts (--list prints them with what they run):
#   env              the machine: GPU, driver, CUDA, PyTorch and transformers versions (env.json;
#                    written before any other part too)
#   engine           tests/gpu/migrate_bench: evict / populate / swap GB/s, mapping cost
#   micro-LO-HI ...  bench/micro/run_sweep.sh for one workload at two pressures (LO HI) or one
#                    (W-P): workloads micro, A, B, C, D; pressures 100, 150, 200, 300; systems
#                    ref slice opt lru whole demand; A, B, C and D also in two parts per
#                    pressure, W-P-a (ref slice opt) and W-P-b (lru whole demand, normalized by
#                    part a's ref); A-150-200 runs both of A's pressures in one part, and
#                    micro-P-b the baselines of one micro pressure at the slice the adaptive
#                    opt of micro-LO-HI picked, for a micro part run with fewer systems (neither
#                    in the default run, which runs micro's systems in micro-LO-HI)
#   rtbe             bench/workloads/run_rtbe.sh: ref msched tslice slice
#   accuracy         bench/accuracy/run_accuracy.sh: each workload's programs alone, the launch
#                    predictor against the driver's fault reports (needs CUPTI)
#   strict           the same programs with MSCHED_STRICT=1: every command runs with only its
#                    predicted memory mapped, so a miss would end the program (coverage)
# SYSTEMS="ref opt ..." in the environment narrows the sweep parts' systems (a part rerun with
# fewer systems replaces the part's earlier results); RTBE_SYSTEMS the same for the rtbe part;
# ACC_SECS (default 15) is how long each accuracy or strict program runs, ACC_LIMIT its time
# limit with loading (default ACC_SECS + 90), PROGRAMS which programs (default all 11).
# SLICE (default adaptive) is the sweep parts' time slice. adaptive runs opt under msched's
# adaptive policy and every other system at the slice it picked (see bench/micro/run_sweep.sh;
# a W-P-b part, which has no opt run, takes the slice from W-P-a's results, so run part a
# first), as the targets ask. A fixed slice (SLICE=1s, 500ms) runs every system round-robin at
# it, and its results go to DIR/<part>-<slice>.jsonl (and raw/<part>-<slice>.tgz), beside the
# adaptive ones. ADAPTIVE_OPTS adds mschedd options to the adaptive opt run (e.g. "--set
# switch_frac=5"; recorded with its results, bench/micro/run_sweep.sh); those results go to
# DIR/<part>-<tag>.jsonl (tag: the options' letters, digits and underscores, switch_frac5),
# beside the default policy's, and a part b run with the same ADAPTIVE_OPTS takes its slice from
# that part a. LOOP_S sets every sweep process's timed loop in seconds (default 25 for micro
# and A, 35 for B, 40 for C and D): longer slices need longer loops for the same number of
# switches in the measuring window.
# A sweep's processes get BARRIER_S (default 240) to load and LOOP_GRACE (default 90) past their
# timed loop before the sweep kills them and moves on (bench/micro/run_sweep.sh); a part cut off
# by a time limit or ^C keeps what it wrote in DIR/raw/<part>.interrupted.tgz.
# Run from the repository root on the GPU machine; builds what it needs first.
set -u
cd "$(dirname "$0")/.." || exit 1
export BARRIER_S=${BARRIER_S:-240} LOOP_GRACE=${LOOP_GRACE:-90}
# run_sweep.sh measures from W (default 5) s into the loop and needs 9 s more.
if [ -n "${LOOP_S:-}" ] && ! { [[ $LOOP_S =~ ^[1-9][0-9]*$ ]] && [ "$LOOP_S" -ge $((${W:-5} + 9)) ]; }; then
    echo "paper.sh: LOOP_S must be a whole number of seconds, at least $((${W:-5} + 9)), not '$LOOP_S'" >&2
    exit 2
fi
OUT=bench/results/gpu/paper
PARTS=()
PAGE=1
ALL_PARTS="env engine micro-100-150 micro-200-300 micro-100-b micro-150-b micro-200-b micro-300-b A-150-200 A-150-a A-150-b A-200-a A-200-b A-300
B-150-a B-150-b B-200-a B-200-b B-300-a B-300-b C-150-a C-150-b C-200-a C-200-b C-300-a C-300-b
D-150-a D-150-b D-200-a D-200-b D-300-a D-300-b rtbe accuracy strict"
# Without --part every part runs but these: A-150-200 (the same runs as A-150-a ... A-200-b) and
# micro-P-b (micro-LO-HI runs every system already).
DEFAULT_PARTS=$(echo $ALL_PARTS | sed 's/ A-150-200\b//; s/ micro-[0-9]*-b\b//g')
USER_SYSTEMS=${SYSTEMS:-}
SYSTEMS=${SYSTEMS:-ref slice opt lru whole demand}
SLICE=${SLICE:-adaptive}
if [ "$SLICE" != adaptive ] && ! [[ $SLICE =~ ^[1-9][0-9]*(ms|s)$ ]]; then
    echo "paper.sh: SLICE must be adaptive or a duration such as 1s or 500ms, not '$SLICE'" >&2
    exit 2
fi
export SLICE
# Results of the adaptive policy run with options go beside the default policy's, not over them:
# DIR/<part>-<tag>.jsonl, the tag being the options' letters, digits and underscores
# ("--set switch_frac=5": switch_frac5).
OPTS_TAG=""
if [ -n "${ADAPTIVE_OPTS:-}" ]; then
    OPTS_TAG=$(printf '%s' "$ADAPTIVE_OPTS" | sed 's/--set//g; s/[^A-Za-z0-9_]//g')
    OPTS_TAG=${OPTS_TAG:-opts}
fi

usage() {
    awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0" | sed 's/^# \{0,1\}//'
    exit "${1:-2}"
}

while [ $# -gt 0 ]; do
    case $1 in
    --part) [ $# -ge 2 ] || usage; PARTS+=("$2"); shift 2 ;;
    --out) [ $# -ge 2 ] || usage; OUT=$2; shift 2 ;;
    --no-page) PAGE=0; shift ;;
    --list)
        for p in $ALL_PARTS; do
            case " $DEFAULT_PARTS " in
            *" $p "*) only="" ;;
            *) only=" (only with --part)" ;;
            esac
            case $p in
            env) d="machine and versions -> env.json" ;;
            engine) d="migrate_bench 4 and 16 GiB in 64 MiB chunks" ;;
            rtbe) d="RT+BE: ref msched tslice slice, 40 s of requests" ;;
            accuracy) d="prediction accuracy, 11 programs alone, ${ACC_SECS:-15} s each" ;;
            strict) d="coverage: the same 11 programs under MSCHED_STRICT=1, ${ACC_SECS:-15} s each" ;;
            *-a) d="workload ${p%%-*} at $(echo "${p#*-}" | cut -d- -f1) %: ${USER_SYSTEMS:-ref slice opt}" ;;
            *-b) d="workload ${p%%-*} at $(echo "${p#*-}" | cut -d- -f1) %: ${USER_SYSTEMS:-lru whole demand}" ;;
            *) d="workload ${p%%-*} at ${p#*-} %: $SYSTEMS" ;;
            esac
            printf '%-14s %s%s\n' "$p" "$d" "$only"
        done
        exit 0
        ;;
    -h | --help) usage 0 ;;
    *) echo "paper.sh: unknown argument '$1'" >&2; usage ;;
    esac
done
[ ${#PARTS[@]} -gt 0 ] || read -r -a PARTS <<<"$DEFAULT_PARTS"
for p in "${PARTS[@]}"; do
    case " $(echo $ALL_PARTS) " in
    *" $p "*) ;;
    *) echo "paper.sh: unknown part '$p' (see --list)" >&2; exit 2 ;;
    esac
done
mkdir -p "$OUT/raw"

log() { echo "[$(date +%T)] paper: $*" >&2; }

part_env() {
    python3 - "$OUT/env.json" <<'PY'
import datetime, json, os, platform, subprocess, sys
def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=60).stdout.strip()
    except Exception:
        return ""
env = {"gpu": sh("nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | head -1"),
       "driver": sh("nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1"),
       "cuda": sh("nvcc --version | tail -1"),
       "torch": sh("python3 -c 'import torch; print(torch.__version__)'"),
       "transformers": sh("python3 -c 'import transformers; print(transformers.__version__)'"),
       "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
       "host": f"{platform.machine()}, {sh('nproc')} CPUs",
       "budget_gib": int(os.environ.get("BUDGET_MIB", "16384")) / 1024,
       "slice": os.environ.get("SLICE", "adaptive")}
json.dump(env, open(sys.argv[1], "w"), indent=1)
PY
}

part_engine() {
    build/gpu/migrate_bench --ptx build/gpu --gib 4,16 --chunk-mib 64 2>"$1/migrate_bench.err" |
        python3 -c 'import json,sys
for l in sys.stdin:
    if l.startswith("{"):
        r = json.loads(l); r["workload"] = "engine"; print(json.dumps(r))'
}

# Terminated mid-part (a time limit, ^C): keep what the part wrote so far as
# DIR/raw/<part>.interrupted.tgz (its results file stays as it was).
CUR_PART="" CUR_TMP=""
on_term() {
    if [ -n "$CUR_TMP" ] && [ -d "$CUR_TMP" ]; then
        sleep 1 # the sweep's own trap writes its raw archive into the part's directory
        tar -C "$CUR_TMP" -czf "$OUT/raw/$CUR_PART.interrupted.tgz" . 2>/dev/null
        rm -rf "$CUR_TMP"
        log "part $CUR_PART interrupted; what it wrote is in $OUT/raw/$CUR_PART.interrupted.tgz"
    fi
    exit 143
}
trap on_term TERM INT

run_part() {
    local p=$1 tmp rc=0 name=$1
    case $p in
    env | engine | rtbe | accuracy | strict) ;;
    *) if [ "$SLICE" != adaptive ]; then name=$p-$SLICE; elif [ -n "$OPTS_TAG" ]; then name=$p-$OPTS_TAG; fi ;;
    esac
    tmp=$(mktemp -d)
    CUR_PART=$name CUR_TMP=$tmp
    log "part $p"
    local t0=$SECONDS
    case $p in
    env) part_env; rm -rf "$tmp"; return ;;
    engine) part_engine "$tmp" >"$tmp/out.jsonl" || rc=$? ;;
    rtbe) bench/workloads/run_rtbe.sh "$tmp" "${RTBE_SYSTEMS:-ref msched tslice slice}" 40 || rc=$?
        mv "$tmp/rtbe.jsonl" "$tmp/out.jsonl" 2>/dev/null ;;
    accuracy) bench/accuracy/run_accuracy.sh "$tmp" "${ACC_SECS:-15}" || rc=$?
        mv "$tmp/accuracy.jsonl" "$tmp/out.jsonl" 2>/dev/null ;;
    strict) STRICT=1 bench/accuracy/run_accuracy.sh "$tmp" "${ACC_SECS:-15}" || rc=$?
        mv "$tmp/strict.jsonl" "$tmp/out.jsonl" 2>/dev/null ;;
    *)
        local w=${p%%-*} pr=${p#*-} secs=25 sys=$SYSTEMS
        case $w in C | D) secs=40 ;; B) secs=35 ;; esac
        secs=${LOOP_S:-$secs}
        # B, C and D load for long (before the start barrier): their systems come in two parts,
        # a (with the normalization) and b, each under 10 minutes
        local slice=$SLICE
        case $pr in
        *-a) pr=${pr%-a} sys=${USER_SYSTEMS:-ref slice opt} ;;
        *-b) pr=${pr%-b} sys=${USER_SYSTEMS:-lru whole demand}
            # part b has no opt run: it reuses the slice part a's adaptive opt picked (for
            # micro, whose part a is a two-pressure part, that part's)
            if [ "$SLICE" = adaptive ] && ! grep -qw opt <<<"$sys"; then
                local from=("$OUT/$w-$pr-a${OPTS_TAG:+-$OPTS_TAG}.jsonl") q
                if [ -z "$OPTS_TAG" ]; then
                    for q in $ALL_PARTS; do
                        [[ $q =~ ^$w-[0-9]+-[0-9]+$ ]] && from+=("$OUT/$q.jsonl")
                    done
                fi
                slice=$(python3 bench/paper/picked_slice.py "$w" "$pr" "${ADAPTIVE_OPTS:-}" "${from[@]}")
                if [ -z "$slice" ]; then
                    echo "paper.sh: SLICE=adaptive: part $w-$pr-b needs part $w-$pr-a (micro: the part with $pr %) run with SLICE=adaptive${OPTS_TAG:+ and the same ADAPTIVE_OPTS} first" >&2
                    rm -rf "$tmp"
                    return 1
                fi
                log "part $p: the slice part $w-$pr-a's adaptive opt picked, $slice"
            fi ;;
        esac
        WORKLOAD=$w bench/micro/run_sweep.sh "$tmp" "${pr//-/ }" "$sys" "$secs" "$slice" || rc=$?
        mv "$tmp/sweep.jsonl" "$tmp/out.jsonl" 2>/dev/null
        ;;
    esac
    if [ -s "$tmp/out.jsonl" ]; then
        mv "$tmp/out.jsonl" "$OUT/$name.jsonl"
    else
        echo "paper.sh: part $p produced no results (rc=$rc); earlier results kept" >&2
        [ "$rc" = 0 ] && rc=1
    fi
    tar -C "$tmp" -czf "$OUT/raw/$name.tgz" . 2>/dev/null
    rm -rf "$tmp"
    CUR_TMP=""
    log "part $p done in $((SECONDS - t0)) s (rc=$rc)"
    return "$rc"
}

make -s -j"$(nproc)" build/bin/msched build/bin/mschedd shim gpu >/dev/null || exit 1
[ -f "$OUT/env.json" ] || part_env
fail=0
for p in "${PARTS[@]}"; do
    run_part "$p" || fail=1
done
if [ "$PAGE" = 1 ]; then
    python3 bench/paper/make_page.py --results "$OUT" || fail=1
fi
exit $fail
