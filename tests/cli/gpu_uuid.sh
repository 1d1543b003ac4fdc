#!/usr/bin/env bash
# gpu_uuid.sh - one daemon per physical GPU, found by the GPU's UUID, on the fake CUDA driver
# with two GPUs (MSCHED_FAKE_GPUS=2; their UUIDs are fixed: GPU-a05c4e11-... for physical
# GPU 0, GPU-a15c4e11-... for physical GPU 1).
#
#   names       `mschedd --gpu 0` and `--gpu 1` listen on gpu-<uuid>.sock each, with gpu0.sock
#               and gpu1.sock links to them; `msched status --gpu N` (through the link) and
#               `--gpu UUID` reach the right one (told apart by their budgets)
#   refused     a second daemon for the same GPU, by its index (under any CUDA_VISIBLE_DEVICES:
#               the daemon numbers every GPU) or by its UUID, is refused with one line naming
#               the first; an index the driver does not have is refused; both first daemons
#               keep serving
#   clients     libmsched clients whose CUDA_VISIBLE_DEVICES renumber the GPUs ("1,0", "0", a
#               UUID prefix "GPU-a1") all use their device 0, and each joins the daemon of the
#               physical GPU behind it: `msched status` of that daemon lists it while it runs,
#               its log names its pid, the other daemon's log does not
#   budget      the default budget is one rule however the daemon starts: 90 % of the GPU's
#               memory by hand (1 GiB fake GPUs: 920 MiB) and when `msched run` starts it (under
#               CUDA_VISIBLE_DEVICES=1: the daemon of physical GPU 1, linked as gpu1.sock); 16 GiB
#               when no driver answers
#   stop        SIGTERM removes the daemon's socket and its link
. "$(dirname "$0")/../daemon/lib.sh"
need_fake_cuda
[ -x "$MSCHEDD" ] || fail "no mschedd at $MSCHEDD"

unset MSCHED_SOCKET
export XDG_RUNTIME_DIR="$T/run"
mkdir -m 700 "$XDG_RUNTIME_DIR"
D=$XDG_RUNTIME_DIR/msched
export MSCHED_REAL_LIBCUDA=$FAKELIB MS_FAKECUDA=$FAKELIB MSCHED_FAKE_GPUS=2
export MSCHED_FAKE_MEM_BYTES=1G
H0=a05c4e11-6d73-6368-6564-66616b650000
H1=a15c4e11-6d73-6368-6564-66616b650001
SECS=4
case "$BUILD" in *thread* | *address*) SECS=8 ;; esac

# daemon N BUDGET: mschedd --gpu N in the foreground, its log in $T/daemonN.log.
daemon() {
    "$MSCHEDD" --foreground --check --log-level info --gpu "$1" --budget "$2" \
        >>"$T/daemon$1.log" 2>&1 &
    PIDS+=($!)
    eval "DAEMON$1=$!"
}

# ---- names -----------------------------------------------------------------------------------
daemon 0 48MiB
daemon 1 64MiB
for i in $(seq 1 100); do
    [ -S "$D/gpu-$H0.sock" ] && [ -S "$D/gpu-$H1.sock" ] && [ -L "$D/gpu0.sock" ] &&
        [ -L "$D/gpu1.sock" ] && break
    sleep 0.05
done
[ -S "$D/gpu-$H0.sock" ] && [ -S "$D/gpu-$H1.sock" ] ||
    fail "no socket named by each UUID: $(ls -l "$D"; cat "$T"/daemon*.log)"
[ "$(readlink "$D/gpu0.sock")" = "gpu-$H0.sock" ] || fail "gpu0.sock: $(ls -l "$D")"
[ "$(readlink "$D/gpu1.sock")" = "gpu-$H1.sock" ] || fail "gpu1.sock: $(ls -l "$D")"
pass "one socket per GPU UUID, gpu0.sock and gpu1.sock link to them"

"$MSCHED" status --gpu 0 | grep -q "^msched: GPU 0,.*" || fail "status --gpu 0: $("$MSCHED" status --gpu 0 2>&1)"
"$MSCHED" status --gpu 0 | grep -q "of 48.0 MiB budget" || fail "status --gpu 0 is not the 48 MiB daemon"
"$MSCHED" status --gpu 1 | grep -q "of 64.0 MiB budget" || fail "status --gpu 1 is not the 64 MiB daemon"
"$MSCHED" status --gpu "GPU-$H1" | grep -q "of 64.0 MiB budget" || fail "status --gpu GPU-$H1"
"$MSCHED" status | grep -q "of 48.0 MiB budget" || fail "plain status is not GPU 0's daemon"
XDG_RUNTIME_DIR=$T/none MSCHED_SOCKET_DIR=$D "$MSCHED" status --gpu 1 | grep -q "of 64.0 MiB budget" ||
    fail "MSCHED_SOCKET_DIR does not name the socket directory"
