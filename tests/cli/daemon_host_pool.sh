#!/usr/bin/env bash
# daemon_host_pool.sh - the pool of pinned host memory (docs/engine.md, MSCHED_HOST_POOL and
# MSCHED_HOST_POOL_IDLE_MS) on the fake CUDA driver: a freed allocation's host chunks stay
# pinned in the shim's pool for the next allocations, within MSCHED_HOST_POOL, and under the
# daemon what sat unused there for MSCHED_HOST_POOL_IDLE_MS is unpinned again, a chunk at a time.
#
# Two engine_stress programs (random allocations, frees, kernels, copies and memsets, checked
# against a host shadow) under a daemon budget far below their footprints, so their buffers are
# evicted to host chunks and freed from there (the daemon's prepare_host off: no chunk made
# ahead):
#   1. the default pool, chunks given back after 1 ms unused: host chunks were taken from the
#      pool and given back, every result right;
#   2. MSCHED_HOST_POOL=0: no host chunk was ever pooled, every result right.
. "$(dirname "$0")/../daemon/lib.sh"

need_fake_cuda
[ -x "$MSCHEDD" ] || fail "no mschedd at $MSCHEDD"
OPS=400 LIMIT=120
case "$BUILD" in *thread* | *address*) OPS=150 LIMIT=300 ;; esac

# pool NAME: "taken given_back left_mib" from NAME's summary (0 0 0 without the line).
pool() {
    local l
    l=$(sed -n 's/.*host memory pool: \([0-9]*\) host chunks taken from it .*, \([0-9]*\) given back after sitting unused ([0-9]* MiB), \([0-9]*\) MiB left in it$/\1 \2 \3/p' "$T/$1.out")
    echo "${l:-0 0 0}"
}

start_daemon --budget 48MiB --slice 50ms --share off
# PREPARE's host chunks go to the pool too, whatever its bound: off, every chunk taken from the
# pool below is one a freed allocation left there.
"$MSCHED" config set prepare_host off >/dev/null || fail "msched config set prepare_host off failed"
for c in p1 p2; do
    client "$c" MSCHED_HOST_POOL_IDLE_MS=1 -- "$OPS" 5
done
taken=0 back=0
for c in p1 p2; do
    wait_shim "$c" 0 "$LIMIT"
    grep -q "ENGINE_STRESS ops=$OPS .* mismatches=0" "$T/$c.out" ||
        fail "$c: $(grep -E 'ENGINE|FAIL|msched' "$T/$c.out" | tail -n 4)"
    read -r t b _ <<<"$(pool "$c")"
    taken=$((taken + t)) back=$((back + b))
done
[ "$taken" -ge 1 ] || fail "no host chunk was taken from the pool: $(grep -h 'pool\|engine (' "$T"/p?.out)"
[ "$back" -ge 1 ] || fail "no pooled host chunk was given back after 1 ms unused: $(grep -h 'pool' "$T"/p?.out)"
pass "pool: $taken host chunks taken from it, $back given back after sitting unused, every result right ($(grep -h 'engine (' "$T"/p?.out | sed 's/.*MiB resident, //' | tr '\n' ';'))"

for c in z1 z2; do
    client "$c" MSCHED_HOST_POOL=0 -- "$OPS" 5
done
for c in z1 z2; do
    wait_shim "$c" 0 "$LIMIT"
    grep -q "ENGINE_STRESS ops=$OPS .* mismatches=0" "$T/$c.out" ||
        fail "$c: $(grep -E 'ENGINE|FAIL|msched' "$T/$c.out" | tail -n 4)"
    read -r t b left <<<"$(pool "$c")"
    [ "$t" -eq 0 ] && [ "$b" -eq 0 ] && [ "$left" -eq 0 ] ||
        fail "$c: MSCHED_HOST_POOL=0 kept host chunks: $(grep 'pool' "$T/$c.out")"
done
pass "MSCHED_HOST_POOL=0: no host chunk kept, every result right"
check_log_clean
exit 0
