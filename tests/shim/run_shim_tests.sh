#!/usr/bin/env bash
# tests/shim/run_shim_tests.sh - libmsched's checks, on the fake CUDA driver (no GPU needed).
#
# Called by tests/run.sh (make test) with BUILD set; prints one "PASS name" or "FAIL name (why)"
# line per check and exits non-zero when any failed.
# Run alone: BUILD=build tests/shim/run_shim_tests.sh
#
# What is checked
#   generated code   shim/gen/ equals what scripts/gen_shim.py makes from the toolkit now
#                    (make check-gen-shim)
#   exports          both libmsched builds export every symbol of the toolkit's stub libcuda,
#                    and nothing but cu*, ms_shim_marker and (preload build only) dlsym
#   one workload     (tests/shim/workload.c) run through every way of reaching the driver:
#                    linked (legacy and per-thread names), dlsym, cuGetProcAddress_v2 with the
#                    legacy and the per-thread flag; in three setups:
#                      direct    the fake driver alone
#                      shim      libmsched first on LD_LIBRARY_PATH (MSCHED_REAL_LIBCUDA set, unset,
#                                or pointing at libmsched itself)
#                      preload   LD_PRELOAD=libmsched.so with a program that only dlopens
#                    Every run must print the same RESULT hash; the fake's own counters must
#                    match the workload's expectations; under libmsched its MSCHED_VERBOSE
#                    summary and its MSCHED_TRACE trace (read back with the core's reader) must
#                    match them too, including the packed parameter bytes of chosen launches
#   gpa-check        cuGetProcAddress_v2 returns the function of the requested ABI and flavour
#   trampolines      a forwarded function called first (slow path) keeps float and stack args
#   oracle           memory that is not resident faults (the fake driver's guarantee)
#   fake/host-handles  the fake's host-located VMM handles (tests/shim/fake_host.c, cmocka)
#   robustness       quiet without MSCHED_VERBOSE; %p in MSCHED_TRACE; no driver -> NO_DEVICE
set -u
cd "$(dirname "$0")/../.." || exit 1
ROOT=$PWD
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
STUB=$CUDA_HOME/lib64/stubs/libcuda.so
SHIMDIR=$BUILD/lib/msched
FAKEDIR=$BUILD/lib/fakecuda
FAKE=$FAKEDIR/libcuda.so.1
T=$BUILD/tests/shim
export MS_FAKECUDA=$FAKE
unset MSCHED_VERBOSE MSCHED_TRACE MSCHED_REAL_LIBCUDA LD_PRELOAD MSCHED_BUDGET
# A daemon the user runs must not join these checks (tests/cli/shim_daemon.sh tests the client),
# nor a template store of the user's change their predictions (the templates' check sets its own).
export MSCHED_DAEMON=off MSCHED_TEMPLATES=off

if [ ! -f "$CUDA_HOME/include/cuda.h" ]; then
    echo "SKIP shim: no CUDA toolkit headers in $CUDA_HOME (libmsched is not built)"
    exit 0
fi
for f in "$SHIMDIR/libcuda.so.1" "$SHIMDIR/libmsched.so" "$FAKE" "$T/cuda_test_linked" \
    "$T/cuda_test_dl" "$T/trace_check" "$T/fake_host"; do
    if [ ! -e "$f" ]; then
        echo "FAIL build ($f is missing: run make test)"
        exit 1
    fi
done

WORK=$(mktemp -d)
mkdir -p "$WORK/direct" "$WORK/shim" "$WORK/preload"
trap 'rm -rf "$WORK"' EXIT
failures=0
pass() { echo "PASS $1"; }
fail() {
    echo "FAIL $1${2:+ ($2)}"
    failures=$((failures + 1))
}

# Sanitizer builds: a preloaded library must come after the sanitizer runtime.
ASANLIB=$(ldd "$T/cuda_test_dl" 2>/dev/null | awk '/libasan|libtsan/ { print $3; exit }')
PRELOAD="${ASANLIB:+$ASANLIB }$SHIMDIR/libmsched.so"

# value KEY TEXT: the number after "KEY=" in TEXT (empty when absent)
value() { grep -o "\b$1=[0-9]*" <<<"$2" | head -n 1 | cut -d= -f2; }

# same_keys WHAT EXPECTED ACTUAL KEY...: every KEY has the same value in both lines
same_keys() {
    local what=$1 exp=$2 act=$3 k bad=""
    shift 3
    for k in "$@"; do
        local e a
        e=$(value "$k" "$exp")
        a=$(value "$k" "$act")
        if [ -z "$e" ] || [ "$e" != "$a" ]; then
            bad="$bad $k=${a:-none}(want ${e:-none})"
        fi
    done
    if [ -n "$bad" ]; then
        echo "    $what:$bad"
        return 1
    fi
}

# run NAME BINARY MODE [VAR=value...]: run a test program, output in $WORK/NAME.{out,err}
run() {
    local name=$1 bin=$2 mode=$3
    shift 3
    env "$@" "$T/$bin" "$mode" >"$WORK/$name.out" 2>"$WORK/$name.err"
}

show() {
    sed 's/^/    | /' "$WORK/$1.out" "$WORK/$1.err" | grep -v EXPECT_KERNEL | tail -n 15
}

REF=""
# workload NAME BINARY MODE SETUP [VAR=value...]; SETUP is direct, shim or preload
workload() {
    local name=$1 bin=$2 mode=$3 setup=$4
    shift 4
    local extra=()
    if [ "$setup" != direct ]; then
        extra=(MSCHED_VERBOSE=1 "MSCHED_TRACE=$WORK/$name.trace")
    fi
    if ! run "$name" "$bin" "$mode" "$@" "${extra[@]}" ||
        ! grep -q "^OK $mode\$" "$WORK/$name.out"; then
        fail "$name" "exit status or no OK line"
        show "$name"
        return
    fi
    local out result ok=1
    out=$(cat "$WORK/$name.out")
    result=$(grep '^RESULT ' <<<"$out")
    if [ -z "$REF" ]; then
        REF=$result
    elif [ "$result" != "$REF" ]; then
        echo "    $result differs from the reference $REF"
        ok=0
    fi
    same_keys "fake driver's own counts" "$(grep '^EXPECT fake' <<<"$out")" \
        "$(grep '^FAKE fake' <<<"$out")" launches allocs frees copies memsets || ok=0
    if [ "$setup" != direct ]; then
        local summary
        summary=$(grep 'summary ' "$WORK/$name.err")
        same_keys "libmsched summary" "$(grep '^EXPECT shim' <<<"$out")" "$summary" \
            launches allocs frees copies memsets unknown_layout syncs live_bytes host_allocs \
            host_live_bytes || ok=0
        if [ "$(value trace_dropped "$summary")" != 0 ]; then
            echo "    the trace dropped records: $summary"
            ok=0
        fi
        case $mode in
        gpa*) [ "$(value procaddr_hooked "$summary")" -gt 0 ] 2>/dev/null ||
            { echo "    cuGetProcAddress handed out no hook"; ok=0; } ;;
        esac
        if [ "$setup" = preload ] && [ "$bin" = cuda_test_dl ] && [ "${mode#dlsym}" != "$mode" ]
        then
            [ "$(value dlsym_hooked "$summary")" -gt 0 ] 2>/dev/null ||
                { echo "    dlsym on the driver's handle returned no hook"; ok=0; }
        fi
        if "$T/trace_check" "$WORK/$name.trace" >"$WORK/$name.tc" 2>&1; then
            local count
            count=$(grep '^COUNT ' "$WORK/$name.tc")
            same_keys "trace records" "$(grep '^EXPECT trace' <<<"$out") header=1 task=1 live=0" \
                "$count" kernel alloc free copy memset sync header task live || ok=0
            while read -r _ k rest; do
                if ! grep -qxF "KERNEL $k $rest" "$WORK/$name.tc"; then
                    echo "    no trace record 'kernel $k $rest'"
                    ok=0
                fi
            done < <(grep '^EXPECT_KERNEL ' <<<"$out")
            # Kernel durations are measured (events around each launch): every kernel that ran
            # on a stream not being captured has one above zero.
            local timed
            timed=$(awk '$1 == "kernel" && $4 > 0' "$WORK/$name.trace" | wc -l)
            if [ "$timed" -eq 0 ]; then
                echo "    no kernel record has a measured duration"
                ok=0
            fi
        else
            echo "    the core's reader refused the trace: $(head -n 1 "$WORK/$name.tc")"
            ok=0
        fi
    fi
    if [ $ok = 1 ]; then
        pass "$name"
    else
        fail "$name" "see above"
    fi
}

# simple NAME BINARY MODE [VAR=value...]: the program's own checks must pass
simple() {
    local name=$1
    if run "$@" && grep -q "^OK $3\$" "$WORK/$name.out"; then
        pass "$name"
    else
        fail "$name"
        show "$name"
    fi
}

# ---- generated code and exports --------------------------------------------------------------
if make --no-print-directory -s check-gen-shim CUDA_HOME="$CUDA_HOME" >"$WORK/gen.log" 2>&1; then
    pass gen/no-drift
else
    fail gen/no-drift "make check-gen-shim: shim/gen differs from what the toolkit generates"
    head -n 20 "$WORK/gen.log" | sed 's/^/    | /'
fi

nm -D --defined-only "$STUB" | awk '{ print $3 }' | sort >"$WORK/stub.syms"
for lib in libcuda.so.1 libmsched.so; do
    nm -D --defined-only "$SHIMDIR/$lib" | awk '$2 == "T" { print $3 }' | sort >"$WORK/$lib.syms"
    missing=$(comm -23 "$WORK/stub.syms" "$WORK/$lib.syms" | head -n 5 | tr '\n' ' ')
    if [ -s "$WORK/stub.syms" ] && [ -z "$missing" ]; then
        pass "exports/$lib-covers-stub ($(wc -l <"$WORK/stub.syms") symbols)"
    else
        fail "exports/$lib-covers-stub" "missing: ${missing:-the stub exports nothing}"
    fi
    want_dlsym=0
    [ $lib = libmsched.so ] && want_dlsym=1
    extra=$(nm -D --defined-only "$SHIMDIR/$lib" | awk '{ print $3 }' |
        grep -v -e '^cu' -e '^ms_shim_marker$' -e '^ms_shim_counter$' -e '^ms_shim_test_alloc_fail_after$' -e '^dlsym$' | head -n 5 | tr '\n' ' ')
    has_dlsym=$(nm -D --defined-only "$SHIMDIR/$lib" | awk '$3 == "dlsym"' | wc -l)
    if [ -z "$extra" ] && [ "$has_dlsym" = $want_dlsym ]; then
        pass "exports/$lib-nothing-else"
    else
        fail "exports/$lib-nothing-else" "extra: '$extra', dlsym exported: $has_dlsym"
    fi
