#!/usr/bin/env bash
# bench/templates/run_templates.sh OUT [PART...] - kernel templates on a GPU machine
# (docs/templates.md): the Compute Sanitizer profiler, the rules it learns, their accuracy on a
# run with other inputs, and runs under a budget with the templates against allocation
# granularity, outputs compared with native runs.
#
# Parts (default: overhead probe llama):
#   overhead  bench/shim/launch_overhead.cu (back-to-back launches of a kernel with three pointer
#          arguments): native, under the engine (alone, 1 GiB budget) with --templates off, and
#          with a store holding that kernel's template (fixed rules on all three pointers), in
#          one run: the predictor's added cost per launch is the difference of the last two
#          medians (OUT/overhead.jsonl).
#   probe  bench/templates/tmpl_probe.cu (one 2.2 GiB arena; linear, struct, strided, per-index
#          and pointer-chasing kernels): native at scales 1 and 2 (timed: the profiler's cost is
#          the profiled run against it); `msched profile` at scale 1 (learns OUT/probe.store) and
#          at scale 2 (OUT/probe-s2.prof); `--show`; `--evaluate` of the scale-1 store on the
#          scale-2 profile (the accuracy a launch never profiled gets); then scale 2 alone under
#          512 MiB with the store and with --templates off, and with the store in the chunk
#          sizes of PROBE_CHUNKS (MiB, default 16; `msched run --chunk`).
#   llama  bench/workloads/llama_onebuf.py (7 GiB of weights in one buffer): native; profiled
#          with --new 4 at prompt lengths 32 and 40 (both learned into OUT/llama.store; raw
#          OUT/llama-1.prof, OUT/llama-1b.prof), profiled again with another seed and prompt
#          length, 48 (OUT/llama-2.prof) for --evaluate; alone under 3.5 GiB with the store and
#          without; two at once under one mschedd at 3.5 GiB (adaptive slices: each switch
#          moves about 3.5 GiB each way, which 100 ms round-robin slices would repeat every
#          slice) with the store (LLAMA_PAIR=0 leaves this and the run without the store out). Under half its weights each
#          decode step reads the other half over the link, so the alone runs take several
#          times native and the pair twice that.
#   trio   three one-buffer Llamas side by side under one mschedd (bench/micro/run_sweep.sh
#          WORKLOAD=L, adaptive slices), each a third of the pressure of a 16 GiB budget, the
#          templates of OUT/llama.store (learned here at 2 GiB of weights when the llama part did
#          not run: the same kernels, fewer layers): TRIO_SYSTEMS (default "ref opt alloc whole")
#          at TRIO_PRESSURES (default 200) for TRIO_SECS seconds (default 40); `alloc` is opt's
#          daemon with the processes at allocation granularity (--templates off). Records in
#          OUT/trio.jsonl, the table in OUT/trio.txt (bench/micro/summarize_sweep.py --workload
#          L: throughput normalized to ref, opt / whole, opt / demand, the GiB each switch moved
#          under opt and alloc), and SAME/DIFF of every process's requests against its ref
#          process, request by request (llama_onebuf's request_digests).
# OUT/templates.txt: one line per run (exit status, wall seconds), SAME/DIFF against native, the
# engine's summary lines, the accuracy lines; every run's output in OUT/templates-logs.tgz.
# MSCHED, MSCHEDD: the binaries (default build/bin/...). TIMEOUT: seconds any one run may take
# (default 300; status 124 when cut). Exit status 0 when every comparison is SAME.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
OUT=${1:?usage: run_templates.sh OUT [overhead|probe|llama|trio]...}
shift
PARTS=${*:-overhead probe llama}
mkdir -p "$OUT"
LOGS=$(mktemp -d)
REPORT=$OUT/templates.txt
: >"$REPORT"
MSCHED=${MSCHED:-$ROOT/build/bin/msched}
MSCHEDD=${MSCHEDD:-$ROOT/build/bin/mschedd}
TIMEOUT=${TIMEOUT:-300}
BIN=$ROOT/build/templates
mkdir -p "$BIN"
export PYTHONUNBUFFERED=1 CUBLAS_WORKSPACE_CONFIG=:4096:8 MSCHED_VERBOSE=1
bad=0

say() { echo "$*" | tee -a "$REPORT"; }

make -s -j"$(nproc)" build/bin/msched build/bin/mschedd shim >/dev/null || {
    echo "run_templates.sh: building msched failed" >&2
    exit 1
}
grep -q "ms_prof_patch = text_" build/gen/prof_patch.c || {
    echo "run_templates.sh: the profiler's device patch is not built (nvcc, Sanitizer headers)" >&2
    exit 1
}
nvcc -O2 "${NVCC_ARCH:--arch=sm_90}" -o "$BIN/tmpl_probe" bench/templates/tmpl_probe.cu || exit 1
nvcc -O2 "${NVCC_ARCH:--arch=sm_90}" -o "$BIN/launch_overhead" bench/shim/launch_overhead.cu || exit 1

