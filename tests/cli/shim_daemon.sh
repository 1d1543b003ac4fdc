#!/usr/bin/env bash
# shim_daemon.sh - real processes under libmsched time-sliced by mschedd, on the fake CUDA driver.
#
# Each client is tests/shim/engine_stress (random allocations, kernels, copies, memsets and a
# pointer table, checked against a host shadow; or "cycle": a loop over 24 buffers) with
# libmsched first on the library path. The daemon's budget is below every client's footprint,
# so memory must move at every switch, and the fake driver's oracle (non-resident memory is
# PROT_NONE) turns any command that runs on memory the daemon did not populate into a crash.
#
#   alone        one client alone, footprint twice the budget: it finishes (a lone task whose
#                own chunks fill the budget is stopped and switched, not left waiting)
#   three        two random clients (one limited to 32 MiB by MSCHED_BUDGET) and a cycle: all
#                finish with zero mismatches, `msched status` lists them while they run,
#                resident stays within the budget, the daemon switched and evicted, and all
#                memory returns at the end
#   unified      a unified and a demand-paging client (managed memory), and one on its own VMM
#                mappings (virtualized handles, one moved), under the same daemon
#   threads      tests/shim/workload.c (four threads, every hooked family) beside a cycle:
#                the same result as directly on the fake driver
#   capture      tests/shim/capture.c (a stream capture of kernels, a memset and a copy on evicted
#                and never-populated memory), alone: the graph gives the right result; then held
#                open beside a busy client: orders that arrive meanwhile wait for its end
#   exit         a client releasing its primary context at exit (as the CUDA runtime does)
#                while the daemon still sends it orders: they run, nothing fails
#   kill client  a client killed (-9) while its working set is loading: the others finish
#   kill daemon  the daemon killed (-9) mid-run: a client with MSCHED_BUDGET runs on under it,
#                one without makes everything resident, one whose footprint does not fit the
#                (fake) GPU fails with one line; none hangs
#   stop daemon  SIGTERM: the daemon says goodbye and the clients finish alone
# Sharing is off (--share off) where the turns are the point, on in the section below:
#   share        two clients whose working sets fit in the budget together run at once
#                (`msched status`: shared, both running) and finish with zero mismatches; in
#                a smaller budget their growing demands end sharing mid-run, and they finish
# Every wait is bounded; lib.sh's trap kills whatever a failed run leaves behind.
. "$(dirname "$0")/../daemon/lib.sh"

SHIMDIR=$BUILD/lib/msched
FAKELIB=$BUILD/lib/fakecuda/libcuda.so.1
STRESS=$BUILD/tests/shim/engine_stress
if [ ! -e "$SHIMDIR/libcuda.so.1" ] || [ ! -e "$FAKELIB" ] || [ ! -x "$STRESS" ] ||
    [ ! -x "$BUILD/tests/shim/cuda_test_dl" ] || [ ! -x "$BUILD/tests/shim/capture" ]; then
    echo "SKIP: libmsched, the fake driver or its test programs are not built (no CUDA headers?)"
    exit 0
fi
[ -x "$MSCHEDD" ] || fail "no mschedd at $MSCHEDD"

# Sanitizer builds run several times slower: less work, more time.
# OPS/ROUNDS: work under the daemon; ALONE: random ops after it is gone; LONG: rounds of a cycle
# that must outlast the daemon.
OPS=240 ROUNDS=8 ALONE=300 LONG=1000 LIMIT=90
case "$BUILD" in
*thread*) OPS=40 ROUNDS=2 ALONE=60 LONG=40 LIMIT=240 ;;
*address*) OPS=120 ROUNDS=4 ALONE=150 LONG=200 LIMIT=180 ;;
esac

# ok NAME: finished with status 0, no mismatch, under the daemon the whole time.
ok() {
    local name=$1
    grep -q "mismatches=0\|ENGINE_CYCLE" "$T/$name.out" || fail "$name: $(tail -n 3 "$T/$name.out")"
    grep -q "daemon: connected, [1-9][0-9]* slices" "$T/$name.out" ||
        fail "$name did not run under the daemon: $(grep msched "$T/$name.out" | tail -n 3)"
}

