#!/usr/bin/env bash
# bench/early/run_early.sh OUT [PRESSURES] [WORKLOAD] - early start (the daemon's early_run,
# docs/daemon.md) against the default, side by side in one run on a GPU machine.
#
# For each pressure (default "200 300") bench/micro/run_sweep.sh runs WORKLOAD (default micro;
# D for the Llama decode mix) as `ref` (no msched), `slice` (the daemon's slices with a budget
# above the total: the in-memory run opt is measured against) and `opt` under the adaptive
# policy, then `opt` again with `--set early_run=on` (ADAPTIVE_OPTS): the same build, the same
# slice rule, only RUN's timing differs. BASE_SYSTEMS replaces "ref slice opt" (ref and opt are
# needed). OUT/base.jsonl and OUT/early.jsonl hold the sweeps' records (their
# daemon windows carry the switch split: msched_switch_first_command_* and
# msched_switch_complete_*, and the RUN-to-first-command median); OUT/early.txt the normalized
# throughputs (bench/early/summary.py); OUT/raw.tgz every output. LOOP_S sets the timed loop
# (default 25 s for micro, 40 s for D).
#
# The second run is any other variant of opt: B_OPTS replaces its daemon options (default
# "--set early_run=on"), B_ENV adds VAR=VALUE words to its environment (the shims'), B_LABEL
# names it in the table (default early_run). For example, the switch without host memory made
# ahead and without deferred host maps, against today's defaults:
#   B_OPTS="--set prepare_host=off" B_ENV="MSCHED_DEFER_HOST_MAP=0" B_LABEL="no prepare, no defer" \
#       bench/early/run_early.sh OUT "150 200" D
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
OUT=${1:?usage: run_early.sh OUT [PRESSURES] [WORKLOAD]}
PRESSURES=${2:-200 300}
export WORKLOAD=${3:-micro}
SECS=${LOOP_S:-$([ "$WORKLOAD" = D ] && echo 40 || echo 25)}
mkdir -p "$OUT"
make -s -j"$(nproc)" build/bin/msched build/bin/mschedd shim >"$OUT/build.log" 2>&1 || {
    tail -n 20 "$OUT/build.log" >&2
    exit 1
}
tmp=$(mktemp -d)
rc=0
bench/micro/run_sweep.sh "$tmp/base" "$PRESSURES" "${BASE_SYSTEMS:-ref slice opt}" "$SECS" adaptive >"$tmp/base.log" 2>&1 || rc=1
read -r -a benv <<<"${B_ENV:-}"
env "${benv[@]}" ADAPTIVE_OPTS="${B_OPTS:---set early_run=on}" \
    bench/micro/run_sweep.sh "$tmp/early" "$PRESSURES" "opt" "$SECS" adaptive >"$tmp/early.log" 2>&1 || rc=1
cp "$tmp/base/sweep.jsonl" "$OUT/base.jsonl" 2>/dev/null
cp "$tmp/early/sweep.jsonl" "$OUT/early.jsonl" 2>/dev/null
python3 bench/early/summary.py "$OUT/base.jsonl" "$OUT/early.jsonl" default "${B_LABEL:-early_run}" |
    tee "$OUT/early.txt" || rc=1
tar -C "$tmp" -czf "$OUT/raw.tgz" . 2>/dev/null
rm -rf "$tmp"
exit $rc
