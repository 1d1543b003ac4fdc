#!/usr/bin/env bash
# daemon_templates.sh - kernel templates under mschedd (docs/templates.md), on the fake CUDA
# driver: engine_stress's arena (a 512 MiB allocation holding two 16 MiB buffers 256 MiB apart,
# ten adds) beside a cycling client, under a 200 MiB daemon budget. Named whole, every add runs
# with arena chunks on host chunks; with a template of the add kernel (a store text as `msched
# profile` writes it) the adds name the two chunks the buffers lie in and none runs on the host;
# the data is right both ways and the cycle finishes. The arena's first launch names every chunk
# never populated (mapped nowhere: never left out), more than the budget: it runs on what fits.
. "$(dirname "$0")/../daemon/lib.sh"

need_fake_cuda
[ -x "$MSCHEDD" ] || fail "no mschedd at $MSCHEDD"
ROUNDS=6 LIMIT=90
case "$BUILD" in *thread* | *address*) ROUNDS=2 LIMIT=240 ;; esac

printf '%s\n' "msched-templates 1" \
    "kernel mod=1 launches=3 opaque=0 unsafe=0 name=add" \
    "arg 0 form=fixed written=1 refused=0 launches=3 lo=0 hi=16777216 count=1 stride=0" \
    "arg 8 form=fixed written=0 refused=0 launches=3 lo=0 hi=16777216 count=1 stride=0" \
    "end" >"$T/templates"

start_daemon --budget 200MiB --slice 20ms --share off
for how in whole templates; do
    tm=off
    [ $how = templates ] && tm=$T/templates
    client "cyc_$how" -- "$ROUNDS" 3 cycle
    client "arena_$how" MSCHED_TEMPLATES="$tm" -- 10 1 arena
    wait_shim "arena_$how" 0 "$LIMIT"
    wait_shim "cyc_$how" 0 "$LIMIT"
    grep -q "daemon: connected, [1-9][0-9]* slices" "$T/arena_$how.out" ||
        fail "arena ($how) did not run under the daemon: $(grep msched "$T/arena_$how.out" | tail -n 3)"
    grep -q "ENGINE_CYCLE" "$T/cyc_$how.out" || fail "the cycle beside arena ($how): $(tail -n 3 "$T/cyc_$how.out")"
done
# whole: how many adds find a buffer on the host depends on what the daemon populated; some do
grep -Eq "ENGINE_ARENA rounds=10 host_mapped_adds=([1-9]|10) mismatches=0" "$T/arena_whole.out" ||
    fail "arena whole: $(grep -E 'ARENA|FAIL' "$T/arena_whole.out")"
grep -q "ENGINE_ARENA rounds=10 host_mapped_adds=0 mismatches=0" "$T/arena_templates.out" ||
    fail "arena with templates: $(grep -E 'ARENA|FAIL|misses' "$T/arena_templates.out")"
grep -Eq "templates: 1 kernels, 1[0-9] launches predicted with them" "$T/arena_templates.out" ||
    fail "arena with templates: no template used: $(grep msched "$T/arena_templates.out" | tail -n 4)"
pass "under the daemon beside a cycle: whole, $(grep -o 'host_mapped_adds=[0-9]*' "$T/arena_whole.out" | cut -d= -f2) adds on host chunks; with the add's template, none; the data right both ways"
check_log_clean
exit 0