done

# ---- the workload, every way, every setup ----------------------------------------------------
DIRECT=(LD_LIBRARY_PATH="$FAKEDIR")
SHIM=(LD_LIBRARY_PATH="$SHIMDIR:$FAKEDIR" MSCHED_REAL_LIBCUDA="$FAKE")
PRE=(LD_PRELOAD="$PRELOAD" LD_LIBRARY_PATH="$FAKEDIR")

for m in link link-pt dlsym dlsym-pt gpa gpa-pt; do
    workload "direct/$m" cuda_test_linked $m direct "${DIRECT[@]}"
done
for m in link link-pt dlsym dlsym-pt gpa gpa-pt; do
    workload "shim/$m" cuda_test_linked $m shim "${SHIM[@]}"
done
workload shim/dl-gpa-pt cuda_test_dl gpa-pt shim "${SHIM[@]}"
# found through LD_LIBRARY_PATH, skipping libmsched's own directory
workload shim/search-path cuda_test_linked gpa shim LD_LIBRARY_PATH="$SHIMDIR:$FAKEDIR"
if ! grep -q "real driver: $FAKEDIR/libcuda.so.1" "$WORK/shim/search-path.err"; then
    fail shim/search-path-found-fake "$(grep 'real driver' "$WORK/shim/search-path.err")"
fi
# MSCHED_REAL_LIBCUDA pointing at libmsched itself, or at its other build: both refused
workload shim/not-itself cuda_test_linked link shim LD_LIBRARY_PATH="$SHIMDIR:$FAKEDIR" \
    MSCHED_REAL_LIBCUDA="$SHIMDIR/libcuda.so.1"
workload shim/not-other-shim cuda_test_linked dlsym shim LD_LIBRARY_PATH="$SHIMDIR:$FAKEDIR" \
    MSCHED_REAL_LIBCUDA="$SHIMDIR/libmsched.so"
for m in dlsym dlsym-pt gpa gpa-pt; do
    workload "preload/$m" cuda_test_dl $m preload "${PRE[@]}"
done
workload preload/linked cuda_test_linked link preload "${PRE[@]}"

# ---- entry points and the oracle -------------------------------------------------------------
simple direct/gpa-check cuda_test_linked gpa-check "${DIRECT[@]}"
simple shim/gpa-check cuda_test_linked gpa-check "${SHIM[@]}"
simple preload/gpa-check cuda_test_dl gpa-check "${PRE[@]}"
for m in tramp-float tramp-stack; do
    simple "direct/$m" cuda_test_dl $m "${DIRECT[@]}"
    simple "shim/$m" cuda_test_dl $m "${SHIM[@]}"
    simple "preload/$m" cuda_test_dl $m "${PRE[@]}"
done
simple direct/oracle cuda_test_linked oracle "${DIRECT[@]}"
simple shim/oracle cuda_test_linked oracle "${SHIM[@]}"
# Host-located VMM handles on the fake driver alone: counted apart from device memory, mapped
# and copied like device handles, MEMORY_TYPE host, launches reaching them counted, unmapped
# memory still faulting, released-while-mapped handles alive until their last unmap.
if env LD_LIBRARY_PATH="$FAKEDIR" timeout 60 "$T/fake_host" >"$WORK/fake_host.out" 2>&1; then
    pass "fake/host-handles ($(grep -c '^\[       OK \]' "$WORK/fake_host.out") cmocka tests)"
else
    fail fake/host-handles
    grep -E '^\[  (FAILED|ERROR)|rror|fail' "$WORK/fake_host.out" | head -n 10 | sed 's/^/    | /'
fi
# An allocation whose host chunks take 3 s to pin (it does not fit the 64 MiB budget) must not
# hold up another thread's command.
simple shim/pin-lock cuda_test_dl pin-lock "${SHIM[@]}" MSCHED_BUDGET=64MiB MSCHED_FAKE_PIN_MS=1500
# A migration beside another thread's pinning (the fake's copies wait for a pin in flight, as
# the driver's do) waits for at most the piece in flight: the migration gate.
simple shim/pin-gate cuda_test_dl pin-gate "${SHIM[@]}" MSCHED_BUDGET=192MiB \
    MSCHED_FAKE_PIN_MS=200 MSCHED_VERBOSE=1
# An allocation that does not fit starts on host chunks, one 64 MiB pin call each: the program
# checks the fake's host handles and its data; each takes 100 ms to pin, so the 320 MiB
# allocation's five are a slow pin, logged with the wall-clock time it started, and the exit
# summary counts them with the 128 MiB buffer's, made when it was first evicted.
simple shim/pin-pieces cuda_test_dl pin-pieces "${SHIM[@]}" MSCHED_BUDGET=256MiB \
    MSCHED_FAKE_PIN_MS=100 MSCHED_VERBOSE=1 MSCHED_HOST_POOL=0
if grep -q "slow pin: [0-9.]* ms for 0.31 GiB of host chunks (a new allocation's, 5 pin calls), started 20[0-9-]*T[0-9:.]*" \
    "$WORK/shim/pin-pieces.err" &&
    grep -q "6 host chunks made (448 MiB), 1 allocations started on the host ([0-9.]* s making their host chunks)" \
        "$WORK/shim/pin-pieces.err"; then
    pass "shim/pin-pieces-log"
else
    fail "shim/pin-pieces-log" "no slow-pin line or host-backing summary"
    show shim/pin-pieces
fi
# MSCHED_STRICT=1: a kernel that follows a pointer stored in device memory reaches memory its
# launch does not name. With the budget alone it runs (the target stays resident); strict, the
# target is evicted first: always mapped, the chase reads its host chunk, and the program ends
# with the right byte (before always-mapped memory it died of the fault).
simple shim/strict-off cuda_test_dl strict "${SHIM[@]}" MSCHED_BUDGET=64MiB
run shim/strict-on cuda_test_dl strict "${SHIM[@]}" MSCHED_BUDGET=64MiB MSCHED_STRICT=1 \
    MSCHED_VERBOSE=1
rc=$?
if [ $rc = 0 ] && grep -q "MSCHED_STRICT=1: every command runs" "$WORK/shim/strict-on.err" &&
    grep -q "^strict: the stored pointer's target holds 0x22" "$WORK/shim/strict-on.out" &&
    grep -Eq "strict: [1-9][0-9]* chunks evicted outside the predictions" "$WORK/shim/strict-on.err"; then
    pass "shim/strict-on (the chase ran on the evicted target's host chunk)"
else
    fail shim/strict-on "rc=$rc, want the chase to read 0x22 from the host chunk"
    show shim/strict-on
fi

# ---- robustness ------------------------------------------------------------------------------
if run shim/fork cuda_test_linked fork "${SHIM[@]}" MSCHED_TRACE="$WORK/fork.trace" &&
    grep -q '^OK fork$' "$WORK/shim/fork.out" &&
    "$T/trace_check" "$WORK/fork.trace" >"$WORK/fork.tc" &&
    same_keys "trace after fork" "$(grep '^EXPECT trace' "$WORK/shim/fork.out") header=1 task=1" \
        "$(grep '^COUNT' "$WORK/fork.tc")" kernel alloc free copy memset sync header task; then
    pass shim/fork-child-leaves-trace-alone
else
    fail shim/fork-child-leaves-trace-alone
    show shim/fork
fi
if run shim/quiet cuda_test_linked gpa "${SHIM[@]}" && [ ! -s "$WORK/shim/quiet.err" ]; then
    pass shim/quiet-without-verbose
else
    fail shim/quiet-without-verbose "stderr: $(head -c 200 "$WORK/shim/quiet.err")"
fi
if run shim/trace-pid cuda_test_linked gpa "${SHIM[@]}" MSCHED_TRACE="$WORK/pid-%p.trace" &&
    ls "$WORK"/pid-[0-9]*.trace >/dev/null 2>&1 &&
    "$T/trace_check" "$WORK"/pid-[0-9]*.trace >/dev/null; then
    pass shim/trace-path-pid
else
    fail shim/trace-path-pid
fi
have_driver=0
for d in /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/local/nvidia/lib64 /usr/local/nvidia/lib \
    /usr/lib/wsl/lib /lib/x86_64-linux-gnu /lib64 /usr/lib; do
    [ -e "$d/libcuda.so.1" ] && have_driver=1
done
if [ $have_driver = 0 ]; then
    simple shim/no-driver cuda_test_dl nodriver LD_LIBRARY_PATH="$SHIMDIR" \
        MSCHED_REAL_LIBCUDA=/nonexistent/libcuda.so.1
else
    echo "SKIP shim/no-driver (a real driver is installed here)"
fi

# ---- the memory engine under a budget ---------------------------------------------------------
# The same random program (allocations, frees, kernels, copies, memsets, a pointer table in
# device memory) directly on the fake driver, then through libmsched with a 40 MiB budget for a
# footprint of up to 96 MiB (a launch may need 8 buffers: its own, their pointer tables' targets): no mismatch either way, no fault (the fake's PROT_NONE oracle),
# and the engine must really have evicted.
# The lock-order check (shim/locks.h): the table's order passes, a reversed or recursive
# acquisition is reported and aborts.
ok=1
for m in ok cond; do
    "$T/lock_order" $m >/dev/null 2>&1 || ok=0
done
for m in reverse twice; do
    out=$("$T/lock_order" $m 2>&1)
    rc=$?
    { [ $rc -ne 0 ] && grep -q "lock order violated" <<<"$out"; } || ok=0
done
if [ $ok -eq 1 ]; then pass locks/order-check; else fail locks/order-check "see lock_order"; fi
# Pointer queries a library makes before launching (cuFFT's plan creation failed on the H200):
# an engine allocation, unmapped, written, or evicted, answers like cuMemAlloc memory. The fake
# answers "not memory" for a reserved range with nothing mapped, as the real driver does.
out=$(env LD_LIBRARY_PATH="$FAKEDIR" timeout 60 "$T/ptr_query" 2>&1)
out2=$(env LD_LIBRARY_PATH="$SHIMDIR" MSCHED_REAL_LIBCUDA="$FAKE" MSCHED_BUDGET=64MiB \
    MSCHED_DAEMON=off MSCHED_VERBOSE=1 timeout 60 "$T/ptr_query" 2>&1)
evicted=$(grep -o "out [0-9]* MiB" <<<"$out2" | grep -o "[0-9]*")
if grep -q "PTR_QUERY .*failed=0" <<<"$out" && grep -q "PTR_QUERY .*failed=0" <<<"$out2" &&
    [ "${evicted:-0}" -gt 0 ]; then
    pass "engine/pointer-queries ($evicted MiB evicted)"
else
    fail engine/pointer-queries "$(grep -m3 FAIL <<<"$out$out2" | tr '\n' ' ')"
