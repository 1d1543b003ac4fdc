#!/usr/bin/env bash
# tests/cli/sweep_fake.sh - bench/micro/run_sweep.sh end to end on the fake CUDA driver, so the
# benchmark harness that runs on the GPU machine is itself tested: four processes (the shim's
# engine_stress in its "timed" mode, through MICRO=) at 150 % of a 256 MiB budget (four cycles of 96 MiB), under `ref`
# (no msched), `opt` and `whole`, with SLICE=adaptive (opt picks the slice, whole uses it) and
# ADAPTIVE_OPTS, which the adaptive run alone gets and records.
# Checks the JSON lines (every process's rate, the daemon windows, the slice labels), that the
# daemon moved memory under opt, and that summarize_sweep.py makes its table from them. Then a
# run whose two "matmul" processes hang after the barrier: the harness kills them LOOP_GRACE
# seconds after the loops should have ended, keeps the diagnostics, and records them as killed.
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
    echo '[ -n "${SWEEP_HANG:-}" ] && [ "$1" = matmul ] && exec sleep 1000'
    echo "exec $STRESS \"\$3\" 1 timed"
} >"$T/wrap.sh"
chmod +x "$T/wrap.sh"

(cd "$ROOT" && PATH="$BUILD/bin:$PATH" MICRO="$T/wrap.sh" W=3 BUDGET_MIB=256 \
    ADAPTIVE_OPTS="--set switch_frac=5" \
    bash bench/micro/run_sweep.sh "$T/out" "150" "ref whole opt" "$SECS" adaptive \
    >"$T/sweep.log" 2>&1) || fail "run_sweep.sh exited $?: $(tail -n 5 "$T/sweep.log")"
[ -s "$T/out/sweep.jsonl" ] || fail "no sweep.jsonl: $(tail -n 5 "$T/sweep.log")"
ls "$T"/out/raw-micro-150.tgz >/dev/null 2>&1 || fail "no raw archive"

python3 - "$T/out/sweep.jsonl" "$ROOT/bench/micro" >"$T/check.txt" 2>&1 <<'PY' || fail "records: $(cat "$T/check.txt")"
import json, sys
sys.path.insert(0, sys.argv[2])
import summarize_sweep as ss
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
assert opt.get("adaptive_opts") == "--set switch_frac=5", opt
assert "adaptive_opts" not in whole, whole
located = ss.read_located([sys.argv[1]])
ss.slice_sets(located)
rows = ss.compute_rows([r for _, _, r in located])
assert rows[0]["slice_label"].endswith(" s (--set switch_frac=5)"), rows[0]["slice_label"]
d = opt["daemon"]
assert d["msched_switches_total"] > 0, d
assert d["msched_populated_bytes_total"] > 0 and d["msched_evicted_bytes_total"] > 0, d
print("ok", opt["slice"], int(d["msched_switches_total"]), "switches")
PY
pass "run_sweep.sh on the fake driver: 12 process rates, opt and whole windows, $(cat "$T/check.txt")"
mkdir -p "$T/rawx" && tar -xzf "$T/out/raw-micro-150.tgz" -C "$T/rawx" || fail "cannot read the raw archive"
grep -q "policy adaptive (a switch at most 5 % of the slice" "$T"/rawx/*_opt/mschedd.log ||
    fail "the adaptive run's daemon did not get ADAPTIVE_OPTS: $(grep -h serving "$T"/rawx/*/mschedd.log)"