# timed NAME CMD...: stdout to LOGS/NAME.out, stderr to LOGS/NAME.err; sets WALL and RC.
timed() {
    local name=$1
    shift
    local t0 t1
    t0=$(date +%s.%N)
    timeout "$TIMEOUT" "$@" >"$LOGS/$name.out" 2>"$LOGS/$name.err"
    RC=$?
    t1=$(date +%s.%N)
    WALL=$(python3 -c "print(f'{$t1 - $t0:.2f}')")
    say "$name: rc=$RC wall=${WALL}s"
}

# compare A B WHAT: the two runs' results (grep -Eo WHAT of stdout) must match.
compare() {
    local a b
    a=$(grep -Eo "$3" "$LOGS/$1.out")
    b=$(grep -Eo "$3" "$LOGS/$2.out")
    if [ -n "$a" ] && [ "$a" = "$b" ]; then
        say "SAME $2 vs $1"
    else
        say "DIFF $2 vs $1: [$(head -c 200 <<<"$a")] vs [$(head -c 200 <<<"$b")]"
        bad=1
    fi
}

summary() {
    grep -E "engine \(|misses:|templates:|daemon:|profile:|MSCHED_PROFILE|refused|failed|error" \
        "$LOGS/$1.err" | sed "s/^/  $1: /" | tee -a "$REPORT"
}