# status_row PID: the task's line in `msched status`.
status_row() {
    "$MSCHED" status 2>/dev/null | awk -v p="$1" '$2 == p'
}

# ---- alone -----------------------------------------------------------------------------------
start_daemon --budget 48MiB --slice 20ms --share off
client lone -- 4 1 cycle
wait_shim lone 0 "$LIMIT"
ok lone
pass "a lone client with twice the budget finishes"

# A CUDA graph naming more than the daemon's budget (60 MiB of adds under 48) runs in pieces,
# each gated through the daemon: no kernel with a pointer on a host chunk, the data right.
client gpieces MSCHED_FAKE_EDGE_DATA=1 -- 5 1 graph-pieces
wait_shim gpieces 0 "$LIMIT"
grep -q "ENGINE_GRAPH_PIECES launches=10 mismatches=0 host_mapped=0" "$T/gpieces.out" ||
    fail "graph-pieces under the daemon: $(grep -E 'ENGINE|pieces|whole' "$T/gpieces.out" | tail -n 3)"
grep -q "graphs in pieces: 10 launches" "$T/gpieces.out" ||
    fail "graph-pieces under the daemon did not run in pieces: $(grep msched "$T/gpieces.out" | tail -n 3)"
grep -q "daemon: connected, [1-9][0-9]* slices" "$T/gpieces.out" ||
    fail "graph-pieces did not run under the daemon: $(grep msched "$T/gpieces.out" | tail -n 3)"
pass "a graph naming more than the daemon's budget runs in pieces under it"

# ---- three -----------------------------------------------------------------------------------
client a -- "$OPS" 7
client b MSCHED_BUDGET=32MiB -- "$OPS" 11
client c -- "$ROUNDS" 3 cycle
seen=0
for i in $(seq 1 200); do
    n=0
    for p in "$PID_a" "$PID_b" "$PID_c"; do
        row=$(status_row "$p")
        [ -n "$row" ] && n=$((n + 1))
    done
    [ "$n" -ge 2 ] && seen=1
    check_budget
    running=$("$MSCHED" status | grep -c " running ")
    [ "$running" -le 1 ] || fail "more than one task running: $("$MSCHED" status)"
    [ "$seen" -eq 1 ] && [ "$i" -ge 20 ] && break
    sleep 0.05
done
[ "$seen" -eq 1 ] || fail "msched status never listed the clients: $("$MSCHED" status)"
pass "msched status lists the clients while they run; resident within the budget"
wait_shim a 0 "$LIMIT"
wait_shim b 0 "$LIMIT"
wait_shim c 0 "$LIMIT"
for n in a b c; do ok "$n"; done
[ "$(metric msched_switches_total)" -gt 0 ] || fail "no switch"
[ "$(metric msched_evicted_bytes_total)" -gt 0 ] || fail "over-subscribed but nothing evicted"
for i in $(seq 1 40); do
    [ "$(metric msched_resident_bytes)" -eq 0 ] && break
    sleep 0.05
done
[ "$(metric msched_resident_bytes)" -eq 0 ] || fail "memory left resident after the clients exited"
"$MSCHED" status | grep -q "no tasks" || fail "tasks left: $("$MSCHED" status)"
sw=$(metric msched_switches_total)
pass "three clients over-subscribing the budget: zero mismatches, $sw switches"

# ---- unified engines ------------------------------------------------------------------------
# Managed-memory clients under the same daemon: the daemon's orders prefetch them out and in
# (unified: no kernel ever faults) or only out (demand: the pages fault back in). Data intact,
# and neither ever has more managed memory on the device than the daemon's budget.
client u MSCHED_ENGINE=unified -- "$OPS" 5
client d MSCHED_ENGINE=demand -- "$OPS" 9
client v -- 3 1 vmm
wait_shim u 0 "$LIMIT"
wait_shim d 0 "$LIMIT"
wait_shim v 0 "$LIMIT"
ok v
grep -q "ENGINE_VMM rounds=3 ipc=801 export=801 mismatches=0" "$T/v.out" || fail "vmm client: $(tail -n 3 "$T/v.out")"
for n in u d; do
    ok "$n"
    grep -q "engine ($([ $n = u ] && echo unified || echo demand))" "$T/$n.out" ||
        fail "$n: not on its engine: $(grep msched "$T/$n.out" | tail -n 2)"
    dmax=$(grep -o "device_max_mib=[0-9]*" "$T/$n.out" | grep -o "[0-9]*$")
    [ -n "$dmax" ] && [ "$dmax" -le 48 ] || fail "$n: ${dmax:-?} MiB managed on the device, budget 48"