pass "msched status --gpu N (through the link), --gpu UUID and MSCHED_SOCKET_DIR reach each GPU's daemon"

# A link is followed only to a name beside it: one leading to another directory is refused,
# even to a real daemon's socket.
mkdir -m 700 "$T/links"
ln -s "$D/gpu-$H0.sock" "$T/links/gpu0.sock"
if "$MSCHED" status --socket "$T/links/gpu0.sock" >"$T/links.out" 2>&1; then
    fail "a link out of its directory was followed: $(cat "$T/links.out")"
fi
grep -q "refusing the daemon socket $T/links/gpu0.sock: it is a link out of its directory" \
    "$T/links.out" || fail "link out: $(cat "$T/links.out")"
pass "a link out of its directory is refused"

# ---- refused ---------------------------------------------------------------------------------
if timeout 10 "$MSCHEDD" --gpu 1 --budget 64MiB 2>"$T/second.err"; then
    fail "a second daemon for GPU 1 started"
fi
grep -q "already running for GPU 1 on $D/gpu-$H1.sock" "$T/second.err" ||
    fail "second daemon's line: $(cat "$T/second.err")"
grep -q "pid $DAEMON1" "$T/second.err" || fail "the line does not name the first daemon's pid"
if timeout 10 "$MSCHEDD" --foreground --uuid "GPU-$H0" --budget 48MiB 2>"$T/third.err"; then
    fail "a second daemon for GPU-$H0 started"
fi
head -n 1 "$T/third.err" | grep -q "^mschedd: another mschedd (pid $DAEMON0) is already running for GPU 0 on $D/gpu-$H0.sock" ||
    fail "by UUID: $(cat "$T/third.err")"
# The daemon numbers GPUs with every GPU visible, whatever its CUDA_VISIBLE_DEVICES says.
if CUDA_VISIBLE_DEVICES=0 timeout 10 "$MSCHEDD" --gpu 1 --budget 64MiB 2>"$T/cvd.err"; then
    fail "under CUDA_VISIBLE_DEVICES=0, --gpu 1 started a daemon"
fi
grep -q "already running for GPU 1 on $D/gpu-$H1.sock" "$T/cvd.err" || fail "CVD: $(cat "$T/cvd.err")"
if timeout 10 "$MSCHEDD" --foreground --gpu 2 2>"$T/fourth.err"; then
    fail "a daemon for a GPU the driver does not have started"
fi
grep -q "no GPU 2 (the driver sees 2)" "$T/fourth.err" || fail "GPU 2: $(cat "$T/fourth.err")"
"$MSCHED" status --gpu 0 >/dev/null && "$MSCHED" status --gpu 1 >/dev/null ||
    fail "a first daemon stopped answering"
pass "a second daemon for the same GPU is refused (by index and by UUID); both keep serving"

# ---- clients ---------------------------------------------------------------------------------
# client NAME CUDA_VISIBLE_DEVICES: engine_stress "timed" for SECS seconds under libmsched (its
# own pid: env execs it).
client() {
    env CUDA_VISIBLE_DEVICES="$2" LD_LIBRARY_PATH="$SHIMDIR" MSCHED_VERBOSE=1 \
        "$STRESS" "$SECS" 1 timed >"$T/$1.out" 2>&1 &
    PIDS+=($!)
    eval "PID_$1=$!"
}
client a 1,0
client b 0
client c GPU-a1

# listed PID N: `msched status --gpu N` lists the task of pid PID.
listed() {
    "$MSCHED" status --gpu "$2" 2>/dev/null | awk -v p="$1" '$2 == p { f = 1 } END { exit !f }'
}
seen=""
end=$((SECONDS + 60))
while [ $SECONDS -lt $end ] && { kill -0 "$PID_a" || kill -0 "$PID_b" || kill -0 "$PID_c"; } 2>/dev/null; do
    listed "$PID_a" 1 && listed "$PID_c" 1 && listed "$PID_b" 0 && seen=yes && break
    sleep 0.1
done
[ -n "$seen" ] ||
    fail "msched status never listed a and c on GPU 1 and b on GPU 0: $("$MSCHED" status --gpu 0) $("$MSCHED" status --gpu 1)"
listed "$PID_a" 0 || listed "$PID_c" 0 || listed "$PID_b" 1 && fail "a task is listed by the wrong daemon"
pass "while they run, GPU 1's daemon lists a (1,0) and c (GPU-a1), GPU 0's lists b (0)"
for n in a b c; do
    eval "p=\$PID_$n"
    while [ $SECONDS -lt $end ] && kill -0 "$p" 2>/dev/null; do sleep 0.1; done
    kill -0 "$p" 2>/dev/null && fail "client $n still runs after a minute"
    wait "$p" || fail "client $n exited $?: $(tail -n 5 "$T/$n.out")"
    grep -q '"tasks_per_s"' "$T/$n.out" || fail "client $n: no result line: $(tail -n 5 "$T/$n.out")"
    grep -q "daemon: connected, [1-9][0-9]* slices" "$T/$n.out" ||
        fail "client $n did not run under a daemon: $(grep msched "$T/$n.out" | tail -n 3)"
