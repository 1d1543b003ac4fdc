#!/usr/bin/env bash
# shim_fake_daemon.sh - libmsched against a scripted daemon: a running task whose DEMAND nothing
# answers asks again instead of waiting for ever, and a slow migration is reported.
#
# tests/daemon/fake_daemon serves one libmsched client (tests/shim/engine_stress "cycle" on the
# fake CUDA driver) with everything it asks for, except that with --lose N it drops the first N
# DEMANDs that arrive while the client runs and name memory not yet populated: what a daemon
# that lost a demand does. The client must repeat each lost DEMAND (after about a second),
# finish its rounds with the fake driver's oracle satisfied (memory not populated is PROT_NONE),
# and report the repeats in its summary line. Without --lose nothing is repeated. With the fake
# driver's cuMemMap slowed past 300 ms (MSCHED_FAKE_MAP_MS), the shim logs a "slow population"
# line with the work's time, size and longest step, whose time the line puts in mapping. Every
# wait is bounded (the fake daemon's watchdog and `timeout` on the client).
#
# Where running time goes: the summary's "ran R s (W s of it waiting on demands, O s executing
# orders under the lock)". The fake daemon never stops the client, so every DEMAND after the
# first is sent while running. Answered at once, they leave W and O small (under 0.5 s). Two
# lost ones are one wait: the first DEMAND and its first repeat are dropped, the second repeat
# (at least 2 s after the first DEMAND: a repeat goes out when a waiting thread, waking every
# 200 ms, finds the last DEMAND a second old) is answered, so W is at least 2 s (checked: 1.9)
# and R at least W. The fake loses only DEMANDs sent by a client that knew it ran (see
# fake_daemon.c), so the client repeats exactly twice. With cuMemMap slowed to 310 ms, the populations that run while the client
# holds RUN map at least one chunk: O is at least 0.3 s, and W at least O (the thread waits
# through the population that answers it).
. "$(dirname "$0")/../daemon/lib.sh"

SHIMDIR=$BUILD/lib/msched
FAKELIB=$BUILD/lib/fakecuda/libcuda.so.1
STRESS=$BUILD/tests/shim/engine_stress
FDAEMON=$BUILD/tests/fake_daemon
if [ ! -e "$SHIMDIR/libcuda.so.1" ] || [ ! -e "$FAKELIB" ] || [ ! -x "$STRESS" ]; then
    echo "SKIP: libmsched, the fake driver or engine_stress is not built (no CUDA headers?)"
    exit 0
fi
[ -x "$FDAEMON" ] || fail "no fake daemon at $FDAEMON (make $FDAEMON)"

# Sanitizer builds run several times slower.
LIMIT=20
case "$BUILD" in *thread* | *address*) LIMIT=60 ;; esac

# serve NAME LOSE [VAR=value...]: the fake daemon losing LOSE demands, then the client (with
# those variables); both bounded.
serve() {
    local name=$1 lose=$2
    shift 2
    rm -f "$MSCHED_SOCKET"
    "$FDAEMON" "$MSCHED_SOCKET" --lose "$lose" --budget-mib 48 --timeout "$LIMIT" \
        >"$T/$name-daemon.out" 2>&1 &
    local d=$!
    PIDS+=("$d")
    local i
    for i in $(seq 1 100); do
        [ -S "$MSCHED_SOCKET" ] && break
        sleep 0.05
    done
    [ -S "$MSCHED_SOCKET" ] || fail "$name: the fake daemon did not listen"
    timeout -k 5 "$LIMIT" env LD_LIBRARY_PATH="$SHIMDIR" MSCHED_REAL_LIBCUDA="$FAKELIB" \
        MS_FAKECUDA="$FAKELIB" MSCHED_VERBOSE=1 "$@" "$STRESS" 4 1 cycle >"$T/$name.out" 2>&1
    local rc=$?
    wait "$d"
    local drc=$?
    [ "$rc" = 0 ] || fail "$name: the client exited $rc (124: it waited for a DEMAND's answer until killed)"
    [ "$drc" = 0 ] || fail "$name: the fake daemon exited $drc: $(cat "$T/$name-daemon.out")"
    grep -q "ENGINE_CYCLE rounds=4" "$T/$name.out" || fail "$name: no ENGINE_CYCLE line"
}