grep -q "policy rr," "$T"/rawx/*_whole/mschedd.log || fail "the whole run's daemon is not round-robin"
pass "ADAPTIVE_OPTS reaches the adaptive run's daemon only, and its record and table row"
# Every run released its four processes together at the barrier, none by the time limit.
n=$(grep -c "timed loops start after" "$T/sweep.log")
[ "$n" = 3 ] || fail "$n of 3 runs released at the start barrier: $(tail -n 5 "$T/sweep.log")"
grep -q "at the start barrier after" "$T/sweep.log" && fail "a run waited out the barrier's limit"
pass "the start barrier released every run's processes together"

python3 "$ROOT/bench/micro/summarize_sweep.py" "$T/out/sweep.jsonl" >"$T/table.md" 2>&1 ||
    fail "summarize_sweep.py: $(cat "$T/table.md")"
grep -q "^| 150 % | [0-9.]* | [0-9.]* |" "$T/table.md" || fail "no 150 % row: $(cat "$T/table.md")"
pass "summarize_sweep.py tabulates it"

# A run with two processes that never finish: bounded, diagnosed, recorded, not a hung part.
(cd "$ROOT" && PATH="$BUILD/bin:$PATH" MICRO="$T/wrap.sh" W=3 BUDGET_MIB=256 SWEEP_HANG=1 \
    LOOP_GRACE=3 timeout 120 bash bench/micro/run_sweep.sh "$T/hang" "150" "opt" 12 \
    >"$T/hang.log" 2>&1) || fail "run_sweep.sh with hung processes exited $?: $(tail -n 5 "$T/hang.log")"
grep -q "2 process(es) still running 3 s after the loops should have ended: killed" "$T/hang.log" ||
    fail "no kill reported: $(tail -n 5 "$T/hang.log")"
python3 - "$T/hang/sweep.jsonl" >"$T/hcheck.txt" 2>&1 <<'PY' || fail "hung records: $(cat "$T/hcheck.txt")"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
p = {r["proc"]: r for r in recs if "proc" in r}
assert sorted(p) == [0, 1, 2, 3], p
for i in (2, 3):
    assert p[i].get("error", "").startswith("killed: still running 3 s"), p[i]
for i in (0, 1):
    assert "error" not in p[i] and p[i]["tasks_per_s"] > 0, p[i]
assert any("window_s" in r for r in recs), "no daemon window record"
PY
mkdir -p "$T/hraw"
tar -C "$T/hraw" -xzf "$T"/hang/raw-micro-150.tgz || fail "no raw archive for the hung run"
grep -q "sleep 1000" "$T/hraw/p150_opt/hung_ps.txt" || fail "hung_ps.txt lacks the hung processes"
grep -qi "task" "$T/hraw/p150_opt/hung_status.txt" || fail "no daemon status: $(head -3 "$T/hraw/p150_opt/hung_status.txt")"
pass "hung processes are killed after the grace, with the process tree and daemon status kept"

# WORKLOAD=L: three processes, and `alloc` (opt's daemon, the processes at allocation
# granularity): the store MSCHED_TEMPLATES names reaches opt's processes, not alloc's.
printf '%s\n' "msched-templates 1" "kernel mod=1 launches=1 opaque=0 unsafe=0 name=sweep_probe" \
    "end" >"$T/sweep.store"
(cd "$ROOT" && PATH="$BUILD/bin:$PATH" MICRO="$T/wrap.sh" W=3 BUDGET_MIB=256 WORKLOAD=L \
    MSCHED_TEMPLATES="$T/sweep.store" \
    bash bench/micro/run_sweep.sh "$T/L" "150" "ref opt alloc" "$SECS" \
    >"$T/L.log" 2>&1) || fail "run_sweep.sh WORKLOAD=L exited $?: $(tail -n 5 "$T/L.log")"
python3 - "$T/L/sweep.jsonl" >"$T/Lcheck.txt" 2>&1 <<'PY' || fail "L records: $(cat "$T/Lcheck.txt")"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
procs = [r for r in recs if "proc" in r]
assert sorted((r["system"], r["proc"]) for r in procs) == [
    (s, i) for s in ("alloc", "opt", "ref") for i in range(3)], procs
assert all(r.get("workload") == "L" and r.get("tasks_per_s", 0) > 0 for r in procs), procs
assert {r["system"] for r in recs if "proc" not in r} == {"opt", "alloc"}, recs
# 150 % of 256 MiB over three processes
assert all(abs(r["gib_each"] - 0.125) < 1e-9 for r in procs), procs[0]
PY
mkdir -p "$T/Lraw" && tar -C "$T/Lraw" -xzf "$T/L/raw-L-150.tgz" || fail "no raw archive for L"
for i in 0 1 2; do
    grep -q "templates: 1 kernels from $T/sweep.store" "$T/Lraw/L_p150_opt/proc_$i.json" ||
        fail "opt process $i did not load the store: $(grep -h templates "$T/Lraw/L_p150_opt/proc_$i.json")"
    grep -q "templates:" "$T/Lraw/L_p150_alloc/proc_$i.json" &&
        fail "alloc process $i loaded templates: $(grep -h templates "$T/Lraw/L_p150_alloc/proc_$i.json")"
done
python3 "$ROOT/bench/micro/summarize_sweep.py" --workload L "$T/L/sweep.jsonl" >"$T/Ltable.md" 2>&1 ||
    fail "summarize_sweep.py --workload L: $(cat "$T/Ltable.md")"
grep -q "GiB per switch: opt / alloc |$" "$T/Ltable.md" || fail "no alloc column: $(head -1 "$T/Ltable.md")"
grep -Eq "^\| 150 % \|( [0-9.]+ \|){2}.*\| [0-9.]+ / [0-9.]+ \|$" "$T/Ltable.md" ||
    fail "no 150 % row with both systems' bytes per switch: $(cat "$T/Ltable.md")"
pass "WORKLOAD=L: three processes; alloc runs at allocation granularity, opt with the store; tabulated"

# bench/templates/same_requests.py: request-by-request comparison against ref.
{
    echo '{"workload": "L", "pressure": 200, "system": "ref", "proc": 0, "request_digests": ["a", "b", "c"]}'
    echo '{"workload": "L", "pressure": 200, "system": "ref", "proc": 1, "request_digests": ["d", "e"]}'
    echo '{"workload": "L", "pressure": 200, "system": "opt", "proc": 0, "request_digests": ["a", "b"]}'
    echo '{"workload": "L", "pressure": 200, "system": "opt", "proc": 1, "request_digests": ["d", "e", "f"]}'
} >"$T/same.jsonl"
out=$(python3 "$ROOT/bench/templates/same_requests.py" "$T/same.jsonl") ||
    fail "same_requests.py on equal runs: $out"
[ "$out" = "SAME L 200 opt proc 0: 2 requests
SAME L 200 opt proc 1: 2 requests" ] || fail "same_requests.py: $out"
echo '{"workload": "L", "pressure": 200, "system": "alloc", "proc": 0, "request_digests": ["a", "x"]}' >>"$T/same.jsonl"
echo '{"workload": "L", "pressure": 200, "system": "alloc", "proc": 1, "error": "killed"}' >>"$T/same.jsonl"
out=$(python3 "$ROOT/bench/templates/same_requests.py" "$T/same.jsonl")
rc=$?
[ "$rc" = 1 ] || fail "same_requests.py with a difference exited $rc"
grep -q "^DIFF L 200 alloc proc 0: request 2 x against b$" <<<"$out" || fail "no DIFF line: $out"
grep -q "^NONE L 200 alloc proc 1: killed$" <<<"$out" || fail "no NONE line: $out"
echo 'not json' >"$T/bad.jsonl"
python3 "$ROOT/bench/templates/same_requests.py" "$T/bad.jsonl" >/dev/null 2>&1
[ $? = 2 ] || fail "same_requests.py on a malformed line does not exit 2"
pass "same_requests.py: SAME over common requests, DIFF names the request, NONE a missing run"