done
grep -q "daemon: task .*, on $D/gpu-$H1.sock" "$T/a.out" || fail "a: $(grep 'daemon:' "$T/a.out")"
grep -q "daemon: task .*, on $D/gpu-$H0.sock" "$T/b.out" || fail "b: $(grep 'daemon:' "$T/b.out")"
grep -q "daemon: task .*, on $D/gpu-$H1.sock" "$T/c.out" || fail "c: $(grep 'daemon:' "$T/c.out")"
grep -q "pid $PID_a 'engine_stress'" "$T/daemon1.log" || fail "GPU 1's log does not name a"
grep -q "pid $PID_c 'engine_stress'" "$T/daemon1.log" || fail "GPU 1's log does not name c"
grep -q "pid $PID_b 'engine_stress'" "$T/daemon0.log" || fail "GPU 0's log does not name b"
grep -q "pid $PID_a \|pid $PID_c " "$T/daemon0.log" && fail "GPU 0's log names a or c"
grep -q "pid $PID_b " "$T/daemon1.log" && fail "GPU 1's log names b"
pass "each client joined its physical GPU's daemon (the shim's lines and the daemons' logs)"

# ---- budget ----------------------------------------------------------------------------------
"$MSCHEDD" --socket "$T/hand.sock" --log-level info || fail "a daemon by hand did not start"
PIDS+=("$(head -n 1 "$T/hand.sock.lock")")
"$MSCHED" status --socket "$T/hand.sock" | grep -q "of 920 MiB budget" ||
    fail "by hand: $("$MSCHED" status --socket "$T/hand.sock")"
grep -q "budget 920MiB: 90 % of the GPU's 1GiB" "$T/hand.sock.log" || fail "by hand: no budget line"
kill "$(head -n 1 "$T/hand.sock.lock")"

mkdir -m 700 "$T/run2"
out=$(XDG_RUNTIME_DIR="$T/run2" CUDA_VISIBLE_DEVICES=1 "$MSCHED" run --verbose -- true 2>&1) ||
    fail "msched run: $out"
grep -q "started mschedd on $T/run2/msched/gpu-$H1.sock for GPU-$H1" <<<"$out" ||
    fail "msched run under CUDA_VISIBLE_DEVICES=1 did not start GPU 1's daemon: $out"
st=$(XDG_RUNTIME_DIR="$T/run2" "$MSCHED" status --gpu 1) || fail "no gpu1.sock in run2: $(ls -l "$T/run2/msched")"
PIDS+=("$(sed -n 's/.*mschedd pid \([0-9]*\).*/\1/p' <<<"$st")")
grep -q "^msched: GPU 1,.* of 920 MiB budget" <<<"$(tr '\n' ' ' <<<"$st")" ||
    fail "msched run's daemon: $st"
[ -e "$T/run2/msched/gpu0.sock" ] && fail "msched run's daemon linked gpu0.sock (the program's numbering)"
kill "$(sed -n 's/.*mschedd pid \([0-9]*\).*/\1/p' <<<"$st")"

MSCHED_REAL_LIBCUDA=$T/none.so "$MSCHEDD" --socket "$T/nodrv.sock" --log-level info ||
    fail "a daemon without a driver did not start"
PIDS+=("$(head -n 1 "$T/nodrv.sock.lock")")
"$MSCHED" status --socket "$T/nodrv.sock" | grep -q "of 16.0 GiB budget" ||
    fail "without a driver: $("$MSCHED" status --socket "$T/nodrv.sock")"
kill "$(head -n 1 "$T/nodrv.sock.lock")"
pass "default budget: 90 % of the GPU's memory by hand and from msched run (GPU 1's daemon, gpu1.sock); 16 GiB without a driver"

# ---- stop ------------------------------------------------------------------------------------
kill -TERM "$DAEMON0"
wait "$DAEMON0"
[ -e "$D/gpu-$H0.sock" ] && fail "GPU 0's socket left behind"
[ -L "$D/gpu0.sock" ] && fail "gpu0.sock left behind"
[ -L "$D/gpu1.sock" ] || fail "gpu1.sock went with GPU 0's daemon"
"$MSCHED" status --gpu 1 >/dev/null || fail "GPU 1's daemon stopped answering"
pass "SIGTERM removes the daemon's socket and its link, and only its own"
for f in "$T"/daemon*.log; do
    grep -E "invariant violated| error: |Sanitizer|runtime error" "$f" && fail "$f reports an error"
done
true