fi
# Stream capture of kernels on evicted memory (torch.cuda.graph failed under the engine on the
# H200): the fake, like the driver, invalidates a capture that a synchronization meets; the
# gate records captured commands without faulting, and the graph's launches bring memory back.
out=$(env LD_LIBRARY_PATH="$FAKEDIR" timeout 60 "$T/capture" 2>&1)
out2=$(env LD_LIBRARY_PATH="$SHIMDIR" MSCHED_REAL_LIBCUDA="$FAKE" MSCHED_BUDGET=64MiB \
    MSCHED_DAEMON=off MSCHED_VERBOSE=1 timeout 60 "$T/capture" 2>&1)
evicted=$(grep -o "out [0-9]* MiB" <<<"$out2" | grep -o "[0-9]*")
if grep -q "CAPTURE ok" <<<"$out" && grep -q "CAPTURE ok" <<<"$out2" && [ "${evicted:-0}" -gt 0 ]; then
    pass "engine/stream-capture ($evicted MiB evicted)"
else
    fail engine/stream-capture "$(grep -m2 CAPTURE <<<"$out$out2" | tr '\n' ' ')"
fi
# Another thread faults on the evicted buffer while the capture is open: the fault's
# cuCtxSynchronize would invalidate the capture, so it moves nothing and the launch runs on
# the host chunk (counted).
out=$(env LD_LIBRARY_PATH="$SHIMDIR" MSCHED_REAL_LIBCUDA="$FAKE" MSCHED_BUDGET=64MiB \
    MSCHED_DAEMON=off MSCHED_VERBOSE=1 CAPTURE_SIDE=1 timeout 60 "$T/capture" 2>&1)
if grep -q "CAPTURE ok" <<<"$out" && grep -q "[1-9][0-9]* faults moved nothing during a stream capture" <<<"$out"; then
    pass "engine/capture-side-fault"
else
    fail engine/capture-side-fault "$(grep -m3 "CAPTURE\|misses:" <<<"$out" | tr '\n' ' ')"
fi
# exit() from a signal handler while paging (the handler may interrupt the shim holding the
# engine's lock): 100 runs, none may hang or die (before: 7 of 20 died of the lock check's
# abort, and without the check they hang).
hangs=0
others=0
for i in $(seq 1 100); do
    env LD_LIBRARY_PATH="$SHIMDIR" MSCHED_REAL_LIBCUDA="$FAKE" MSCHED_BUDGET=32MiB MSCHED_DAEMON=off \
        TSAN_OPTIONS="${TSAN_OPTIONS:+$TSAN_OPTIONS:}report_signal_unsafe=0" \
        timeout 20 "$T/exit_signal" "$i" >/dev/null 2>"$WORK/exit_signal.err"
    rc=$?
    [ $rc -eq 124 ] && hangs=$((hangs + 1))
    [ $rc -ne 0 ] && [ $rc -ne 124 ] && others=$((others + 1))
done
if [ $hangs -eq 0 ] && [ $others -eq 0 ]; then
    pass engine/exit-from-signal
else
    fail engine/exit-from-signal "$hangs hangs, $others other failures in 100 runs"
fi
# Threads racing kernels, copies, frees and allocations under a budget of a quarter of their
# footprint, the engine alone: a command's chunks stay pinned from admission until the driver
# has it, so no other thread's fault evicts them (before: SIGSEGV at 32 threads, mismatching
# words at 16).
out=$(env LD_LIBRARY_PATH="$SHIMDIR" MSCHED_REAL_LIBCUDA="$FAKE" MSCHED_BUDGET=64MiB \
    MSCHED_DAEMON=off timeout 300 "$T/thread_race" 64 20 2>&1)
if [ $? -eq 0 ] && grep -q "THREAD_RACE threads=64 .*mismatches=0 errors=0" <<<"$out"; then
    pass engine/thread-race
else
    fail engine/thread-race "$(tail -n 3 <<<"$out" | tr '\n' ' ')"
fi
# Allocation failures injected into the shim (tests/shim/alloc_fail.c): calls fail with CUDA
# errors, nothing crashes, no data is lost, and the injection reaches the engine.
out=$(env LD_LIBRARY_PATH="$SHIMDIR" MSCHED_REAL_LIBCUDA="$FAKE" MSCHED_BUDGET=8MiB MSCHED_DAEMON=off \
    timeout 120 "$T/alloc_fail" 2>&1)
if [ $? -eq 0 ] && grep -q "ALLOC_FAIL .*mismatches=0" <<<"$out"; then
    pass "engine/alloc-fail ($(grep -o 'failed_calls=[0-9]*' <<<"$out"))"
else
    fail engine/alloc-fail "$(tail -n 3 <<<"$out" | tr '\n' ' ')"
fi
seed=${MS_SEED:-7}
out=$(env LD_LIBRARY_PATH="$FAKEDIR" "$T/engine_stress" 600 "$seed" 2>&1)
if [ $? -eq 0 ] && grep -q "mismatches=0" <<<"$out"; then
    pass engine/direct-stress
else
    fail engine/direct-stress "$(tail -n 2 <<<"$out" | tr '\n' ' ')"
fi
out=$(env LD_LIBRARY_PATH="$SHIMDIR" MSCHED_REAL_LIBCUDA="$FAKE" MSCHED_BUDGET=40MiB \
    MSCHED_VERBOSE=1 MSCHED_HOST_POOL=0 "$T/engine_stress" 600 "$seed" 2>&1)
rc=$?
evicted=$(grep -o "out [0-9]* MiB" <<<"$out" | grep -o "[0-9]*")
faults=$(grep -o "[0-9]* faults" <<<"$out" | grep -o "[0-9]*")
# The program allocates with cuMemAlloc, cuMemAllocAsync and cuMemAllocPitch: the engine takes
# every one (the fake driver sees no allocation call at all).
fallocs=$(grep -o "FAKE allocs=[0-9]*" <<<"$out" | grep -o "[0-9]*$")
if [ $rc -eq 0 ] && grep -q "mismatches=0" <<<"$out" && [ "${evicted:-0}" -gt 0 ] &&
    [ "${faults:-0}" -gt 100 ] && [ "${fallocs:-1}" -eq 0 ]; then
    pass "engine/budget-stress (seed $seed, $faults faults, $evicted MiB evicted)"
else
    fail engine/budget-stress "rc=$rc seed=$seed $(grep -E 'ENGINE|engine|FAIL|msched' <<<"$out" | tail -n 3 | tr '\n' ' ')"
fi

# Always-mapped memory (docs/engine.md): under the 40 MiB budget chunks leave the device into
# host chunks made lazily (the fake counts host-located handles); at the end every buffer is
# freed and no host chunk is left (the run above keeps no pool: MSCHED_HOST_POOL=0; pooling is
# tests/cli/daemon_host_pool.sh's).
hchunks=$(grep -o "[0-9]* host chunks made" <<<"$out" | grep -o "^[0-9]*")
hleft=$(grep -o "host_handles=[0-9]*" <<<"$out" | grep -o "[0-9]*$")
if [ $rc -eq 0 ] && [ "${hchunks:-0}" -gt 0 ] && [ "${hleft:-1}" -eq 0 ]; then
    pass "engine/host-chunks ($hchunks host chunks made, none left)"
else
    fail engine/host-chunks "rc=$rc hchunks=$hchunks left=$hleft $(grep -E 'misses|FAKE' <<<"$out" | tr '\n' ' ')"
fi

# Wrong predictions cost time, never correctness: every command's predicted set loses 30 % of
# its chunks (MSCHED_MISPREDICT) and strict mode evicts everything a command does not name, so
# kernels run on host chunks: the data must match the shadow, and the fake saw kernels whose
# arguments point into host-mapped memory. Without strict mode, chunks a kernel wrote without
# naming them stay CLEAN in the engine's table: only the GPU hash may clear them for a drop
# (no hash on the fake: they are copied), or those writes would be lost.
for mode in "MSCHED_STRICT=1" "MSCHED_STRICT=0"; do
    out=$(env LD_LIBRARY_PATH="$SHIMDIR" MSCHED_REAL_LIBCUDA="$FAKE" MSCHED_BUDGET=40MiB $mode \
        MSCHED_MISPREDICT=30 MSCHED_VERBOSE=1 "$T/engine_stress" 300 "$seed" 2>&1)
    rc=$?
    hml=$(grep -o "host_mapped_launches=[0-9]*" <<<"$out" | grep -o "[0-9]*$")
    if [ $rc -eq 0 ] && grep -q "mismatches=0" <<<"$out" && [ "${hml:-0}" -gt 0 ]; then
        pass "engine/mispredict $mode (seed $seed: $hml kernels reached host chunks, no mismatch)"
    else
        fail "engine/mispredict $mode" "rc=$rc host_mapped_launches=$hml $(grep -E 'ENGINE|misses|FAIL' <<<"$out" | tail -n 3 | tr '\n' ' ')"
    fi
done

# A budget below single commands' needs (4 MiB; buffers up to 4 MiB, commands name two or
# three): what fits is made resident, the rest runs on host chunks and is counted as a miss.
# The old rule refused such commands.
out=$(env LD_LIBRARY_PATH="$SHIMDIR" MSCHED_REAL_LIBCUDA="$FAKE" MSCHED_BUDGET=4MiB \
    MSCHED_VERBOSE=1 "$T/engine_stress" 300 "$seed" 2>&1)
rc=$?
misses=$(grep -o "misses: [0-9]* commands" <<<"$out" | grep -o "[0-9]*")
if [ $rc -eq 0 ] && grep -q "mismatches=0" <<<"$out" && [ "${misses:-0}" -gt 10 ] &&
    ! grep -q "refused" <<<"$out"; then
    pass "engine/over-budget-commands (seed $seed: $misses commands ran partly on the host)"
else
    fail engine/over-budget-commands "rc=$rc misses=$misses $(grep -E 'ENGINE|misses|refused' <<<"$out" | tail -n 3 | tr '\n' ' ')"
fi

# The host memory limit (MSCHED_HOST_LIMIT): host chunks never pin more than it. An allocation
# that fits neither the budget nor the limit is refused with CUDA_ERROR_OUT_OF_MEMORY and one
# line naming the limit (STRESS_OOM_OK: the program goes on without it); an eviction whose host
# chunks would pass it moves nothing and the command runs on what is resident. No mismatch, and
# the fake never held more host-located handles than the limit allows.
out=$(env LD_LIBRARY_PATH="$SHIMDIR" MSCHED_REAL_LIBCUDA="$FAKE" MSCHED_BUDGET=40MiB \
    MSCHED_HOST_LIMIT=24MiB STRESS_OOM_OK=1 MSCHED_VERBOSE=1 "$T/engine_stress" 300 "$seed" 2>&1)
