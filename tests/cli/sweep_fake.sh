#!/usr/bin/env bash
# tests/cli/sweep_fake.sh - bench/micro/run_sweep.sh end to end on the fake CUDA driver, so the
# benchmark harness that runs on the GPU machine is itself tested: four processes (the shim's
# engine_stress in its "timed" mode, through MICRO=) at 150 % of a 256 MiB budget (four cycles of 96 MiB), under `ref`
# (no msched), `opt` and `whole`, with SLICE=adaptive (opt picks the slice, whole uses it).
# Checks the JSON lines (every process's rate, the daemon windows, the slice labels), that the
# daemon moved memory under opt, and that summarize_sweep.py makes its table from them.
. "$(dirname "$0")/../daemon/lib.sh"

need_fake_cuda
SECS=12
case "$BUILD" in *thread* | *address*) SECS=14 ;; esac

# micro's command line is KIND GIB SECONDS; the stand-in waits at the harness's start barrier
# (as bench/workloads/progress.py does), then runs the fake driver's cycle that long.
{
    fake_program_env
    echo 'if [ -n "${MSCHED_BENCH_BARRIER:-}" ]; then'
    echo '    : >"$MSCHED_BENCH_BARRIER/ready.$$"'
    echo '    while [ ! -e "$MSCHED_BENCH_BARRIER/go" ]; do sleep 0.05; done'
    echo 'fi'
    echo "exec $STRESS \"\$3\" 1 timed"
} >"$T/wrap.sh"
chmod +x "$T/wrap.sh"

(cd "$ROOT" && PATH="$BUILD/bin:$PATH" MICRO="$T/wrap.sh" W=3 BUDGET_MIB=256 \
    bash bench/micro/run_sweep.sh "$T/out" "150" "ref whole opt" "$SECS" adaptive \
    >"$T/sweep.log" 2>&1) || fail "run_sweep.sh exited $?: $(tail -n 5 "$T/sweep.log")"
[ -s "$T/out/sweep.jsonl" ] || fail "no sweep.jsonl: $(tail -n 5 "$T/sweep.log")"
ls "$T"/out/raw-micro-150.tgz >/dev/null 2>&1 || fail "no raw archive"

python3 - "$T/out/sweep.jsonl" >"$T/check.txt" 2>&1 <<'PY' || fail "records: $(cat "$T/check.txt")"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
procs = [r for r in recs if "proc" in r]
wins = {r["system"]: r for r in recs if "proc" not in r}
bad = [r for r in procs if not r.get("tasks_per_s", 0) > 0]
assert len(procs) == 12, f"{len(procs)} process records, want 12"
assert not bad, f"processes without a rate: {bad}"
assert set(wins) == {"opt", "whole"}, f"windows: {sorted(wins)}"
opt, whole = wins["opt"], wins["whole"]
assert opt["slice"].startswith("adaptive:") and opt["slice"].endswith("ms"), opt["slice"]
assert whole["slice"] == opt["slice"].split(":")[1], (whole["slice"], opt["slice"])
d = opt["daemon"]
assert d["msched_switches_total"] > 0, d
assert d["msched_populated_bytes_total"] > 0 and d["msched_evicted_bytes_total"] > 0, d
print("ok", opt["slice"], int(d["msched_switches_total"]), "switches")
PY
pass "run_sweep.sh on the fake driver: 12 process rates, opt and whole windows, $(cat "$T/check.txt")"
# Every run released its four processes together at the barrier, none by the time limit.
n=$(grep -c "timed loops start after" "$T/sweep.log")
[ "$n" = 3 ] || fail "$n of 3 runs released at the start barrier: $(tail -n 5 "$T/sweep.log")"
grep -q "at the start barrier after" "$T/sweep.log" && fail "a run waited out the barrier's limit"
pass "the start barrier released every run's processes together"

python3 "$ROOT/bench/micro/summarize_sweep.py" "$T/out/sweep.jsonl" >"$T/table.md" 2>&1 ||
    fail "summarize_sweep.py: $(cat "$T/table.md")"
grep -q "^| 150 % | [0-9.]* | [0-9.]* |" "$T/table.md" || fail "no 150 % row: $(cat "$T/table.md")"
pass "summarize_sweep.py tabulates it"
