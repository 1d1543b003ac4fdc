#!/usr/bin/env bash
# daemon_defer_map.sh - deferred host maps (docs/engine.md, MSCHED_DEFER_HOST_MAP) on the fake
# CUDA driver: an eviction the daemon orders while a task is stopped leaves each chunk's address
# mapped to nothing ("bare"), and the shim maps its host chunk there afterwards, between the
# daemon's messages, or just before the next command is admitted; a chunk populated back first
# is never host-mapped. Any command that touched a bare chunk would fault on the fake driver
# (its unmapped addresses are PROT_NONE): the program would die.
#
#   1. MSCHED_DEFER_HOST_MAP=2 (the gate alone maps them): two onebuf programs, each limited to
#      150 MiB under a 200 MiB budget, so their commands reach chunks that stay on the host
#      (misses) after every switch; the second launches through the legacy API (cuParamSetv,
#      cuLaunchGridAsync: STRESS_LEGACY_LAUNCH=1), whose parameters the shim never sees. Both
#      finish with every result right, and chunks were mapped just before a command. (Without
#      the gate's mapping the first miss after a switch faults: exit 139; so does the legacy
#      program when its launches are not gated.)
#   2. The default: two cycles under 120 MiB and 20 ms slices; chunks are mapped after their
#      eviction, every buffer right, no fill on a host chunk.
#   3. MSCHED_DEFER_HOST_MAP=0: nothing is left bare.
. "$(dirname "$0")/../daemon/lib.sh"

need_fake_cuda
[ -x "$MSCHEDD" ] || fail "no mschedd at $MSCHEDD"
ROUNDS=40 CYCLES=8 LIMIT=120
case "$BUILD" in *thread* | *address*) ROUNDS=10 CYCLES=3 LIMIT=300 ;; esac

# deferred NAME: "left mapped_after before_command" from NAME's summary (0 0 0 without it).
deferred() {
    local l
    l=$(sed -n 's/.*deferred host maps: \([0-9]*\) evicted chunks left unmapped, \([0-9]*\) mapped after their eviction, \([0-9]*\) just before a command .*/\1 \2 \3/p' "$T/$1.out")
    echo "${l:-0 0 0}"
}

start_daemon --budget 200MiB --slice 20ms --share off
client g1 MSCHED_BUDGET=150MiB MSCHED_DEFER_HOST_MAP=2 -- "$ROUNDS" 3 onebuf
client g2 MSCHED_BUDGET=150MiB MSCHED_DEFER_HOST_MAP=2 STRESS_LEGACY_LAUNCH=1 -- "$ROUNDS" 3 onebuf
gate=0
for c in g1 g2; do
    wait_shim "$c" 0 "$LIMIT"
    grep -q "ENGINE_ONEBUF rounds=$ROUNDS mismatches=0" "$T/$c.out" ||
        fail "$c: $(grep -E 'ONEBUF|FAIL|msched' "$T/$c.out" | tail -n 4)"
    grep -Eq "misses: [1-9][0-9]* commands ran with" "$T/$c.out" ||
        fail "$c ran no command with chunks on the host: $(grep 'misses:' "$T/$c.out")"
    read -r left after before <<<"$(deferred "$c")"
    [ "$after" -eq 0 ] || fail "$c: MSCHED_DEFER_HOST_MAP=2 mapped $after chunks after their eviction"
    gate=$((gate + before))
done
[ "$gate" -ge 1 ] ||
    fail "no bare chunk was mapped before a command: $(grep -h 'deferred\|daemon:' "$T"/g?.out)"
pass "gate only: two programs with misses after every switch, every result right; $gate bare chunks mapped just before a command"

"$MSCHED" config set budget 120MiB >/dev/null || fail "msched config set budget 120MiB failed"
for c in d1 d2; do
    client "$c" -- "$CYCLES" 3 cycle
done
tl=0 ta=0
for c in d1 d2; do
    wait_shim "$c" 0 "$LIMIT"
    grep -q "ENGINE_CYCLE rounds=$CYCLES buffers=24 mismatches=0 host_mapped_launches=0" "$T/$c.out" ||
        fail "$c: $(grep -E 'ENGINE|FAIL|msched' "$T/$c.out" | tail -n 4)"
    read -r left after before <<<"$(deferred "$c")"
    tl=$((tl + left)) ta=$((ta + after))
done
[ "$tl" -ge 1 ] && [ "$ta" -ge 1 ] ||
    fail "the default left $tl chunks bare and mapped $ta after their eviction: $(grep -h 'deferred' "$T"/d?.out)"
pass "default: $tl evicted chunks left unmapped, $ta mapped after their eviction, every buffer right, no fill on a host chunk"

for c in o1 o2; do
    client "$c" MSCHED_DEFER_HOST_MAP=0 -- "$CYCLES" 3 cycle
done
for c in o1 o2; do
    wait_shim "$c" 0 "$LIMIT"
    grep -q "ENGINE_CYCLE rounds=$CYCLES buffers=24 mismatches=0 host_mapped_launches=0" "$T/$c.out" ||
        fail "$c: $(grep -E 'ENGINE|FAIL|msched' "$T/$c.out" | tail -n 4)"
    ! grep -q "deferred host maps" "$T/$c.out" ||
        fail "$c: MSCHED_DEFER_HOST_MAP=0 left chunks bare: $(grep deferred "$T/$c.out")"
done
pass "MSCHED_DEFER_HOST_MAP=0: every eviction maps its host chunks within itself"
check_log_clean
exit 0