# figures NAME: ran, dw and ord from NAME's summary line (ran, waiting on demands, orders).
figures() {
    local f
    f=$(sed -n 's/.*daemon: connected, .*, ran \([0-9.]*\) s (\([0-9.]*\) s of it waiting on demands, \([0-9.]*\) s executing orders under the lock);.*$/\1 \2 \3/p' "$T/$1.out")
    [ -n "$f" ] || fail "$1: no ran/waiting/orders figures: $(grep 'daemon:' "$T/$1.out")"
    read -r ran dw ord <<<"$f"
}

# holds A OP B: the awk comparison of two numbers.
holds() {
    awk -v a="$1" -v b="$3" "BEGIN { exit !(a $2 b) }"
}

serve clean 0
grep -q "lost=0 " "$T/clean-daemon.out" || fail "clean: $(cat "$T/clean-daemon.out")"
grep -q "demands (0 repeated)" "$T/clean.out" ||
    fail "clean: a DEMAND was repeated although every one was answered: $(grep 'daemon:' "$T/clean.out")"
pass "every DEMAND answered: none repeated"
figures clean
holds "$dw" "<" 0.5 && holds "$ord" "<" 0.5 && holds "$ran" ">=" "$dw" ||
    fail "clean: expected under 0.5 s waiting on demands and executing orders (ran >= waiting): $(grep 'daemon:' "$T/clean.out")"
pass "every DEMAND answered: ran $ran s, $dw s of it waiting on demands, $ord s executing orders"

serve lose2 2
grep -q "lost=2 " "$T/lose2-daemon.out" ||
    fail "lose2: the fake daemon did not lose two demands: $(cat "$T/lose2-daemon.out")"
grep -q "demands (2 repeated)" "$T/lose2.out" ||
    fail "lose2: expected two repeated DEMANDs: $(grep 'daemon:' "$T/lose2.out")"
pass "two lost DEMANDs: each repeated, the client finished"
figures lose2
holds "$dw" ">=" 1.9 && holds "$ran" ">=" "$dw" ||
    fail "lose2: expected at least 1.9 s waiting on demands and a ran time at least as long: $(grep 'daemon:' "$T/lose2.out")"
pass "two lost DEMANDs: ran $ran s, $dw s of it waiting on demands"

serve slow 0 MSCHED_FAKE_MAP_MS=310
grep -q "slow population: [0-9.]* ms of work for [0-9.]* GiB ([0-9.]* GB/s), the longest step [0-9.]* ms" "$T/slow.out" ||
    fail "slow: no slow-population line: $(grep 'msched' "$T/slow.out" | tail -n 5)"
grep -q "slow population" "$T/clean.out" && fail "clean: a slow-population line without a slow driver"
pass "a slow migration (cuMemMap 310 ms) is reported with its time, size and longest step"
# The longest step's time is split by driver call: the slowed cuMemMap is in "mapping".
line=$(grep -m1 "slow population:" "$T/slow.out")
step=$(printf '%s\n' "$line" | sed -n 's/.*the longest step \([0-9.]*\) ms (.*/\1/p')
mapping=$(printf '%s\n' "$line" | sed -n 's/.* mapping \([0-9.]*\), unmapping.*/\1/p')
waiting=$(printf '%s\n' "$line" | sed -n 's/.* waiting on copies \([0-9.]*\), mapping.*/\1/p')
started=$(printf '%s\n' "$line" | sed -n 's/.* ms), started \(20[0-9-]*T[0-9:.]*\)$/\1/p')
[ -n "$step" ] && [ -n "$mapping" ] && [ -n "$waiting" ] && [ -n "$started" ] ||
    fail "slow: the slow-population line lacks its phases or its start time: $line"
holds "$mapping" ">=" 300 && holds "$step" ">=" "$mapping" && holds "$mapping" ">" "$waiting" ||
    fail "slow: expected the longest step's time in mapping (>= 300 ms, <= the step, more than waiting on copies): $line"
pass "the slow step's time is where the driver was slow: $mapping of $step ms mapping (started $started)"
figures slow
holds "$ord" ">=" 0.3 && holds "$dw" ">=" "$ord" && holds "$ran" ">=" "$dw" ||
    fail "slow: expected at least 0.3 s executing orders while running, no more than the waiting on demands, no more than ran: $(grep 'daemon:' "$T/slow.out")"
pass "a slow migration while running: ran $ran s, $dw s of it waiting on demands, $ord s executing orders"
