#!/usr/bin/env bash
# tests/run.sh - runs the whole CPU test suite (called by `make test`; BUILD names the build dir).
#
# Each check runs in its own process with a time limit; its output is kept in $BUILD/test-logs/
# and shown when it fails. Groups: unit test binaries (cmocka), fuzz corpus replays, CLI checks
# (tests/cli/*.sh), shim checks on the fake driver (tests/shim/run_shim_tests.sh). The last line
# is the summary "N passed, N failed"; the exit status is non-zero when anything failed.
set -u
BUILD=${BUILD:-build}
LOGS=$BUILD/test-logs
mkdir -p "$LOGS"
export MS_SEED=${MS_SEED:-$(date +%s)}
export MSCHED="$PWD/$BUILD/bin/msched"
export BUILD
# A private cache directory: no check reads or writes the user's template store (the default
# of `msched profile` and of libmsched's MSCHED_TEMPLATES).
export XDG_CACHE_HOME="$PWD/$BUILD/test-cache"
rm -rf "$XDG_CACHE_HOME"
unset MSCHED_TEMPLATES
pass=0
fail=0
failed=()

# check NAME COMMAND...: one check, at most CHECK_LIMIT seconds (600 unless the caller sets it).
check() {
    local name=$1
    shift
    local log="$LOGS/$name.log"
    mkdir -p "$(dirname "$log")"
    local t0=$SECONDS
    if timeout "${CHECK_LIMIT:-600}" "$@" >"$log" 2>&1; then
        pass=$((pass + 1))
        printf 'PASS  %-40s %3ss\n' "$name" $((SECONDS - t0))
    else
        local rc=$?
        fail=$((fail + 1))
        failed+=("$name")
        printf 'FAIL  %-40s (exit %s, log %s)\n' "$name" "$rc" "$log"
        # A group check (shim/all) says which of its own checks failed first: CI shows only
        # this output, and the failing line may be far above the log's tail.
        grep -E '^FAIL' "$log" | head -n 10 | sed 's/^/      ! /'
        tail -n 30 "$log" | sed 's/^/      | /'
    fi
}

echo "msched tests (build: $BUILD, MS_SEED=$MS_SEED)"
for t in "$BUILD"/tests/test_*; do
    [ -x "$t" ] || continue
    check "unit/$(basename "$t")" "$t"
done
for r in "$BUILD"/fuzz/replay_fuzz_*; do
    [ -x "$r" ] || continue
    target=${r##*/replay_fuzz_}
    check "fuzz-corpus/$target" "$r" "tests/fuzz/corpus/$target"
done
for s in tests/cli/*.sh; do
    [ -f "$s" ] || continue
    check "cli/$(basename "$s" .sh)" bash "$s"
done
if [ -f tests/shim/run_shim_tests.sh ]; then
    # 98 checks: about 1-2 minutes plain or under ASan, over 10 under TSan on a 2-core machine
    CHECK_LIMIT=1800 check "shim/all" bash tests/shim/run_shim_tests.sh
fi
if [ -d "$BUILD/pic/shim" ]; then
    check "shim/layers" python3 scripts/check_layers.py --objdir "$BUILD/pic/shim"
fi

echo
if [ "$fail" -ne 0 ]; then
    echo "failed: ${failed[*]}"
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