done
kf_u=$(grep -o "kernel_faults=[0-9]*" "$T/u.out" | grep -o "[0-9]*$")
kf_d=$(grep -o "kernel_faults=[0-9]*" "$T/d.out" | grep -o "[0-9]*$")
[ "${kf_u:-1}" -eq 0 ] || fail "unified client: $kf_u kernel page faults"
[ "${kf_d:-0}" -gt 0 ] || fail "demand client: no kernel page fault"
pass "unified, demand and application-VMM clients under the daemon: zero mismatches, faults $kf_u / $kf_d"

# ---- threads ----------------------------------------------------------------------------------
# The shim's own workload (four threads, every hooked family, rejected calls, launches whose
# reach is unknown) beside a cycling client: the same result as directly on the fake driver.
WL=$BUILD/tests/shim/cuda_test_dl
ref=$(env LD_LIBRARY_PATH="$BUILD/lib/fakecuda" MS_FAKECUDA="$FAKELIB" "$WL" dlsym | grep '^RESULT')
[ -n "$ref" ] || fail "the workload does not run directly on the fake driver"
client h -- "$ROUNDS" 8 cycle
for m in dlsym gpa-pt; do
    env LD_LIBRARY_PATH="$SHIMDIR" MSCHED_REAL_LIBCUDA="$FAKELIB" MS_FAKECUDA="$FAKELIB" \
        MSCHED_VERBOSE=1 "$WL" "$m" >"$T/wl-$m.out" 2>&1 &
    p=$!
    PIDS+=("$p")
    eval "PID_wl_${m//-/_}=$p"
done
wait_shim wl_dlsym 0 "$LIMIT"
wait_shim wl_gpa_pt 0 "$LIMIT"
wait_shim h 0 "$LIMIT"
ok h
for m in dlsym gpa-pt; do
    grep -q "^OK $m$" "$T/wl-$m.out" ||
        fail "workload $m: $(grep -v EXPECT "$T/wl-$m.out" | tail -n 5)"
    [ "$(grep '^RESULT' "$T/wl-$m.out")" = "$ref" ] || fail "workload $m: another result than $ref"
    grep -q "daemon: connected, [1-9][0-9]* slices" "$T/wl-$m.out" ||
        fail "workload $m did not run under the daemon"
done
pass "a multi-threaded workload under the daemon gives the direct result"

# ---- capture ----------------------------------------------------------------------------------
# A stream capture of kernels, a memset and a copy on memory evicted or never touched (the
# daemon has not populated it: mapped nowhere), the only task. The driver checks a captured
# copy's pointers at capture time (cu_graph failed so under the engine on the H200); the shim
# maps such chunks to host chunks, and the graph's launches bring them in.
CAP=$BUILD/tests/shim/capture
env LD_LIBRARY_PATH="$SHIMDIR" MSCHED_REAL_LIBCUDA="$FAKELIB" MS_FAKECUDA="$FAKELIB" \
    MSCHED_VERBOSE=1 "$CAP" >"$T/capture.out" 2>&1 &
PID_capture=$!
PIDS+=("$PID_capture")
wait_shim capture 0 "$LIMIT"
grep -q "CAPTURE ok" "$T/capture.out" || fail "capture: $(tail -n 3 "$T/capture.out")"
grep -q "daemon: connected, [1-9][0-9]* slices" "$T/capture.out" ||
    fail "capture did not run under the daemon"
pass "a stream capture of a copy of memory never populated runs under the daemon"

# The same capture held open for a second beside a busy client: the daemon's STOP (or an
# EVICT) arrives while the global-mode capture is open. Its drain's cuCtxSynchronize would
# invalidate the capture (CUDA_ERROR_STREAM_CAPTURE_INVALIDATED at its end); the order waits
# for the capture to end instead, and the exit summary counts it.
client busy -- "$LONG" 4 cycle
env LD_LIBRARY_PATH="$SHIMDIR" MSCHED_REAL_LIBCUDA="$FAKELIB" MS_FAKECUDA="$FAKELIB" \
    MSCHED_VERBOSE=1 CAPTURE_HOLD_MS=1000 "$CAP" >"$T/capture2.out" 2>&1 &
