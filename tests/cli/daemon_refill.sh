#!/usr/bin/env bash
# daemon_refill.sh - a refill (core/sched.h): a running task whose demand only its own other
# chunks could make room for is stopped, and the switch that evicts them runs it again for
# the rest of its slice instead of handing the GPU to the next task. Two engine_stress onebuf
# programs that also allocate a fresh scratch buffer every round (STRESS_ONEBUF_SCRATCH: each
# needs 290 MiB) under one daemon of 150 MiB (adaptive policy, no per-task limit): both end
# with every result right, and the daemon counted refills (msched_refills_total), which are
# among its switches, and which `msched status` (text and --json) reports. On the fake CUDA
# driver.
. "$(dirname "$0")/../daemon/lib.sh"

need_fake_cuda
[ -x "$MSCHEDD" ] || fail "no mschedd at $MSCHEDD"
ROUNDS=1500 LIMIT=120
case "$BUILD" in *thread* | *address*) ROUNDS=300 LIMIT=300 ;; esac

start_daemon --budget 150MiB --policy adaptive
t0=$(date +%s%N)
for c in a b; do
    client "$c" STRESS_ONEBUF_SCRATCH=1 -- "$ROUNDS" 3 onebuf
done
for c in a b; do
    client_done "$c" "$LIMIT" "ENGINE_ONEBUF rounds=$ROUNDS mismatches=0"
done
ms=$((($(date +%s%N) - t0) / 1000000))
refills=$(metric msched_refills_total)
switches=$(metric msched_switches_total)
[ "${refills:-0}" -ge 1 ] ||
    fail "no refill: each demand beyond free memory handed the GPU on ($switches switches)"
[ "$refills" -le "$switches" ] || fail "$refills refills but only $switches switches"
# msched status says them too (protocol 7), as text and as JSON.
"$MSCHED" status > "$T/status.txt" 2>&1 || fail "msched status failed: $(cat "$T/status.txt")"
grep -q "switches: $switches ($refills refills" "$T/status.txt" ||
    fail "msched status does not say the $refills refills: $(grep switches: "$T/status.txt")"
"$MSCHED" status --json > "$T/status.json" 2>&1 || fail "msched status --json failed"
js=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["refills"])' "$T/status.json") ||
    fail "no refills in msched status --json"
[ "$js" = "$refills" ] || fail "msched status --json says $js refills, the metric $refills"
pass "two onebuf programs at half their footprint each: right, $switches switches ($refills refills) in $ms ms"
check_log_clean
exit 0
