#!/usr/bin/env bash
# tests/cli/rtbe_fake.sh - bench/workloads/run_rtbe.sh end to end on the fake CUDA driver, so
# the RT+BE harness is tested before it costs GPU time: the shim's engine_stress stands in for
# rtbe.py (RTBE_CMD; "serve": a request every INTERVAL_MS with latency percentiles, "timed": a
# best-effort cycle) under msched (priority + OPT), tslice (priority + demand paging) and ref,
# at a 64 MiB budget. Checks every record, and that under msched the service really leaves the
# GPU between requests (many switches) while the best-effort job makes progress.
. "$(dirname "$0")/../daemon/lib.sh"

need_fake_cuda

# rtbe.py's command line: rt PAD SECONDS INTERVAL | be PAD SECONDS
{
    fake_program_env
    cat <<EOF
case "\$1" in
rt) exec $STRESS "\$3" 1 serve "\$4" ;;
be) exec $STRESS "\$3" 1 timed ;;
esac
exit 2
EOF
} >"$T/standin.sh"
chmod +x "$T/standin.sh"

# The service must be idle between requests, or it never leaves the GPU. A request (two fills
# of 4 MiB on the fake driver) takes about 2 ms in a plain build, but 35 ms at the median under
# ThreadSanitizer, even with no msched: at 50 ms apart a slower machine saturates the service
# (one CI run saw 4 switches). Sanitizer builds get a request every 150 ms, for 8 s (53
# requests), so the threshold below holds with room to spare.
secs=4 interval=50
case "$BUILD" in *thread* | *address*) secs=8 interval=150 ;; esac
(cd "$ROOT" && PATH="$BUILD/bin:$PATH" RTBE_CMD="$T/standin.sh" BUDGET_MIB=64 BE_EXTRA=2 \
    bash bench/workloads/run_rtbe.sh "$T/out" "msched tslice ref" "$secs" 1 1 "$interval" \
    >"$T/rtbe.log" 2>&1) ||
    fail "run_rtbe.sh exited $?: $(tail -n 5 "$T/rtbe.log")"
[ -s "$T/out/rtbe.jsonl" ] || fail "no rtbe.jsonl: $(tail -n 5 "$T/rtbe.log")"

python3 - "$T/out/rtbe.jsonl" "$interval" >"$T/check.txt" 2>&1 <<'PY' || fail "records: $(cat "$T/check.txt")"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
procs = {(r["system"], r["role"]): r for r in recs if "role" in r}
wins = {r["system"]: r for r in recs if "role" not in r}
assert len(procs) == 6, sorted(procs)
for k, r in procs.items():
    assert "error" not in r, (k, r)
    assert r.get("tasks_per_s", 0) > 0, (k, r)
    if k[1] == "rt":
        assert 0 < r["p50_ms"] <= r["p99_ms"] <= r["max_ms"], (k, r)
        assert r["requests"] >= 40, (k, r)
        assert r["interval_ms"] == int(sys.argv[2]), (k, r)
assert set(wins) == {"msched", "tslice"}, sorted(wins)
sw = wins["msched"]["daemon"]["msched_switches_total"]
# The service goes idle between requests and the be job runs meanwhile (over 100 switches in
# 4 s in a plain build; 1-2 if the service held the GPU).
assert sw >= 8, f"msched made {sw} switches: the service did not leave the GPU between requests"
print(f"ok: msched P99 {procs[('msched', 'rt')]['p99_ms']} ms, {int(sw)} switches")
PY
pass "run_rtbe.sh on the fake driver: six records, $(cat "$T/check.txt")"
