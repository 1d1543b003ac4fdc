#!/usr/bin/env bash
# daemon_early.sh - early start (docs/daemon.md, early_run) on the fake CUDA driver: the daemon
# sends RUN together with the POPULATE, so the incoming task is released before its working set
# is in, and each command must wait for its own chunks.
#
# Two engine_stress cycles (96 MiB each, 24 buffers of 4 MiB filled in turn) under a 120 MiB
# budget and 20 ms slices: every switch moves most of a task. Both name their DEMANDs' chunks
# in reverse order (MSCHED_REVERSE_DEMAND), so each population brings the chunk the waiting
# command needs last: a gate that admitted commands at RUN, or on the first progress of the
# population, would run fills on chunks still on the host, which the fake counts
# (host_mapped_launches), or on chunks mapped nowhere yet, which it kills. Both cycles must
# finish with every buffer right and no fill on a host chunk, and the daemon must have switched
# with RUN sent early (its switch record holds the drain and the plan, not the migration).
. "$(dirname "$0")/../daemon/lib.sh"

need_fake_cuda
[ -x "$MSCHEDD" ] || fail "no mschedd at $MSCHEDD"
ROUNDS=8 LIMIT=120
case "$BUILD" in *thread* | *address*) ROUNDS=3 LIMIT=300 ;; esac

start_daemon --budget 120MiB --slice 20ms --share off --set early_run=on
"$MSCHED" config get early_run 2>&1 | grep -Eq "(on|true|1)" ||
    fail "early_run is not on: $("$MSCHED" config get early_run 2>&1)"
for c in a b; do
    client "$c" MSCHED_REVERSE_DEMAND=1 -- "$ROUNDS" 3 cycle
done
for c in a b; do
    client_done "$c" "$LIMIT" "ENGINE_CYCLE rounds=$ROUNDS buffers=24 mismatches=0 host_mapped_launches=0"
done
read -r sw fc cc p50 fmean cmean <<<"$("$MSCHED" status --json | python3 -c '
import json, sys
j = json.load(sys.stdin)
fc, cc = j["switch_first_count"], j["switch_complete_count"]
print(j["switches"], fc, cc, j["run_first_p50_ns"],
      j["switch_first_ns_total"] // max(fc, 1), j["switch_complete_ns_total"] // max(cc, 1))')"
[ "$sw" -ge 4 ] || fail "only $sw switches: the budget did not make the cycles take turns"
# The switch split: most switches saw their first command and their working set complete.
[ "$fc" -ge $((sw / 2)) ] && [ "$cc" -ge $((sw / 2)) ] ||
    fail "switch split: $fc of $sw switches with a first command, $cc complete"
[ "$p50" -gt 0 ] || fail "no RUN-to-first-command median"
"$MSCHED" status | grep -q "until the first command ran: mean .*; until the working set was complete: mean .*; RUN to first command: median" ||
    fail "msched status shows no switch split: $("$MSCHED" status | head -n 6)"
for c in a b; do
    grep -Eq "RUN to first command [0-9.]+ ms mean, [0-9.]+ ms longest \([1-9][0-9]* RUNs\)" "$T/$c.out" ||
        fail "$c: no RUN-to-first-command summary: $(grep 'daemon:' "$T/$c.out")"
done
pass "two cycles in reverse population order under early RUN: $sw switches, every buffer right, no fill on a host chunk; first command after $((fmean / 1000)) us, set complete after $((cmean / 1000)) us on average, RUN to first command median $((p50 / 1000)) us"
check_log_clean
exit 0