PID_capture2=$!
PIDS+=("$PID_capture2")
wait_shim capture2 0 "$LIMIT"
kill "$PID_busy" 2>/dev/null
wait "$PID_busy" 2>/dev/null
grep -q "CAPTURE ok" "$T/capture2.out" || fail "capture beside a client: $(tail -n 3 "$T/capture2.out")"
grep -q " [1-9][0-9]* orders waited for a capture" "$T/capture2.out" ||
    fail "capture beside a client: no order arrived during the capture: $(grep 'daemon:' "$T/capture2.out")"
pass "a STOP or EVICT during a global-mode capture waits for its end; the graph is right"

# ---- exit -------------------------------------------------------------------------------------
# exit_case NAME PASS-MESSAGE ENV...: a client NAME with ENV ends its cycle as a program exits
# while a busy one goes on, so the daemon still sends NAME orders; none of them may fail.
exit_case() {
    local name=$1 msg=$2
    shift 2
    client busy -- "$LONG" 4 cycle
    client "$name" "$@" -- "$ROUNDS" 3 cycle
    wait_shim "$name" 0 "$LIMIT"
    kill "$PID_busy" 2>/dev/null
    wait "$PID_busy" 2>/dev/null
    ok "$name"
    grep -E "migration failed|connection broken" "$T/$name.out" &&
        fail "$name: an order failed as it exited: $(grep msched "$T/$name.out" | tail -n 3)"
    pass "$msg"
}

# A CUDA runtime program releases the primary context it retained as it exits, its memory still
# allocated. The engine's own reference keeps the context alive for the daemon's orders
# (without it the first eviction after the release fails: "daemon connection broken", the
# process's exit summary "gone, failed").
exit_case leaving "a process releasing its primary context at exit still serves the daemon's orders" \
    STRESS_EXIT_RELEASE_MS=500

# The driver shuts itself down in an exit handler registered at cuInit: a process still taking
# the daemon's orders after that fails them. libmsched leaves the daemon in an exit handler of
# its own, registered when its engine starts (after cuInit, so it runs first); the client here
# lingers after the driver has shut down, in a handler registered before cuInit.
exit_case late "a process leaves the daemon before the driver shuts down at exit" \
    STRESS_EXIT_RELEASE_MS=0 STRESS_EXIT_LINGER_MS=500

# ---- kill a client ---------------------------------------------------------------------------
client d -- "$OPS" 5
client e -- "$ROUNDS" 9 cycle
client victim -- "$LONG" 4 cycle
loading=0
for i in $(seq 1 400); do
    if status_row "$PID_victim" | grep -q " loading "; then
        loading=1
        break
    fi
    sleep 0.01
done
kill -9 "$PID_victim"
wait "$PID_victim" 2>/dev/null
wait_shim d 0 "$LIMIT"
wait_shim e 0 "$LIMIT"
ok d
ok e
for i in $(seq 1 40); do
    "$MSCHED" status | grep -q "no tasks" && break
    sleep 0.05
done
"$MSCHED" status | grep -q "no tasks" || fail "the killed client is still listed"
[ "$(metric msched_resident_bytes)" -eq 0 ] || fail "the killed client's memory was not returned"
when=mid-run
[ $loading = 1 ] && when="while loading"
pass "a client killed $when: the others finish"
kill -0 "$DAEMON" || fail "the daemon died"
check_log_clean

# ---- kill the daemon -------------------------------------------------------------------------
client budget MSCHED_BUDGET=40MiB -- "$ALONE" 7
client resident -- "$ALONE" 11
client nofit MSCHED_FAKE_MEM_BYTES=64M -- "$LONG" 3 cycle
for i in $(seq 1 200); do
    [ -n "$(status_row "$PID_budget")" ] && [ -n "$(status_row "$PID_resident")" ] &&
        [ -n "$(status_row "$PID_nofit")" ] && [ "$(metric msched_switches_total)" -gt 10 ] && break
    sleep 0.05