rc=$?
ooms=$(grep -o "ooms=[0-9]*" <<<"$out" | grep -o "[0-9]*$")
refused=$(grep -o "limit (24 MiB) refused [0-9]*" <<<"$out" | grep -o "[0-9]*$")
peak=$(grep -o "host_handle_peak_bytes=[0-9]*" <<<"$out" | grep -o "[0-9]*$")
if [ $rc -eq 0 ] && grep -q "mismatches=0" <<<"$out" && [ "${ooms:-0}" -gt 0 ] &&
    [ "${refused:-0}" -gt 0 ] && grep -q "cannot back a new allocation .*MSCHED_HOST_LIMIT" <<<"$out" &&
    [ -n "$peak" ] && [ "$peak" -le $((24 << 20)) ]; then
    pass "engine/host-limit (seed $seed: $refused host chunks refused, $ooms allocations refused, peak $((peak >> 20)) MiB)"
else
    fail engine/host-limit "rc=$rc ooms=$ooms refused=$refused peak=$peak $(grep -E 'ENGINE|misses|cannot' <<<"$out" | tail -n 3 | tr '\n' ' ')"
fi

# One big weights buffer that every "layer" names whole (more than the budget) beside a KV buffer
# that fits: what fits of the buffer stays resident and the rest is read from host chunks; before
# the fitting set was chosen to keep what is resident and grow only into free memory, this loop
# moved 8 GB in 164 faults (on the H200 a one-buffer Llama: 1.7 TB).
out=$(env LD_LIBRARY_PATH="$SHIMDIR" MSCHED_REAL_LIBCUDA="$FAKE" MSCHED_BUDGET=150MiB \
    MSCHED_VERBOSE=1 "$T/engine_stress" 20 1 onebuf 2>&1)
rc=$?
faults=$(grep -o "[0-9]* faults" <<<"$out" | grep -o "[0-9]*")
inmib=$(grep -o " in [0-9]* MiB" <<<"$out" | grep -o "[0-9]*")
if [ $rc -eq 0 ] && grep -q "ENGINE_ONEBUF rounds=20 mismatches=0" <<<"$out" &&
    [ "${faults:-99}" -le 4 ] && [ "${inmib:-9999}" -le 256 ]; then
    pass "engine/onebuf (20 rounds over a buffer above the budget: $faults faults, $inmib MiB in)"
else
    fail engine/onebuf "rc=$rc faults=$faults in=$inmib $(grep -E 'ONEBUF|engine \(' <<<"$out" | tr '\n' ' ')"
fi

# 1500 allocations of 4 KiB (6 MiB) under a 64 MiB budget, added in pairs: each would be a
# region of 2 MiB (3000 MiB), and every round moved 3 GB through the budget (XLA's platform
# allocator makes thousands of small allocations). Packed into shared slabs they fit in three.
out=$(env LD_LIBRARY_PATH="$SHIMDIR" MSCHED_REAL_LIBCUDA="$FAKE" MSCHED_BUDGET=64MiB \
    MSCHED_VERBOSE=1 "$T/engine_stress" 20 1 small 2>&1)
rc=$?
inmib=$(grep -o " in [0-9]* MiB" <<<"$out" | grep -o "[0-9]*")
slabs=$(grep -o "at most [0-9]* slabs" <<<"$out" | grep -o "[0-9]*")
out0=$(env LD_LIBRARY_PATH="$SHIMDIR" MSCHED_REAL_LIBCUDA="$FAKE" MSCHED_BUDGET=64MiB \
    MSCHED_PACK_SMALL=0 MSCHED_VERBOSE=1 "$T/engine_stress" 1 1 small 200 2>&1)
rc0=$?
in0=$(grep -o " in [0-9]* MiB" <<<"$out0" | grep -o "[0-9]*")
if [ $rc -eq 0 ] && [ $rc0 -eq 0 ] && grep -q "ENGINE_SMALL rounds=20 buffers=1500 .*mismatches=0" <<<"$out" &&
    grep -q "small allocations: 1500 packed" <<<"$out" && [ "${inmib:-1}" -eq 0 ] &&
    [ "${slabs:-9}" -le 3 ] && [ "${in0:-0}" -ge 200 ]; then
    pass "engine/small-allocations (1500 of 4 KiB in $slabs slabs, $inmib MiB in; unpacked, 200 of them: $in0 MiB in 1 round)"
else
    fail engine/small-allocations "rc=$rc/$rc0 in=$inmib slabs=$slabs in0=$in0 $(grep -E 'SMALL|FAIL' <<<"$out$out0" | tr '\n' ' ')"
fi

# An expandable segment (30 handles of 4 MiB side by side, twelve 9 MiB tensors in it) under a
# 64 MiB budget: when a pointer named every mapping of its span, every add named all 120 MiB,
# nothing could be predicted, and 160 of the 240 adds ran with a pointer on a host chunk. Named
# forward within reach of the pointer, each add names its two tensors and none runs so.
out=$(env LD_LIBRARY_PATH="$SHIMDIR" MSCHED_REAL_LIBCUDA="$FAKE" MSCHED_BUDGET=64MiB \
    MSCHED_VERBOSE=1 "$T/engine_stress" 20 1 expand 2>&1)
rc=$?
hm=$(grep -o "host_mapped_adds=[0-9]*" <<<"$out" | grep -o "[0-9]*$")
miss=$(grep -o "misses: [0-9]* commands" <<<"$out" | grep -o "[0-9]*")
if [ $rc -eq 0 ] && grep -q "ENGINE_EXPAND rounds=20 adds=240 .*mismatches=0" <<<"$out" &&
    [ "${hm:-1}" -eq 0 ] && [ "${miss:-1}" -eq 0 ]; then
    pass "engine/expand (an expandable segment above the budget: no add ran with a pointer on the host)"
else
    fail engine/expand "rc=$rc host_mapped_adds=$hm misses=$miss $(grep -E 'EXPAND|FAIL' <<<"$out" | tr '\n' ' ')"
fi

# Kernel templates (core/template.h): an arena (one 512 MiB allocation, two 16 MiB buffers in
# it 256 MiB apart) under a 150 MiB budget. Named whole, every add runs with arena chunks on the
# host; with the add kernel's template (learned by `msched profile` through the Compute
# Sanitizer stand-in when it is built, else written by hand) only the two chunks the buffers lie
# in are named: they fit, and no add touches host memory. A wrong template (the second buffer
# predicted 64 MiB away) under MSCHED_STRICT=1 leaves the buffer's chunk on the host: the adds
# read it there, slower, and the data stays right.
arena() { # arena TEMPLATES [VAR=VALUE...]
    local tm=$1
    shift
    env LD_LIBRARY_PATH="$SHIMDIR" MSCHED_REAL_LIBCUDA="$FAKE" MSCHED_BUDGET=150MiB \
        MSCHED_VERBOSE=1 MSCHED_TEMPLATES="$tm" "$@" "$T/engine_stress" 10 1 "${MODE:-arena}" 2>&1
}
store=$WORK/templates
how="learned by msched profile"
if [ -e "$T/libsanitizer_fake.so" ] && grep -q "ms_prof_patch = text_" "$BUILD/gen/prof_patch.c" 2>/dev/null; then
    env MSCHED_REAL_LIBCUDA="$FAKE" MSCHED_SANITIZER="$T/libsanitizer_fake.so" \
        "$BUILD/bin/msched" profile --out "$store" -- "$T/engine_stress" 3 1 arena \
        >"$WORK/arena-prof.out" 2>&1 || fail engine/templates-profile "$(tail -n 3 "$WORK/arena-prof.out")"
else
    how="written by hand (no profiler in this build)"
    printf '%s\n' "msched-templates 1" \
        "kernel mod=1 launches=3 opaque=0 unsafe=0 name=add" \
        "arg 0 form=fixed written=1 refused=0 launches=3 lo=0 hi=16781312 count=1 stride=0" \
        "arg 8 form=fixed written=0 refused=0 launches=3 lo=-61440 hi=16781312 count=1 stride=0" \
        "end" >"$store"
fi
printf '%s\n' "msched-templates 1" "kernel mod=0 launches=1 opaque=0 unsafe=0 name=add" \
    "arg 0 form=fixed written=1 refused=0 launches=1 lo=0 hi=4096 count=1 stride=0" \
    "arg 8 form=fixed written=0 refused=0 launches=1 lo=67108864 hi=67112960 count=1 stride=0" \
    "end" >"$WORK/wrong-templates"
whole=$(arena off)
rc1=$?
unused=$(arena off STRESS_ARENA_REUSE=0) # the freed arena's slot left free
rc0=$?
tmpl=$(arena "$store")
rc2=$?
wrong=$(arena "$WORK/wrong-templates" MSCHED_STRICT=1)
rc3=$?
miss() { grep -o "misses: [0-9]* commands" <<<"$1" | grep -o "[0-9]*"; }
if [ $rc1 = 0 ] && [ $rc2 = 0 ] && [ $rc3 = 0 ] &&
    grep -q "ENGINE_ARENA rounds=10 host_mapped_adds=10 mismatches=0" <<<"$whole" &&
    grep -q "ENGINE_ARENA rounds=10 host_mapped_adds=0 mismatches=0" <<<"$tmpl" &&
    [ "$(miss "$tmpl")" = 0 ] && [ "$(miss "$whole")" -ge 10 ] &&
    grep -Eq "\(most: freed region 512 MiB at 0x[0-9a-f]+: 1[0-9]\)" <<<"$whole" &&
    [ $rc0 = 0 ] && grep -Eq "\(most: freed region 512 MiB at 0x[0-9a-f]+: 1[0-9]\)" <<<"$unused" &&
    grep -Eq "templates: [0-9]+ kernels, 1[0-9] launches predicted with them" <<<"$tmpl" &&
    grep -q "ENGINE_ARENA rounds=10 host_mapped_adds=10 mismatches=0" <<<"$wrong" &&
    grep -q "strict: [1-9][0-9]* chunks evicted" <<<"$wrong"; then
    pass "engine/templates (an arena over the budget: whole, $(miss "$whole") commands ran on host chunks; with templates $how, none; a wrong template under MSCHED_STRICT: right data, read from the host)"
else
    fail engine/templates "rc=$rc1/$rc2/$rc3 $(grep -hE 'ARENA|misses|templates|strict|FAIL' <<<"$whole$tmpl$wrong" | tr '\n' ' ')"
