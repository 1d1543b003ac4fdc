#!/usr/bin/env bash
# bench/micro/run_ab.sh BASE OUT "PRESSURES" "SYSTEMS" [SECONDS] [SLICE] - one sweep, two builds,
# interleaved: for each pressure, bench/micro/run_sweep.sh runs in BASE (a source tree of an
# earlier commit, e.g. `git archive <commit> | tar -x -C build-base`), then in this tree, so
# the two builds meet the same machine minutes apart and a regression shows as a difference
# larger than the spread between repeats. WORKLOAD (micro, A, B, C, D) and the other variables
# of run_sweep.sh pass through.
# Builds both (make build/bin/msched build/bin/mschedd shim in each) first.
# Writes OUT/base.jsonl and OUT/new.jsonl (each the concatenated sweep.jsonl of its runs; the
# records gain "build": "base" or "new"), OUT/ab-raw.tgz (every raw archive and log), and
# prints bench/micro/summarize_sweep.py's table for each. Exit status: 0, or the first failing
# run_sweep.sh's.
set -u
BASE=${1:?usage: run_ab.sh BASE OUT PRESSURES SYSTEMS [SECONDS] [SLICE]}
OUT=${2:?usage: run_ab.sh BASE OUT PRESSURES SYSTEMS [SECONDS] [SLICE]}
PRESSURES=${3:?pressures, e.g. "150 200"}
SYSTEMS=${4:?systems, e.g. "opt"}
SECS=${5:-25}
SLICE=${6:-1s}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BASE=$(cd "$BASE" && pwd) || exit 2
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
WORK=$(mktemp -d)
rc=0
for tree in "$BASE" "$ROOT"; do
    make -s -C "$tree" -j"$(nproc)" build/bin/msched build/bin/mschedd shim >"$WORK/make.log" 2>&1 || {
        echo "run_ab.sh: building $tree failed" >&2
        tail -20 "$WORK/make.log" >&2
        exit 1
    }
done
for p in $PRESSURES; do
    for b in base new; do
        tree=$ROOT
        [ "$b" = base ] && tree=$BASE
        echo "run_ab.sh: $b at $p % ($(date -u +%T))"
        (cd "$tree" && bash bench/micro/run_sweep.sh "$WORK/$b-$p" "$p" "$SYSTEMS" "$SECS" "$SLICE") \
            >"$WORK/$b-$p.log" 2>&1
        r=$?
        [ "$r" != 0 ] && [ "$rc" = 0 ] && rc=$r
        [ -f "$WORK/$b-$p/sweep.jsonl" ] &&
            sed "s/^{/{\"build\": \"$b\", /" "$WORK/$b-$p/sweep.jsonl" >>"$OUT/$b.jsonl"
    done
done
tar -czf "$OUT/ab-raw.tgz" -C "$WORK" . 2>/dev/null
for b in base new; do
    echo "== $b"
    [ -f "$OUT/$b.jsonl" ] &&
        python3 "$ROOT/bench/micro/summarize_sweep.py" --workload "${WORKLOAD:-micro}" "$OUT/$b.jsonl"
done
exit "$rc"