done
kill -9 "$DAEMON"
wait "$DAEMON" 2>/dev/null
wait_shim budget 0 "$LIMIT"
wait_shim resident 0 "$LIMIT"
wait_shim nofit 1 30
grep -q "mismatches=0" "$T/budget.out" || fail "budget: $(tail -n 3 "$T/budget.out")"
grep -q "mismatches=0" "$T/resident.out" || fail "resident: $(tail -n 3 "$T/resident.out")"
grep -q "the daemon is gone (.*); running alone under MSCHED_BUDGET (40 MiB)" "$T/budget.out" ||
    fail "budget did not say it runs alone: $(grep msched "$T/budget.out" | tail -n 3)"
grep -q "the daemon is gone (.*); running alone with all [0-9]* MiB resident" \
    "$T/resident.out" || fail "resident: $(grep msched "$T/resident.out" | tail -n 3)"
grep -q "the daemon is gone (.*) and this process's 96 MiB do not fit" "$T/nofit.out" ||
    fail "nofit: $(grep msched "$T/nofit.out" | tail -n 3)"
[ "$(grep -c "the daemon is gone" "$T/nofit.out")" -eq 1 ] || fail "nofit said it more than once"
pass "daemon killed: clients run alone (under MSCHED_BUDGET, all resident) or fail in one line"

# ---- stop the daemon -------------------------------------------------------------------------
start_daemon --budget 48MiB --slice 20ms --share off
client f -- "$ALONE" 13
client g -- "$LONG" 6 cycle
for i in $(seq 1 200); do
    [ -n "$(status_row "$PID_f")" ] && [ -n "$(status_row "$PID_g")" ] &&
        [ "$(metric msched_switches_total)" -gt 4 ] && break
    sleep 0.05
done
kill -TERM "$DAEMON"
for i in $(seq 1 100); do
    kill -0 "$DAEMON" 2>/dev/null || break
    sleep 0.05
done
kill -0 "$DAEMON" 2>/dev/null && fail "the daemon ignored SIGTERM"
wait "$DAEMON"
[ $? -eq 0 ] || fail "the daemon did not stop cleanly"
wait_shim f 0 "$LIMIT"
wait_shim g 0 "$LIMIT"
grep -q "mismatches=0" "$T/f.out" || fail "f: $(tail -n 3 "$T/f.out")"
for n in f g; do
    grep -q "the daemon is gone (.*); running alone" "$T/$n.out" ||
        fail "$n did not say it runs alone: $(grep msched "$T/$n.out" | tail -n 3)"
done
pass "daemon stopped: clients told goodbye, finish alone"
check_log_clean

# ---- priority: a request-serving task leaves the GPU between requests ------------------------
# A real-time client serving bursts (60 ms apart) beside a best-effort cycle under the priority
# policy: the rt client reports itself idle between bursts (MSCHED_IDLE_MS), so the be client
# gets slices while the rt one is alive, and every burst takes the GPU back.
start_daemon --budget 48MiB --slice 20ms --policy prio
client rt MSCHED_PRIORITY=rt MSCHED_IDLE_MS=10 -- 20 2 burst
client be MSCHED_PRIORITY=be -- 1000000 5 cycle
wait_shim rt 0 "$LIMIT"
grep -q "ENGINE_BURST bursts=20" "$T/rt.out" || fail "rt: $(tail -n 3 "$T/rt.out")"
quiet=$(grep -o "idles ([0-9]* quiet)" "$T/rt.out" | grep -o "[0-9]*" | tail -n 1)
rt_slices=$(grep -o "daemon: connected, [0-9]* slices" "$T/rt.out" | grep -o "[0-9]* slices" | grep -o "[0-9]*")
be_runs=$("$MSCHED" status --prometheus |
    awk -v p="pid=\"$PID_be\"" '$1 ~ /^msched_task_slices_total/ && index($1, p) { print $2; exit }')
[ "${quiet:-0}" -ge 10 ] || fail "rt reported quiet $quiet times (want >= 10): $(grep msched "$T/rt.out" | tail -n 2)"
[ "${rt_slices:-0}" -ge 10 ] || fail "rt got $rt_slices slices (want one per burst)"
[ "${be_runs:-0}" -ge 10 ] || fail "be got $be_runs slices while rt was alive (want >= 10)"
kill -9 "$PID_be"
wait "$PID_be" 2>/dev/null
pass "priority: the rt client idles between bursts ($quiet times), be runs meanwhile ($be_runs slices)"
check_log_clean