fi
# The chunk size (MSCHED_CHUNK): under 100 MiB the template's two 64 MiB chunks do not fit, so
# every add reads one buffer from its host chunk; in 16 MiB chunks the two buffers' chunks (32
# MiB) fit and no add touches host memory. The same data either way.
c64=$(arena "$store" MSCHED_BUDGET=100MiB)
rk1=$?
c16=$(arena "$store" MSCHED_BUDGET=100MiB MSCHED_CHUNK=16MiB)
rk2=$?
if [ $rk1 = 0 ] && [ $rk2 = 0 ] &&
    grep -q "ENGINE_ARENA rounds=10 host_mapped_adds=10 mismatches=0" <<<"$c64" &&
    grep -q "ENGINE_ARENA rounds=10 host_mapped_adds=0 mismatches=0" <<<"$c16" &&
    grep -q "8 host chunks made (512 MiB)" <<<"$c64" && grep -q "32 host chunks made (512 MiB)" <<<"$c16"; then
    pass "engine/chunk-size (templates under 100 MiB: 64 MiB chunks, 10 adds on host chunks; 16 MiB chunks, none)"
else
    fail engine/chunk-size "rc=$rk1/$rk2 $(grep -hE 'ARENA|misses|FAIL' <<<"$c64$c16" | tr '\n' ' ')"
fi
# TMA tensor maps (shim/tensormap.c): a kernel reads a 16 MiB tensor in a 512 MiB arena through
# a map the driver encoded; under 150 MiB only the tensor's chunk is named, so its 10 launches
# miss nothing. The same launches with a copy of the map the driver never encoded name the whole
# arena (512 MiB): all 10 run with chunks on the host. The sums are right either way.
out=$(env LD_LIBRARY_PATH="$SHIMDIR" MSCHED_REAL_LIBCUDA="$FAKE" MSCHED_BUDGET=150MiB \
    MSCHED_VERBOSE=1 "$T/engine_stress" 10 1 tma 2>&1)
rc=$?
if [ $rc = 0 ] && grep -q "ENGINE_TMA rounds=10 host_mapped_encoded=0 host_mapped_forged=[0-9]* mismatches=0" <<<"$out" &&
    grep -q "tensor maps: 1 encoded, 10 launches predicted with them" <<<"$out" &&
    grep -q "kernels: tma_add: 10 launches" <<<"$out"; then
    pass "engine/tensor-maps (a tensor map bounds its launches to the tensor's chunk; an unknown one names the arena)"
else
    fail engine/tensor-maps "rc=$rc $(grep -E 'TMA|misses|tensor maps|FAIL' <<<"$out" | tr '\n' ' ')"
fi
# the same adds as launches of a CUDA graph: the graph's reach is the template's chunks too
gwhole=$(MODE=arena-graph arena off)
rg1=$?
gtmpl=$(MODE=arena-graph arena "$store")
rg2=$?
gwrong=$(MODE=arena-graph arena "$WORK/wrong-templates" MSCHED_STRICT=1)
rg3=$?
if [ $rg1 = 0 ] && [ $rg2 = 0 ] && [ $rg3 = 0 ] &&
    grep -q "ENGINE_ARENA_GRAPH rounds=10 host_mapped_adds=10 mismatches=0" <<<"$gwhole" &&
    grep -q "ENGINE_ARENA_GRAPH rounds=10 host_mapped_adds=0 mismatches=0" <<<"$gtmpl" &&
    grep -q "ENGINE_ARENA_GRAPH rounds=10 host_mapped_adds=10 mismatches=0" <<<"$gwrong"; then
    pass "engine/templates-graph (graph launches: whole, 10 adds on host chunks; with templates none; a wrong one: right data)"
else
    fail engine/templates-graph "rc=$rg1/$rg2/$rg3 $(grep -hE 'ARENA|templates|FAIL' <<<"$gwhole$gtmpl$gwrong" | tr '\n' ' ')"
