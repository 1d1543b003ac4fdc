#!/usr/bin/env bash
# bench/amap/run_amap.sh OUT [PART...] - always-mapped memory on a GPU machine (docs/engine.md,
# "Always mapped"): what host-backed chunks do, and programs that the allocation-granularity
# engine refused or broke, each run natively and under msched with a budget below its footprint,
# outputs compared byte for byte.
#
# Parts (default: all, in this order):
#   probe     bench/probe/hostmap_probe (kernels, copies, memsets, atomics, remaps on a host-
#             located VMM handle against a device one) -> OUT/hostmap.jsonl
#   ptrchase  bench/workloads/ptrchase (8 GiB reached only through a device-built pointer table):
#             native, then alone under 2 GiB (a quarter of its footprint)
#   llama     bench/workloads/llama_onebuf.py with all 7 GiB of weights in one buffer: native,
#             alone under half the buffer (3.5 GiB), then two at once under one mschedd whose
#             budget is half of one buffer's size for both (3.5 GiB)
# Every run's stdout (the program's result) and stderr (msched's summary, -v) go to
# OUT/amap-logs.tgz; OUT/amap.txt has one line per comparison ("SAME"/"DIFF", wall seconds) and
# the engine's summary lines. Exit status 0 when every comparison is SAME.
# MSCHED, MSCHEDD: the binaries (default build/bin/...). Builds what it needs (make, nvcc).
# PAIR_TIMEOUT: seconds each of the two daemon runs may take (default 300; status 124 when cut).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
OUT=${1:?usage: run_amap.sh OUT [probe|ptrchase|llama]...}
shift
PARTS=${*:-probe ptrchase llama}
mkdir -p "$OUT"
LOGS=$(mktemp -d)
REPORT=$OUT/amap.txt
: >"$REPORT"
MSCHED=${MSCHED:-$ROOT/build/bin/msched}
MSCHEDD=${MSCHEDD:-$ROOT/build/bin/mschedd}
BIN=$ROOT/build/amap
mkdir -p "$BIN"
ARCH=${NVCC_ARCH:--arch=sm_90}
export PYTHONUNBUFFERED=1 CUBLAS_WORKSPACE_CONFIG=:4096:8
PAIR_TIMEOUT=${PAIR_TIMEOUT:-300}
bad=0

say() { echo "$*" | tee -a "$REPORT"; }

make -s -j"$(nproc)" build/bin/msched build/bin/mschedd shim >/dev/null || {
    echo "run_amap.sh: building msched failed" >&2
    exit 1
}
# shellcheck disable=SC2086
nvcc -O2 $ARCH -o "$BIN/hostmap_probe" bench/probe/hostmap_probe.cu -lcuda &&
    nvcc -O2 $ARCH -o "$BIN/ptrchase" bench/workloads/ptrchase.cu || {
    echo "run_amap.sh: nvcc failed" >&2
    exit 1
}

# timed NAME CMD...: run, stdout to LOGS/NAME.out, stderr to LOGS/NAME.err; sets WALL and RC.
timed() {
    local name=$1
    shift
    local t0 t1
    t0=$(date +%s.%N)
    "$@" >"$LOGS/$name.out" 2>"$LOGS/$name.err"
    RC=$?
    t1=$(date +%s.%N)
    WALL=$(python3 -c "print(f'{$t1 - $t0:.2f}')")
}

# compare A B WHAT: the two runs' results (what grep -Eo WHAT finds in stdout) must match.
compare() {
    local a b
    a=$(grep -Eo "$3" "$LOGS/$1.out")
    b=$(grep -Eo "$3" "$LOGS/$2.out")
    if [ -n "$a" ] && [ "$a" = "$b" ]; then
        say "SAME $2 vs $1 ($(wc -l <<<"$a") result lines)"
    else
        say "DIFF $2 vs $1: [$(head -c 200 <<<"$a")] vs [$(head -c 200 <<<"$b")]"
        bad=1
    fi
}

summary() { grep -E "engine \(|misses:|daemon:|refused|failed|error" "$LOGS/$1.err" | sed "s/^/  $1: /" | tee -a "$REPORT"; }

for part in $PARTS; do
    case $part in
    probe)
        timed probe "$BIN/hostmap_probe" --json "$OUT/hostmap.jsonl"
        say "probe: rc=$RC wall=${WALL}s $(tail -n 1 "$LOGS/probe.out")"
        [ "$RC" = 0 ] || bad=1
        ;;
    ptrchase)
        timed ptr-native "$BIN/ptrchase"
        say "ptrchase native: rc=$RC wall=${WALL}s"
        timed ptr-quarter "$MSCHED" run --no-daemon --budget 2GiB --verbose -- "$BIN/ptrchase"
        say "ptrchase under 2 GiB alone: rc=$RC wall=${WALL}s"
        summary ptr-quarter
        compare ptr-native ptr-quarter '^checksum'
        ;;
    llama)
        L=(python3 bench/workloads/llama_onebuf.py --weights-gib 7 --kv-gib 0.5 --new 32 --compat)
        timed llama-native "${L[@]}"
        say "llama native: rc=$RC wall=${WALL}s"
        timed llama-half timeout "$PAIR_TIMEOUT" "$MSCHED" run --no-daemon --budget 3584MiB --verbose -- "${L[@]}"
        say "llama alone under 3.5 GiB: rc=$RC wall=${WALL}s"
        summary llama-half
        compare llama-native llama-half '^RESULT .*'
        sockdir=$(mktemp -d)
        "$MSCHEDD" --socket "$sockdir/gpu0.sock" --budget 3584MiB --foreground -v \
            >"$LOGS/llama-mschedd.log" 2>&1 &
        dpid=$!
        for _ in $(seq 1 100); do [ -S "$sockdir/gpu0.sock" ] && break; sleep 0.1; done
        t0=$(date +%s.%N)
        for i in 1 2; do
            MSCHED_SOCKET=$sockdir/gpu0.sock timeout "$PAIR_TIMEOUT" "$MSCHED" run --verbose -- "${L[@]}" \
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
        say "llama x2 under one mschedd at 3.5 GiB: rc=$r1,$r2 wall=$(python3 -c "print(f'{$t1 - $t0:.2f}')")s"
        summary llama-pair1
        summary llama-pair2
        compare llama-native llama-pair1 '^RESULT .*'
        compare llama-native llama-pair2 '^RESULT .*'
        ;;
    *) echo "run_amap.sh: unknown part $part" >&2 ;;
    esac
done
tar -czf "$OUT/amap-logs.tgz" -C "$LOGS" .
rm -rf "$LOGS"
exit $bad