# ---- a hung daemon ---------------------------------------------------------------------------
# The daemon stops answering with its socket open (SIGSTOP): waiting clients probe it and, after
# MSCHED_DAEMON_TIMEOUT_MS without an answer, run alone and finish.
client hw MSCHED_DAEMON_TIMEOUT_MS=1500 -- "$LONG" 4 cycle
client hx MSCHED_DAEMON_TIMEOUT_MS=1500 -- "$LONG" 6 cycle
for i in $(seq 1 200); do
    [ -n "$(status_row "$PID_hw")" ] && [ -n "$(status_row "$PID_hx")" ] &&
        [ "$(metric msched_switches_total)" -gt 30 ] && break
    sleep 0.05
done
kill -STOP "$DAEMON"
wait_shim hw 0 "$LIMIT"
wait_shim hx 0 "$LIMIT"
kill -CONT "$DAEMON"
n=0
for c in hw hx; do
    grep -q "ENGINE_CYCLE" "$T/$c.out" || fail "$c: $(tail -n 3 "$T/$c.out")"
    grep -q "the daemon is gone (it has not answered for [0-9]* s)" "$T/$c.out" && n=$((n + 1))
done
# At least one was waiting when the daemon stopped (the other may have held the GPU and
# finished without needing it).
[ "$n" -ge 1 ] || fail "no client noticed the stopped daemon: $(grep -h msched "$T/hw.out" "$T/hx.out" | tail -n 4)"
pass "a stopped daemon: waiting clients give up on it after the timeout and finish alone ($n of 2)"

# ---- share -----------------------------------------------------------------------------------
# Two cycles (96 MiB each) under a 256 MiB budget: their working sets fit together, so they run
# at once (sharing, the default), each from its one RUN, and the fake driver's oracle still
# sees every command on populated memory.
kill -TERM "$DAEMON"
wait "$DAEMON" 2>/dev/null
from=$(($(wc -l <"$T/daemon.log") + 1))
start_daemon --budget 256MiB --slice 20ms
client sa -- "$ROUNDS" 3 cycle
client sb -- "$ROUNDS" 5 cycle
both=0
for i in $(seq 1 400); do
    out=$("$MSCHED" status 2>/dev/null)
    if [ "$(echo "$out" | grep -c " running ")" -ge 2 ]; then
        echo "$out" | grep -q "^mode: shared" || fail "two running, not shared: $out"
        both=1
        break
    fi
    kill -0 "$PID_sa" 2>/dev/null || kill -0 "$PID_sb" 2>/dev/null || break
    sleep 0.02
done
[ "$both" -eq 1 ] || fail "sa and sb never ran at once: $(tail -n 5 "$T/daemon.log")"
wait_shim sa 0 "$LIMIT"
wait_shim sb 0 "$LIMIT"
ok sa
ok sb
tail -n "+$from" "$T/daemon.log" >"$T/share.log"
grep -q "sharing: on (" "$T/share.log" || fail "no sharing line in the daemon's log"
grep -q "sharing: off" "$T/share.log" && fail "sharing ended without pressure: $(cat "$T/share.log")"
pass "share: two clients that fit run at once and finish"
# The same two at 160 MiB: their first demands fit, their footprints (192 MiB) do not, so a
# demand overflows while they share: every sharer is stopped mid-run and they go on in slices.
"$MSCHED" config set budget 160MiB >/dev/null || fail "config set budget"
client pa -- "$ROUNDS" 3 cycle
client pb -- "$ROUNDS" 5 cycle
wait_shim pa 0 "$LIMIT"
wait_shim pb 0 "$LIMIT"
ok pa
ok pb
tail -n "+$from" "$T/daemon.log" >"$T/share.log"
grep -q "sharing: off (task [0-9]* demands" "$T/share.log" ||
    fail "no pressure ended sharing: $(grep sharing "$T/share.log")"
pass "share: pressure stops the sharers mid-run, they finish in slices"
check_log_clean