fi
# a store that does not parse is said once and ignored: whole allocations, the same data
echo "not a store" >"$WORK/bad-templates"
out=$(arena "$WORK/bad-templates")
if [ $? = 0 ] && grep -q "ENGINE_ARENA rounds=10 host_mapped_adds=10 mismatches=0" <<<"$out" &&
    [ "$(grep -c "templates: $WORK/bad-templates is not usable (.*line 1" <<<"$out")" = 1 ]; then
    pass "engine/templates-bad (a bad store is said once and ignored)"
else
    fail engine/templates-bad "$(grep -E 'ARENA|templates|FAIL' <<<"$out" | tr '\n' ' ')"
fi

# A kernel launched through its CUkernel handle (CUDA 12+ lets it stand for a CUfunction): the
# fake's CUfunction queries refuse it, so the layout must come from cuKernelGetParamInfo; else
# every launch would need the whole 96 MiB footprint and be refused under the 40 MiB budget.
out=$(env LD_LIBRARY_PATH="$SHIMDIR" MSCHED_REAL_LIBCUDA="$FAKE" MSCHED_BUDGET=40MiB \
    MSCHED_VERBOSE=1 "$T/engine_stress" 3 1 kcycle 2>&1)
rc=$?
if [ $rc -eq 0 ] && grep -q "ENGINE_CYCLE rounds=3" <<<"$out" &&
    grep -q " unknown_layout=0 " <<<"$out" && grep -q " 0 unbounded launches" <<<"$out"; then
    pass "engine/cukernel (layout from cuKernelGetParamInfo, evicted and brought back)"
else
    fail engine/cukernel "rc=$rc $(grep -E 'ENGINE|engine|FAIL|refused' <<<"$out" | tail -n 3 | tr '\n' ' ')"
fi

# The launch-cost benchmark's mode (bench/shim/launch_cost_fake.sh): a warm-up batch and two
# timed batches of 20000 launches each, every one seen by the shim and gated by the engine with
# its arguments known.
out=$(env LD_LIBRARY_PATH="$SHIMDIR" MSCHED_REAL_LIBCUDA="$FAKE" MSCHED_BUDGET=1GiB \
    MSCHED_VERBOSE=1 "$T/engine_stress" 2 1 launches 2>&1)
rc=$?
if [ $rc -eq 0 ] && grep -q "ENGINE_LAUNCH_NS median=[0-9.]* min=[0-9.]* batches=2" <<<"$out" &&
    grep -q " launches=60000 " <<<"$out" && grep -q " 0 unbounded launches" <<<"$out"; then
    pass "engine/launch-cost (60000 launches gated, none unbounded)"
else
    fail engine/launch-cost "rc=$rc $(grep -E 'ENGINE|summary|engine|FAIL' <<<"$out" | tail -n 3 | tr '\n' ' ')"
fi
# Every launch names a 4 GiB allocation under a 1 GiB budget (a kernel over a weights buffer or
# an arena larger than the budget): after the first faults the part that fits is resident and
# each launch runs with the rest on the host, without planning again (before: an OPT plan over
# the whole history per launch, 1.5 ms each on a CI-class CPU; now a few us). 40000 launches
# within 240 s and a median under 200 us per launch, the fault count of the first ones only.
out=$(env LD_LIBRARY_PATH="$SHIMDIR" MSCHED_REAL_LIBCUDA="$FAKE" MSCHED_BUDGET=1GiB \
    MSCHED_VERBOSE=1 STRESS_LAUNCH_BIG_MIB=4096 timeout 240 "$T/engine_stress" 1 1 launches 2>&1)
rc=$?
med=$(sed -n 's/.*ENGINE_LAUNCH_NS median=\([0-9]*\).*/\1/p' <<<"$out")
faults=$(sed -n 's/.*resident, \([0-9]*\) faults,.*/\1/p' <<<"$out")
if [ $rc -eq 0 ] && [ -n "$med" ] && [ "$med" -lt 200000 ] && [ -n "$faults" ] &&
    [ "$faults" -le 4 ] && grep -q " launches=40000 " <<<"$out"; then
    pass "engine/launch-overflow (median ${med} ns per launch naming 4 GiB under 1 GiB, $faults faults)"
else
    fail engine/launch-overflow "rc=$rc median=${med:-none} faults=${faults:-none} $(grep -E 'ENGINE|FAIL' <<<"$out" | tail -n 2 | tr '\n' ' ')"
fi

# CUDA graphs: at instantiation the shim walks the graph and records what it reaches. Two
# buffers partly pushed out by a third (since freed) come back for every launch (the fake's
# oracle faults otherwise); with the footprint above the budget the graph still runs (it
# reaches 24 of the 48 MiB); the exec's kernel node given new parameters (cuGraphExecKernel-
# NodeSetParams_v2, as XLA's command buffers do before every run) naming a new buffer: the
# graph's reach follows the node, so its launches find their memory resident while a fill
# pushes it out between them (no launch with a pointer on a host chunk, none unbounded; before:
# 7 unbounded launches, 5 with a pointer on the host), and the data is right. Directly on the
# fake likewise.
out=$(env LD_LIBRARY_PATH="$FAKEDIR" "$T/engine_stress" 5 1 graph 2>&1)
if [ $? -eq 0 ] && grep -q "refused=0 after_update=[0-9]* mismatches=0" <<<"$out"; then
    pass engine/graph-direct
else
    fail engine/graph-direct "$(tail -n 2 <<<"$out" | tr '\n' ' ')"
fi
out=$(env LD_LIBRARY_PATH="$SHIMDIR" MSCHED_REAL_LIBCUDA="$FAKE" MSCHED_BUDGET=40MiB \
    MSCHED_VERBOSE=1 "$T/engine_stress" 5 1 graph 2>&1)
rc=$?
gl=$(grep -o "graph_launches=[0-9]*" <<<"$out" | grep -o "[0-9]*$")
if [ $rc -eq 0 ] && grep -q "refused=0 after_update=0 mismatches=0 host_mapped_after_new_params=0" <<<"$out" &&
    [ "${gl:-0}" -eq 13 ] && grep -q "in [1-9][0-9]* MiB" <<<"$out" &&
    grep -q " 0 unbounded launches" <<<"$out"; then
    pass "engine/graph-budget ($gl graph launches: evicted memory brought back, the graph's own reach within the budget runs, new node parameters followed)"
else
    fail engine/graph-budget "rc=$rc $(grep -E 'ENGINE|engine|FAIL|refused' <<<"$out" | tail -n 3 | tr '\n' ' ')"
fi

# Progress: with MSCHED_VERBOSE a line of the engine's counters every MSCHED_PROGRESS_MS while
# commands come (what a run cut by a time limit leaves, having no exit summary); none with 0 or
# without MSCHED_VERBOSE. The graph mode of 20 rounds runs for a few seconds on the fake driver.
prog() {
    env LD_LIBRARY_PATH="$SHIMDIR" MSCHED_REAL_LIBCUDA="$FAKE" MSCHED_BUDGET=40MiB "$@" \
        timeout 120 "$T/engine_stress" 20 1 graph 2>&1 | grep -c "msched\[[0-9]*\]: after [0-9.]* s: [0-9]* faults, [0-9]* unbounded launches (graphs: 0 without a record, 0 with a node not followed, 0 reaching freed memory), in [0-9]* MiB, out [0-9]* MiB, [0-9.]* s migrating, [0-9]* commands with named chunks on the host, [0-9]* of 40 MiB resident"
}
p1=$(prog MSCHED_VERBOSE=1 MSCHED_PROGRESS_MS=100)
p0=$(prog MSCHED_VERBOSE=1 MSCHED_PROGRESS_MS=0)
pq=$(prog MSCHED_PROGRESS_MS=100)
if [ "${p1:-0}" -ge 2 ] && [ "${p0:-1}" -eq 0 ] && [ "${pq:-1}" -eq 0 ]; then
    pass "engine/progress ($p1 progress lines at 100 ms, none with 0 or without MSCHED_VERBOSE)"
else
    fail engine/progress "lines: $p1 at 100 ms, $p0 with 0, $pq without verbose"
fi

# Phases (MSCHED_PHASES=1): at exit, each phase of the launch path summed; every launch hook
# counted once in the hook, the packing, the engine's gate and the driver call, the phases
# inside the hook taking no more than it (to the milliseconds printed); nothing printed without
# the variable.
ph() {
    env LD_LIBRARY_PATH="$SHIMDIR" MSCHED_REAL_LIBCUDA="$FAKE" MSCHED_BUDGET=1GiB "$@" \
        timeout 120 "$T/engine_stress" 1 1 launches 2>&1
}
out=$(ph MSCHED_PHASES=1)
out0=$(ph)
phv=$(awk '$NF ~ /^[0-9.]+$/ && $(NF - 1) ~ /^[0-9.]+$/ && $(NF - 2) ~ /^[0-9]+$/ {
        n = $(NF - 2); s = $(NF - 1)
        if ($0 ~ /launch hook/) { hook = n; hs = s }
        if ($0 ~ /packing/) pack = n
        if ($0 ~ /engine launch gate/) eng = n
        if ($0 ~ /real driver call/) drv = n
        if ($0 ~ /packing|recorder counters|engine launch gate|real driver call/) inside += s }
    END { ok = hook > 0 && hook == pack && hook == eng && hook == drv && inside <= hs + 0.002
          printf "%s %d hooks, pack %d, engine %d, driver %d; %.3f s inside the hook'"'"'s %.3f s", ok ? "OK" : "BAD", hook, pack, eng, drv, inside, hs }' <<<"$out")
if [[ $phv == OK* ]] && grep -q "libmsched's own part of a launch hook" <<<"$out" &&
    ! grep -q "phases" <<<"$out0"; then
    pass "engine/phases (${phv#OK })"
else
    fail engine/phases "$phv; without MSCHED_PHASES: $(grep -c phases <<<"$out0") lines"
fi

# Settled (MSCHED_SETTLED=1): running alone with every chunk on the device, commands skip the
# gate's prediction, history and pins. Launches that fit: all of them admitted that way, and no
# such line without the variable. The stress cycle under a budget below its footprint: faults
# and settled stretches in turn (both seen), data right and no kernel on evicted memory (the
# fake's oracle), so a fault that moved memory under a fast command would have shown; 64 racing
# threads under half their footprint (fast stretches as they start and end, faults between,
# as the threads interleave): data right.
st() {
    env LD_LIBRARY_PATH="$SHIMDIR" MSCHED_REAL_LIBCUDA="$FAKE" MSCHED_VERBOSE=1 "$@" 2>&1
}
settled_n() { grep -o "settled: [0-9]* commands" <<<"$1" | grep -o "[0-9]*"; }
settles_n() { grep -o "(settled [0-9]* times)" <<<"$1" | grep -o "[0-9]*"; }
faults_n() { grep -o "MiB resident, [0-9]* faults" <<<"$1" | grep -o "[0-9]* faults" | grep -o "[0-9]*"; }
out=$(st MSCHED_BUDGET=1GiB MSCHED_SETTLED=1 timeout 120 "$T/engine_stress" 1 1 launches)
out0=$(st MSCHED_BUDGET=1GiB timeout 120 "$T/engine_stress" 1 1 launches)
out1=$(st MSCHED_BUDGET=40MiB MSCHED_SETTLED=1 timeout 300 "$T/engine_stress" 300 "$seed")
rc1=$?
out2=$(st MSCHED_BUDGET=128MiB MSCHED_SETTLED=1 timeout 300 "$T/thread_race" 64 20)
rc2=$?
n=$(settled_n "$out") n1=$(settled_n "$out1") s1=$(settles_n "$out1") f1=$(faults_n "$out1")
n2=$(settled_n "$out2") f2=$(faults_n "$out2")
if [ "${n:-0}" -ge 40000 ] && ! grep -q "settled:" <<<"$out0" && [ $rc1 -eq 0 ] &&
    grep -q "mismatches=0" <<<"$out1" && [ "${n1:-0}" -gt 0 ] && [ "${s1:-0}" -gt 1 ] &&
    [ "${f1:-0}" -gt 0 ] && [ $rc2 -eq 0 ] &&
    grep -q "THREAD_RACE threads=64 .*mismatches=0 errors=0" <<<"$out2"; then
    pass "engine/settled ($n fast commands for 40000 launches; cycle (seed $seed): $n1 fast in $s1 stretches, $f1 faults; 64 threads: $n2 fast, $f2 faults)"
else
    fail engine/settled "fast $n; cycle rc=$rc1 fast=$n1 stretches=$s1 faults=$f1 $(grep -E 'ENGINE_STRESS|FAIL' <<<"$out1" | tr '\n' ' '); race rc=$rc2 fast=$n2 faults=$f2 $(grep -E 'THREAD_RACE|FAIL' <<<"$out2" | tr '\n' ' ')"
fi

# A graph of one child graph node, the exec's child given another graph (cuGraphExecChildGraph-
# NodeSetParams, as XLA updates the commands it traced into child graphs): the reach follows
# the new child, so no launch runs with a pointer on a host chunk while a fill pushes its
# buffers out between launches (before: 5 unbounded launches, 5 on the host). Direct too.
out=$(env LD_LIBRARY_PATH="$FAKEDIR" timeout 60 "$T/engine_stress" 5 1 graph-child 2>&1)
out2=$(env LD_LIBRARY_PATH="$SHIMDIR" MSCHED_REAL_LIBCUDA="$FAKE" MSCHED_BUDGET=40MiB \
    MSCHED_VERBOSE=1 timeout 120 "$T/engine_stress" 5 1 graph-child 2>&1)
rc=$?
if grep -q "ENGINE_GRAPH_CHILD launches=10 mismatches=0 host_mapped=0" <<<"$out" && [ $rc -eq 0 ] &&
    grep -q "ENGINE_GRAPH_CHILD launches=10 mismatches=0 host_mapped=0" <<<"$out2" &&
    grep -q " 0 unbounded launches" <<<"$out2"; then
    pass "engine/graph-child (a child graph node given a new graph: its reach followed)"
else
    fail engine/graph-child "rc=$rc $(grep -E 'ENGINE|engine \(|FAIL' <<<"$out$out2" | tail -n 3 | tr '\n' ' ')"
fi
# A graph whose nodes name more than the budget (four dependent adds of 24 MiB each, 60 MiB
# under 40) runs in pieces, each gated on its own nodes: no kernel with a pointer on a host
# chunk, through a node's new parameters on the exec and with the application's graph
# destroyed; MSCHED_GRAPH_PIECES=0 launches it whole, with what does not fit on the host (20
# kernels). The data is right either way. The graph's edges carry data (MSCHED_FAKE_EDGE_DATA):
# the CUDA 10 form of cuGraphGetEdges refuses to list them, as the driver did with XLA's graphs
# (jax_platform's ran whole: "no topological order"); the shim lists them with CUDA 12.3's.
out=$(env LD_LIBRARY_PATH="$SHIMDIR" MSCHED_REAL_LIBCUDA="$FAKE" MSCHED_BUDGET=40MiB \
    MSCHED_VERBOSE=1 MSCHED_FAKE_EDGE_DATA=1 timeout 120 "$T/engine_stress" 5 1 graph-pieces 2>&1)
rc=$?
out0=$(env LD_LIBRARY_PATH="$SHIMDIR" MSCHED_REAL_LIBCUDA="$FAKE" MSCHED_BUDGET=40MiB \
    MSCHED_VERBOSE=1 MSCHED_GRAPH_PIECES=0 timeout 120 "$T/engine_stress" 5 1 graph-pieces 2>&1)
rc0=$?
h0=$(grep -o "ENGINE_GRAPH_PIECES launches=10 mismatches=0 host_mapped=[0-9]*" <<<"$out0" | grep -o "[0-9]*$")
if [ $rc -eq 0 ] && [ $rc0 -eq 0 ] &&
    grep -q "ENGINE_GRAPH_PIECES launches=10 mismatches=0 host_mapped=0" <<<"$out" &&
    grep -q "graphs in pieces: 10 launches naming more than the budget made as 40 pieces" <<<"$out" &&
    [ "${h0:-0}" -gt 0 ] && ! grep -q "graphs in pieces" <<<"$out0"; then
    pass "engine/graph-pieces (a graph naming more than the budget runs in 4 pieces: 0 kernels on host chunks, $h0 launched whole)"
else
    fail engine/graph-pieces "rc=$rc/$rc0 $(grep -E 'ENGINE|pieces|FAIL' <<<"$out$out0" | tail -n 4 | tr '\n' ' ')"
fi
# Eight nodes of 12 MiB (a and b_k, 6 MiB each, 54 MiB in all) make 4 pieces of 2 nodes (half
# the budget each), launched alternately on two streams: each launch waits for the one before
# (9 stream waits for 10 launches), as the driver orders launches of one exec; sixteen of 4 MiB
# (2 MiB each: 34 MiB in all, a named by every node but counted once) fit and run whole.
out8=$(env LD_LIBRARY_PATH="$SHIMDIR" MSCHED_REAL_LIBCUDA="$FAKE" MSCHED_BUDGET=40MiB \
    MSCHED_VERBOSE=1 STRESS_PIECES_NODES=8 STRESS_PIECES_MIB=6 STRESS_PIECES_STREAMS=1 \
    timeout 120 "$T/engine_stress" 5 1 graph-pieces 2>&1)
rc8=$?
out16=$(env LD_LIBRARY_PATH="$SHIMDIR" MSCHED_REAL_LIBCUDA="$FAKE" MSCHED_BUDGET=40MiB \
    MSCHED_VERBOSE=1 STRESS_PIECES_NODES=16 STRESS_PIECES_MIB=2 timeout 120 "$T/engine_stress" 5 1 graph-pieces 2>&1)
rc16=$?
if [ $rc8 -eq 0 ] && [ $rc16 -eq 0 ] &&
    grep -q "ENGINE_GRAPH_PIECES launches=10 mismatches=0 host_mapped=0 event_waits=9" <<<"$out8" &&
    grep -q "graphs in pieces: 10 launches naming more than the budget made as 40 pieces" <<<"$out8" &&
    grep -q "ENGINE_GRAPH_PIECES launches=10 mismatches=0 host_mapped=0" <<<"$out16" &&
    ! grep -q "graphs in pieces" <<<"$out16"; then
    pass "engine/graph-pieces-cut (8 nodes: 4 pieces of 2, launches on two streams kept in order; 16 nodes that fit together: whole)"
else
    fail engine/graph-pieces-cut "rc=$rc8/$rc16 $(grep -E 'ENGINE|pieces|FAIL' <<<"$out8$out16" | tail -n 4 | tr '\n' ' ')"
fi
# Four threads launching the exec in pieces at once, each on its own stream: one launch at a
# time issues its pieces (the others wait; no gate runs under the pieces lock), every launch
# after the first waits for the one before, the data is right.
outt=$(env LD_LIBRARY_PATH="$SHIMDIR" MSCHED_REAL_LIBCUDA="$FAKE" MSCHED_BUDGET=40MiB \
    MSCHED_VERBOSE=1 STRESS_PIECES_THREADS=4 timeout 300 "$T/engine_stress" 10 1 graph-pieces 2>&1)
rct=$?
# ... and once the split ends (a change the shim does not follow), the exec's whole launches
# still come after its last one in pieces: 12 launches, 11 waits.
outf=$(env LD_LIBRARY_PATH="$SHIMDIR" MSCHED_REAL_LIBCUDA="$FAKE" MSCHED_BUDGET=40MiB \
    MSCHED_VERBOSE=1 STRESS_PIECES_STREAMS=1 STRESS_PIECES_FORGET=1 timeout 120 "$T/engine_stress" 5 1 graph-pieces 2>&1)
rcf=$?
if [ $rct -eq 0 ] && [ $rcf -eq 0 ] &&
    grep -q "ENGINE_GRAPH_PIECES launches=50 mismatches=0 host_mapped=0 event_waits=49" <<<"$outt" &&
    grep -q "graphs in pieces: 50 launches" <<<"$outt" &&
    grep -q "ENGINE_GRAPH_PIECES launches=12 mismatches=0 host_mapped=[0-9]* event_waits=11" <<<"$outf" &&
    grep -q "graphs in pieces: 10 launches" <<<"$outf"; then
    pass "engine/graph-pieces-threads (4 threads launching one exec in pieces: in order, data right; whole launches after the split ends stay in order)"
else
    fail engine/graph-pieces-threads "rc=$rct/$rcf $(grep -E 'ENGINE|pieces|FAIL' <<<"$outt$outf" | tail -n 4 | tr '\n' ' ')"
fi
# ... and after a call the shim does not follow, one launch of unknown reach, which the verbose
# exit summary attributes to that call (what a user reads to learn why graphs ran unbounded).
out=$(env LD_LIBRARY_PATH="$SHIMDIR" MSCHED_REAL_LIBCUDA="$FAKE" MSCHED_BUDGET=40MiB \
    MSCHED_VERBOSE=1 STRESS_GRAPH_FORGET=1 timeout 120 "$T/engine_stress" 5 1 graph-child 2>&1)
rc=$?
if [ $rc -eq 0 ] && grep -q "ENGINE_GRAPH_CHILD launches=11 mismatches=0" <<<"$out" &&
    grep -q " 1 unbounded launches" <<<"$out" &&
    grep -q "graphs: 11 launches gated, 1 records made, 0 freed regions taken as what is now at their addresses; of unknown reach: 1 without a record (last dropped by cuGraphExecBatchMemOpNodeSetParams), 0 with a node not followed (first: none), 0 reaching memory freed since" <<<"$out"; then
    pass "engine/graph-why (the exit summary names the call that left a graph launch of unknown reach)"
else
    fail engine/graph-why "rc=$rc $(grep -E 'ENGINE|graphs:|unbounded|FAIL' <<<"$out" | tail -n 3 | tr '\n' ' ')"
fi

# The application's own VMM memory (reserve, cuMemCreate, cuMemMap, cuMemSetAccess over many
# mappings at once): 96 MiB of mappings under the 40 MiB budget are virtualized (faults and
# evictions happen; a chunk off the device is mapped to its host chunk), the data is
# intact, and a handle unmapped and mapped elsewhere keeps its contents.
out=$(env LD_LIBRARY_PATH="$FAKEDIR" "$T/engine_stress" 3 1 vmm 2>&1)
if [ $? -eq 0 ] && grep -q "mismatches=0" <<<"$out"; then
    pass engine/vmm-direct
else
    fail engine/vmm-direct "$(tail -n 2 <<<"$out" | tr '\n' ' ')"
fi
# Exportable handles are virtualized by default (MSCHED_VMM_EXPORTABLE defaults to 1).
out=$(env LD_LIBRARY_PATH="$SHIMDIR" MSCHED_REAL_LIBCUDA="$FAKE" MSCHED_BUDGET=40MiB \
    MSCHED_VERBOSE=1 "$T/engine_stress" 3 1 vmm 2>&1)
rc=$?
evicted=$(grep -o "out [0-9]* MiB" <<<"$out" | grep -o "[0-9]*")
faults=$(grep -o "[0-9]* faults" <<<"$out" | grep -o "[0-9]*")
# ipc=801, export=801: an IPC handle to memory msched moves, or an export of a virtualized
# (exportable) VMM handle, is refused (CUDA_ERROR_NOT_SUPPORTED), the export in one line that
# names the way out (MSCHED_VMM_EXPORTABLE=0); nothing went to the driver. Mappings are always
# mapped: no host store is pinned but the fallback handle's (8 MiB: mapped twice at once); the
# 256 MiB handle never mapped takes nothing.
if [ $rc -eq 0 ] && grep -q "ENGINE_VMM rounds=3 ipc=801 export=801 mismatches=0" <<<"$out" &&
    [ "$(grep -c "cuMemExportToShareableHandle refused.*MSCHED_VMM_EXPORTABLE=0" <<<"$out")" -eq 1 ] &&
    ! grep -q "cuMemCreate passed to the driver" <<<"$out" &&
    grep -q "host backing: 1 stores, 8 MiB pinned" <<<"$out" &&
    [ "${evicted:-0}" -gt 0 ] && [ "${faults:-0}" -gt 10 ]; then
    pass "engine/vmm-budget ($faults faults, $evicted MiB evicted)"
else
    fail engine/vmm-budget "rc=$rc $(grep -E 'ENGINE|engine|FAIL|msched' <<<"$out" | tail -n 3 | tr '\n' ' ')"
fi
# Application VMM mappings are always mapped: with 30 % of every prediction dropped (and, in
# strict mode, everything a command does not name evicted), kernels reach mappings off the
# device through their host chunks, and no byte is wrong (before they were always mapped, the
# fake's oracle killed such a kernel: an evicted VMM chunk was mapped nowhere). The fallback
# mappings are left out: they are not always mapped.
for mode in "MSCHED_STRICT=1" "MSCHED_STRICT=0"; do
    out=$(env LD_LIBRARY_PATH="$SHIMDIR" MSCHED_REAL_LIBCUDA="$FAKE" MSCHED_BUDGET=40MiB $mode \
        MSCHED_MISPREDICT=30 STRESS_VMM_FALLBACK=0 MSCHED_VERBOSE=1 "$T/engine_stress" 3 1 vmm 2>&1)
    rc=$?
    hml=$(grep -o "host_mapped_launches=[0-9]*" <<<"$out" | grep -o "[0-9]*$")
    if [ $rc -eq 0 ] && grep -q "ENGINE_VMM rounds=3 ipc=801 export=801 mismatches=0" <<<"$out" &&
        [ "${hml:-0}" -gt 0 ]; then
        pass "engine/vmm-mispredict $mode ($hml kernels reached host chunks, no mismatch)"
    else
        fail "engine/vmm-mispredict $mode" "rc=$rc host_mapped_launches=$hml $(grep -E 'ENGINE|misses|FAIL|msched' <<<"$out" | tail -n 3 | tr '\n' ' ')"
    fi
done
# Host chunks only for what leaves the device: with everything within the budget, none exists
# before the first unmap (VMM_MID); each of the 25 mappings of a handle still held that are
# unmapped with data leaves its contents in host chunks (one chunk each) that the next mapping
# takes (the moved handles' data is checked at their new addresses); the pair, released right
# after mapping, saves nothing at its unmap, and neither does a handle unmapped and released
# right after (an allocator's free: its unmap waits for the next call, which is the release;
# saving it made a 26th host chunk); none is left at exit. A dma-buf of a mapping msched
# moves is refused (801; the fake alone gives one: engine/vmm-unified-passthrough).
out=$(env LD_LIBRARY_PATH="$SHIMDIR" MSCHED_REAL_LIBCUDA="$FAKE" MSCHED_BUDGET=200MiB \
    MSCHED_VERBOSE=1 MSCHED_HOST_POOL=0 "$T/engine_stress" 3 1 vmm 2>&1)
rc=$?
if [ $rc -eq 0 ] && grep -q "ENGINE_VMM rounds=3 ipc=801 export=801 mismatches=0" <<<"$out" &&
    grep -q "ENGINE_DMABUF 801" <<<"$out" && grep -q "VMM_MID host_handles=0 " <<<"$out" && grep -q " 25 host chunks made (104 MiB)" <<<"$out" &&
    grep -q "FAKE host_handles=0 host_creates=25 " <<<"$out"; then
    pass "engine/vmm-host-chunks (none before an unmap with everything resident, 25 made by unmaps, none left)"
else
    fail engine/vmm-host-chunks "rc=$rc $(grep -E 'ENGINE|VMM_MID|FAKE|host chunks|FAIL' <<<"$out" | tr '\n' ' ')"
fi
# The unified engines do not move VMM memory: every handle goes to the driver (said once) and
# the program runs as without msched (before, the mappings were adopted and the first launch on
# one failed); the 256 MiB handle takes the process over its budget, said once; a dma-buf of
# its memory is the driver's to give (the fake's: 0), where the VMM engine refuses it (801).
out=$(env LD_LIBRARY_PATH="$SHIMDIR" MSCHED_REAL_LIBCUDA="$FAKE" MSCHED_BUDGET=200MiB \
    MSCHED_ENGINE=unified MSCHED_VERBOSE=1 "$T/engine_stress" 3 1 vmm 2>&1)
rc=$?
if [ $rc -eq 0 ] && grep -q "ENGINE_VMM rounds=3 ipc=500 export=500 mismatches=0" <<<"$out" &&
    grep -q "ENGINE_DMABUF 0" <<<"$out" &&
    [ "$(grep -c "cuMemCreate passed to the driver, not moved by msched (the memory engine in force" <<<"$out")" -eq 1 ] &&
    [ "$(grep -c "OVER BUDGET: this process now holds [0-9]* MiB .* budget of 200 MiB" <<<"$out")" -eq 1 ]; then
    pass "engine/vmm-unified-passthrough"
else
    fail engine/vmm-unified-passthrough "rc=$rc $(grep -E 'ENGINE|msched|FAIL' <<<"$out" | tail -n 3 | tr '\n' ' ')"
fi
# With MSCHED_VMM_EXPORTABLE=0 the two exportable, RDMA-capable handles (what NCCL creates and
# exports to other ranks) go to the driver: neither their export nor an IPC handle to them is
# refused by msched (the fake has neither call: 500), the reason is said once, and the data is
# still right. Their 8 MiB count against the budget: created while the engine holds its 40
# MiB, the process holds more than its budget, which is said once (OVER BUDGET).
out=$(env LD_LIBRARY_PATH="$SHIMDIR" MSCHED_REAL_LIBCUDA="$FAKE" MSCHED_BUDGET=40MiB \
    MSCHED_VMM_EXPORTABLE=0 MSCHED_VERBOSE=1 "$T/engine_stress" 3 1 vmm 2>&1)
rc=$?
if [ $rc -eq 0 ] && grep -q "ENGINE_VMM rounds=3 ipc=500 export=500 mismatches=0" <<<"$out" &&
    [ "$(grep -c "cuMemCreate passed to the driver, not moved by msched (it asks for an exportable" <<<"$out")" -eq 1 ] &&
    [ "$(grep -c "OVER BUDGET: .* more than its budget of 40 MiB" <<<"$out")" -eq 1 ]; then
    pass "engine/vmm-exportable-passthrough"
else
    fail engine/vmm-exportable-passthrough "rc=$rc $(grep -E 'ENGINE|msched' <<<"$out" | tail -n 3 | tr '\n' ' ')"
fi

# The unified-memory engines on the same program: managed regions under the same 40 MiB budget.
# unified: every command's pages are prefetched before it runs, so no kernel takes a page fault;
# demand: nothing is prefetched in, kernels fault pages in (the demand-paging baseline). Either
# way the data is right and the managed bytes on the device never exceed the budget (evictions
# prefetch pages out).
for eng in unified demand; do
    out=$(env LD_LIBRARY_PATH="$SHIMDIR" MSCHED_REAL_LIBCUDA="$FAKE" MSCHED_BUDGET=40MiB \
        MSCHED_ENGINE=$eng MSCHED_VERBOSE=1 "$T/engine_stress" 600 "$seed" 2>&1)
    rc=$?
    kf=$(grep -o "kernel_faults=[0-9]*" <<<"$out" | grep -o "[0-9]*")
    pout=$(grep -o "prefetch_out_mib=[0-9]*" <<<"$out" | grep -o "[0-9]*$")
    pin=$(grep -o "prefetch_in_mib=[0-9]*" <<<"$out" | grep -o "[0-9]*$")
    dmax=$(grep -o "device_max_mib=[0-9]*" <<<"$out" | grep -o "[0-9]*$")
    ok=0
    if [ $rc -eq 0 ] && grep -q "mismatches=0" <<<"$out" && grep -q "engine (${eng})" <<<"$out" &&
        [ "${pout:-0}" -gt 0 ] && [ -n "$dmax" ] && [ "$dmax" -le 40 ]; then
        if [ $eng = unified ]; then
            [ "${kf:-1}" -eq 0 ] && [ "${pin:-0}" -gt 0 ] && ok=1
        else
            [ "${kf:-0}" -gt 0 ] && [ "${pin:-1}" -eq 0 ] && ok=1
        fi
    fi
    if [ $ok = 1 ]; then
        pass "engine/$eng-stress (kernel faults $kf, in $pin MiB, out $pout MiB, max on device $dmax MiB)"
    else
        fail engine/$eng-stress "rc=$rc $(grep -E 'ENGINE|UM |engine|FAIL|msched' <<<"$out" | tail -n 4 | tr '\n' ' ')"
    fi
done

# Strict mode under the stress workload (every access named by its launch): nothing faults, the
# data is intact, and chunks were evicted outside the predictions. With the daemon it says it
# is off (tests/cli/shim_daemon.sh runs the daemon; here only the refusal without one matters:
# the demand engine).
out=$(env LD_LIBRARY_PATH="$SHIMDIR" MSCHED_REAL_LIBCUDA="$FAKE" MSCHED_BUDGET=1GiB MSCHED_STRICT=1 \
    MSCHED_VERBOSE=1 "$T/engine_stress" 200 "$seed" 2>&1)
rc=$?
ev=$(sed -n 's/.*strict: \([0-9]*\) chunks evicted.*/\1/p' <<<"$out")
if [ $rc -eq 0 ] && grep -q "mismatches=0" <<<"$out" && [ "${ev:-0}" -gt 0 ]; then
    pass "engine/strict-stress ($ev chunks evicted outside the predictions)"
else
    fail engine/strict-stress "rc=$rc, evicted '${ev}': $(grep -E 'msched|FAIL|mismatch' <<<"$out" | tail -n 4 | tr '\n' ' ')"
fi
out=$(env LD_LIBRARY_PATH="$SHIMDIR" MSCHED_REAL_LIBCUDA="$FAKE" MSCHED_BUDGET=1GiB MSCHED_STRICT=1 \
    MSCHED_ENGINE=demand "$T/engine_stress" 50 "$seed" 2>&1)
rc=$?
if [ $rc -eq 0 ] && grep -q "MSCHED_STRICT=1 needs the VMM engine without the daemon" <<<"$out"; then
    pass engine/strict-refused-demand
else
    fail engine/strict-refused-demand "rc=$rc: $(grep -E 'msched|FAIL' <<<"$out" | tail -n 3 | tr '\n' ' ')"
fi

# The accuracy probe on a CUPTI stand-in (tests/shim/fake_cupti.c: the fake driver's page moves
# as unified-memory reports): cuda_test's acc mode touches A (4 MiB) twice, plants a pointer to
# B in C, and chases it. Each line must say exactly that: A touched whole both times (so the
# probe sent it back between them), the chase not covered, with B's first page (2 MiB) missed.
# FAKE_CUPTI_CONFIG_MAX=2 plays a CUPTI with only the two basic counters: same touches, no
# device-to-host or mitigation reports.
for max in "" 2; do
    rm -f "$WORK/acc.jsonl"
    run "shim/accuracy$max" cuda_test_dl acc LD_LIBRARY_PATH="$SHIMDIR" MSCHED_REAL_LIBCUDA="$FAKE" \
        MS_FAKECUDA="$FAKE" MSCHED_BUDGET=64MiB MSCHED_ENGINE=demand MSCHED_ACCURACY="$WORK/acc.jsonl" \
        MSCHED_CUPTI="$T/libcupti_fake.so" FAKE_CUPTI_CONFIG_MAX="$max"
    rc=$?
    if [ $rc = 0 ] && python3 - "$WORK/acc.jsonl" "$max" "$ROOT/bench/accuracy" >"$WORK/acc.check" 2>&1 <<'PY'; then
import json, sys
sys.path.insert(0, sys.argv[3])
import summarize
lines = [json.loads(l) for l in open(sys.argv[1])]
full = sys.argv[2] == ""
launch, summary = lines[:-1], lines[-1]
MiB = 1 << 20
want = [("acc_touch", 4 * MiB, 4 * MiB, True, 0), ("acc_touch", 4 * MiB, 4 * MiB, True, 0),
        ("acc_plant", 6 * MiB, 2 * MiB, True, 0), ("acc_chase", 2 * MiB, 4 * MiB, False, 2 * MiB)]
got = [(l["kernel"], l["pred"], l["touch_hi"], l["covered"], l["miss"]) for l in launch]
assert got == want, got
assert all(l["touch_lo"] > 0 and l["before"] == 0 and l["after"] == 0 for l in launch), launch
# A went back to the host between its two launches: the eviction moved what launch 0 touched.
assert launch[1]["evicted"] == (4 * MiB if full else 0), launch[1]
assert summary["summary"] and summary["launches"] == 4 and summary["covered"] == 3, summary
assert summary["miss"] == 2 * MiB and summary["late"] == 0 and summary["error"] == "", summary
assert summary["dtoh_watched"] == full and summary["mitigation_watched"] == full, summary
assert summary["dropped"] == 0 and summary["reports"] > 0, summary
# The summary over these lines: what each launch left resident is the next launch's eviction,
# against its own prediction; without device-to-host reports there is no such measure.
s = summarize.summarize(sys.argv[1], "acc")
if full:
    res = sum(l["evicted"] for l in launch[1:])
    assert res > 0 and s["resident_bytes"] == res, s
    assert s["resident_pred_bytes"] == sum(l["pred"] for l in launch[:-1]), s
    over = [n["evicted"] - l["pred"] for l, n in zip(launch, launch[1:]) if n["evicted"] > l["pred"]]
    assert s["beyond"] == len(over) and s["beyond_max_bytes"] == max(over, default=0), s
else:
    assert "resident_bytes" not in s, s
print("ok")
PY
        pass "shim/accuracy$max (fake CUPTI: touches, eviction and the missed page as scripted)"
    else
        fail "shim/accuracy$max" "rc=$rc: $(tail -n 3 "$WORK/acc.check" 2>/dev/null | tr '\n' ' ')"
        show "shim/accuracy$max"
    fi
done

# The accuracy probe (shim/accuracy.h) refuses clearly, once, where it cannot measure, and the
# program runs on unharmed: under the VMM engine, and without CUPTI.
for eng in vmm demand; do
    out=$(env LD_LIBRARY_PATH="$SHIMDIR" MSCHED_REAL_LIBCUDA="$FAKE" MSCHED_BUDGET=40MiB \
        MSCHED_ENGINE=$eng MSCHED_ACCURACY="$WORK/acc-$eng.jsonl" MSCHED_CUPTI="$WORK/no-cupti.so" \
        "$T/engine_stress" 200 "$seed" 2>&1)
    rc=$?
    want="needs MSCHED_ENGINE=demand"
    [ $eng = demand ] && want="cannot load libcupti"
    n=$(grep -c "MSCHED_ACCURACY: not measuring: $want" <<<"$out")
    if [ $rc -eq 0 ] && grep -q "mismatches=0" <<<"$out" && [ "$n" = 1 ]; then
        pass "engine/accuracy-refused-$eng"
    else
        fail engine/accuracy-refused-$eng "rc=$rc, $n refusals: $(grep -E 'msched|FAIL' <<<"$out" | tail -n 3 | tr '\n' ' ')"
    fi
done

if [ $failures -ne 0 ]; then
    echo "$failures shim check(s) failed"
    exit 1
fi
exit 0