for part in $PARTS; do
    case $part in
    overhead)
        printf '%s\n' "msched-templates 1" \
            "kernel mod=0 launches=4 opaque=0 unsafe=0 name=_Z4tinyPfPKfPi" \
            "arg 0 form=fixed written=1 refused=0 launches=4 lo=0 hi=65536 count=1 stride=0" \
            "arg 8 form=fixed written=0 refused=0 launches=4 lo=0 hi=65536 count=1 stride=0" \
            "arg 16 form=fixed written=0 refused=0 launches=4 lo=0 hi=65536 count=1 stride=0" \
            "end" >"$OUT/overhead.store"
        : >"$OUT/overhead.jsonl"
        for round in 1 2 3; do
            "$BIN/launch_overhead" "native-$round" >>"$OUT/overhead.jsonl"
            "$MSCHED" run --no-daemon --budget 1GiB --templates off -- \
                "$BIN/launch_overhead" "engine-$round" >>"$OUT/overhead.jsonl"
            "$MSCHED" run --no-daemon --budget 1GiB --templates "$OUT/overhead.store" --verbose -- \
                "$BIN/launch_overhead" "templates-$round" >>"$OUT/overhead.jsonl" 2>"$LOGS/ovh-$round.err"
        done
        summary ovh-3
        tee -a "$REPORT" <"$OUT/overhead.jsonl"
        ;;
    probe)
        P=$BIN/tmpl_probe
        timed probe-native-s1 "$P" --scale 1
        timed probe-native-s2 "$P" --scale 2
        timed probe-profile-s1 "$MSCHED" profile --raw "$OUT/probe-s1.prof" --out "$OUT/probe.store" \
            -- "$P" --scale 1
        summary probe-profile-s1
        compare probe-native-s1 probe-profile-s1 '^checksum .*'
        timed probe-profile-s2 "$MSCHED" profile --raw "$OUT/probe-s2.prof" --out "$LOGS/probe-s2.store" \
            -- "$P" --scale 2
        "$MSCHED" profile --show "$OUT/probe.store" >"$OUT/probe-show.txt" 2>&1
        "$MSCHED" profile --evaluate "$OUT/probe-s2.prof" --out "$OUT/probe.store" 2>&1 | tee -a "$REPORT"
        timed probe-budget-tmpl "$MSCHED" run --no-daemon --budget 512MiB --templates "$OUT/probe.store" \
            --verbose -- "$P" --scale 2
        summary probe-budget-tmpl
        compare probe-native-s2 probe-budget-tmpl '^checksum .*'
        timed probe-budget-whole "$MSCHED" run --no-daemon --budget 512MiB --templates off \
            --verbose -- "$P" --scale 2
        summary probe-budget-whole
        compare probe-native-s2 probe-budget-whole '^checksum .*'
        for c in ${PROBE_CHUNKS:-16}; do # the store again in smaller chunks (MSCHED_CHUNK)
            timed probe-budget-tmpl-c$c "$MSCHED" run --no-daemon --budget 512MiB --chunk "${c}MiB" \
                --templates "$OUT/probe.store" --verbose -- "$P" --scale 2
            summary probe-budget-tmpl-c$c
            compare probe-native-s2 probe-budget-tmpl-c$c '^checksum .*'
        done
        ;;
    llama)
        L=(python3 bench/workloads/llama_onebuf.py --weights-gib 7 --kv-gib 0.5 --compat)
        timed llama-native "${L[@]}" --new 32
        timed llama-profile "$MSCHED" profile --raw "$OUT/llama-1.prof" --out "$OUT/llama.store" \
            -- "${L[@]}" --new 4
        summary llama-profile
        # a second prompt length into the same store: kernels whose sizes follow the prompt get
        # linear rules (one length alone gives them fixed ones, which miss longer prompts)
        timed llama-profile-b "$MSCHED" profile --raw "$OUT/llama-1b.prof" --out "$OUT/llama.store" \
            -- "${L[@]}" --new 4 --prompt 40
        summary llama-profile-b
        timed llama-profile-2 "$MSCHED" profile --raw "$OUT/llama-2.prof" --out "$LOGS/llama-2.store" \
            -- "${L[@]}" --new 4 --seed 7 --prompt 48
        "$MSCHED" profile --show "$OUT/llama.store" >"$OUT/llama-show.txt" 2>&1
        "$MSCHED" profile --evaluate "$OUT/llama-2.prof" --out "$OUT/llama.store" 2>&1 | tee -a "$REPORT"
        timed llama-half-tmpl "$MSCHED" run --no-daemon --budget 3584MiB --templates "$OUT/llama.store" \
            --verbose -- "${L[@]}" --new 32
        summary llama-half-tmpl
        compare llama-native llama-half-tmpl '^RESULT .*'
        [ "${LLAMA_PAIR:-1}" = 1 ] || continue # the quick form: no whole-allocation run, no pair
        timed llama-half-whole "$MSCHED" run --no-daemon --budget 3584MiB --templates off \
            --verbose -- "${L[@]}" --new 32
        summary llama-half-whole
        compare llama-native llama-half-whole '^RESULT .*'
        sockdir=$(mktemp -d)
        "$MSCHEDD" --socket "$sockdir/gpu0.sock" --budget 3584MiB --policy adaptive --foreground -v \
            >"$LOGS/llama-mschedd.log" 2>&1 &
        dpid=$!
        for _ in $(seq 1 100); do [ -S "$sockdir/gpu0.sock" ] && break; sleep 0.1; done
        t0=$(date +%s.%N)
        for i in 1 2; do
            MSCHED_SOCKET=$sockdir/gpu0.sock timeout "$TIMEOUT" "$MSCHED" run \
                --templates "$OUT/llama.store" --verbose -- "${L[@]}" --new 32 \
                >"$LOGS/llama-pair$i.out" 2>"$LOGS/llama-pair$i.err" &
            eval "p$i=\$!"
        done
        # shellcheck disable=SC2154
        wait "$p1"
        r1=$?
        # shellcheck disable=SC2154
        wait "$p2"
        r2=$?
        t1=$(date +%s.%N)
        kill "$dpid" 2>/dev/null
        wait "$dpid" 2>/dev/null
        say "llama pair under one mschedd at 3.5 GiB with templates: rc=$r1,$r2 wall=$(python3 -c "print(f'{$t1 - $t0:.2f}')")s"
        summary llama-pair1
        summary llama-pair2
        compare llama-native llama-pair1 '^RESULT .*'
        compare llama-native llama-pair2 '^RESULT .*'
        ;;
    trio)
        if [ ! -s "$OUT/llama.store" ]; then
            timed trio-profile "$MSCHED" profile --raw "$LOGS/trio.prof" --out "$OUT/llama.store" \
                -- python3 bench/workloads/llama_onebuf.py --weights-gib 2 --kv-gib 0.5 --new 4
            summary trio-profile
        fi
        MSCHED_TEMPLATES=$OUT/llama.store WORKLOAD=L bash bench/micro/run_sweep.sh "$LOGS/trio" \
            "${TRIO_PRESSURES:-200}" "${TRIO_SYSTEMS:-ref opt alloc whole}" "${TRIO_SECS:-40}" adaptive \
            >"$LOGS/trio.log" 2>&1 || {
            say "trio: run_sweep.sh failed: $(tail -n 3 "$LOGS/trio.log")"
            bad=1
        }
        cp "$LOGS/trio/sweep.jsonl" "$OUT/trio.jsonl" 2>/dev/null
        python3 bench/micro/summarize_sweep.py --workload L "$OUT/trio.jsonl" >"$OUT/trio.txt" 2>&1
        tee -a "$REPORT" <"$OUT/trio.txt"
        python3 bench/templates/same_requests.py "$OUT/trio.jsonl" 2>&1 | tee "$LOGS/trio-same.txt" >>"$REPORT"
        cat "$LOGS/trio-same.txt"
        grep -q "^DIFF\|^none" "$LOGS/trio-same.txt" && bad=1
        ;;
    *)
        echo "run_templates.sh: unknown part '$part' (overhead, probe, llama, trio)" >&2
        exit 2
        ;;
    esac
done
tar -C "$LOGS" -czf "$OUT/templates-logs.tgz" .
rm -rf "$LOGS"
exit $bad
