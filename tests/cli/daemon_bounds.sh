#!/usr/bin/env bash
# daemon_bounds.sh - nothing a local client does makes the daemon unbounded:
#
#   idle flood     2000 connections that never say a word, reconnected as soon as the daemon
#                  closes them, for 4 s: `msched status` still answers during the flood, the
#                  idle ones are closed after hello_timeout, and the log stays small (repeated
#                  lines are rate-limited)
#   descriptors    the daemon at a small descriptor limit (ulimit -n) filled with tasks, more
#                  clients knocking: it pauses accepting instead of spinning (bounded CPU, a few
#                  log lines) and serves again once the tasks leave
#   config flood   a client sending CONFIG_SET without reading the replies is dropped
#   ghosts         tasks whose sessions closed while their processes run (their memory still
#                  charged) do not count against max_tasks
. "$(dirname "$0")/../daemon/lib.sh"
build_fake

# clients.py SOCKET MODE N SECONDS READY: N connections (MODE idle or hold: silent; hello: each
# sends HELLO) held for SECONDS; "idle" ones the daemon closes are reconnected at once; "hello"
# also keeps trying to open 50 more. Writes READY when the first N are open; prints a summary
# (closed: how many of those held at the end the daemon had closed).
MS_PROTO_VERSION=$(awk '$2 == "MS_PROTO_VERSION" { print $3 }' "$ROOT/core/proto.h")
export MS_PROTO_VERSION
cat >"$T/clients.py" <<'PY'
import os, select, socket, struct, sys, time
path, mode, n, secs, ready = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]

V = int(os.environ["MS_PROTO_VERSION"])  # core/proto.h's

def hello():
    name = b"flood"
    p = struct.pack("<HHIiIQQ", V, 0, os.getpid(), 0, 1, 0, 0) + struct.pack("<H", len(name)) + name
    return b"MSCH" + struct.pack("<HHII", V, 1, len(p), 1) + p

def conn(block=True):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.setblocking(block)  # blocking: wait while the backlog is full
    try:
        s.connect(path)
        if mode == "hello":
            s.sendall(hello())
        return s
    except OSError:
        s.close()
        return None

socks = [c for c in (conn() for _ in range(n)) if c]
open(ready, "w").write(str(len(socks)))
reconnects, extra = 0, []
end = time.time() + secs
while time.time() < end:
    if mode == "hold":
        time.sleep(0.05)
        continue
    if mode == "hello":
        if len(extra) < 50:
            c = conn(block=False)
            if c:
                extra.append(c)
        time.sleep(0.01)
        continue
    p = select.poll()
    byfd = {s.fileno(): s for s in socks}
    for fd in byfd:
        p.register(fd, select.POLLIN)
    for fd, _ in p.poll(50):
        s = byfd[fd]
        try:
            data = s.recv(4096)
        except OSError:
            data = b""
        if data:
            continue
        socks.remove(s)
        s.close()
        c = conn()
        if c:
            socks.append(c)
            reconnects += 1
closed = 0
for s in socks:
    s.setblocking(False)
    try:
        closed += s.recv(1) == b""
    except BlockingIOError:
        pass
    except OSError:
        closed += 1
print(f"opened={open(ready).read()} reconnects={reconnects} extra={len(extra)} closed={closed}")
PY

# ---- idle flood -----------------------------------------------------------------------------
# As another user when root can create one (the issue's case: someone else's flood); else as
# this user, whose own recent connections are spared by the recycling.
FLOOD=() FLOOD_FG=()
if [ "$(id -u)" -eq 0 ]; then
    chmod 711 "$T"
    chmod 644 "$T/clients.py"
    new_user flooder
    FLOOD=(as_user_bg "$flooder") FLOOD_FG=(as_user "$flooder")
fi
PY=python3
[ -x /usr/bin/python3 ] && PY=/usr/bin/python3
mkdir -m 777 "$T/fl"
start_daemon --hello-timeout 1s
[ ${#FLOOD[@]} -gt 0 ] && chmod 666 "$MSCHED_SOCKET"
"${FLOOD[@]}" "$PY" "$T/clients.py" "$MSCHED_SOCKET" idle 2000 4 "$T/fl/ready" >"$T/idle.out" 2>&1 &
PY_PID=$!
PIDS+=("$PY_PID")
for _ in $(seq 1 400); do
    [ -s "$T/fl/ready" ] && break
    sleep 0.05
done
[ -s "$T/fl/ready" ] || fail "the clients never connected: $(cat "$T/idle.out")"
log0=$(stat -c %s "$T/daemon.log")
for i in 1 2 3; do
    timeout 10 "$MSCHED" status >"$T/status.out" 2>&1 ||
        fail "msched status failed during the flood (try $i): $(cat "$T/status.out")"
    sleep 0.5
done
wait "$PY_PID"
cat "$T/idle.out"
grep -q "reconnects=[1-9]" "$T/idle.out" || fail "the daemon never closed an idle connection: $(cat "$T/idle.out")"
timeout 10 "$MSCHED" status >/dev/null 2>&1 || fail "msched status failed after the flood"
"${FLOOD_FG[@]}" "$PY" "$T/clients.py" "$MSCHED_SOCKET" hold 50 2.5 "$T/fl/ready2" >"$T/hold.out" 2>&1
grep -q "opened=50 .* closed=50" "$T/hold.out" ||
    fail "50 silent connections were not all closed by hello_timeout: $(cat "$T/hold.out")"
[ "$(metric msched_idle_connections_closed_total)" -ge 50 ] || fail "idle closes not counted"
[ "$(metric msched_connections_refused_total)" -gt 0 ] || fail "no recycled connection counted"
kill "$DAEMON"
wait "$DAEMON"
grown=$(($(stat -c %s "$T/daemon.log") - log0))
[ "$grown" -lt 100000 ] || fail "the log grew by $grown bytes during the flood"
grep -q "similar lines suppressed" "$T/daemon.log" || fail "no repeated line was suppressed"
pass "2000 idle connections: msched status answers, idle ones closed, log +$grown bytes"

# ---- descriptors ------------------------------------------------------------------------------
: >"$T/daemon.log"
rm -f "$T/ready"
old=$(ulimit -Sn)
ulimit -Sn 40
start_daemon
ulimit -Sn "$old"
python3 "$T/clients.py" "$MSCHED_SOCKET" hello 40 5 "$T/ready" >"$T/hello.out" 2>&1 &
PY_PID=$!
PIDS+=("$PY_PID")
for _ in $(seq 1 400); do
    [ -s "$T/ready" ] && break
    sleep 0.05
done
[ -s "$T/ready" ] || fail "the clients never connected"
sleep 1
ticks() { awk '{ print $14 + $15 }' "/proc/$DAEMON/stat"; }
c0=$(ticks)
sleep 3
c1=$(ticks)
hz=$(getconf CLK_TCK)
used=$(((c1 - c0) * 1000 / hz))
wait "$PY_PID"
cat "$T/hello.out"
grep -Eq "cannot accept connections|accept: Too many open files" "$T/daemon.log" ||
    fail "the daemon never ran out of descriptors"
[ "$used" -lt 600 ] || fail "the daemon used $used ms of CPU in 3 s out of descriptors"
lines=$(grep -c "accept" "$T/daemon.log")
[ "$lines" -lt 60 ] || fail "$lines log lines about accept"
for _ in $(seq 1 100); do
    "$MSCHED" status 2>/dev/null | grep -q "no tasks" && break
    sleep 0.05
done
"$MSCHED" status | grep -q "no tasks" || fail "the daemon does not serve after the tasks left"
pass "out of descriptors: $used ms of CPU in 3 s, $lines log lines, serving again afterwards"
kill "$DAEMON"
wait "$DAEMON"

# ---- config flood -----------------------------------------------------------------------------
# The smallest session_out_max, so that a sanitizer build (a reply per millisecond under
# ThreadSanitizer) fills it within the watchdog too.
start_daemon --session-out-max 64KiB
shim flooder --flood-config --timeout 30
wait_shim flooder 0 30
grep -q "dropped by the daemon" "$T/flooder.out" || fail "flooder: $(cat "$T/flooder.out")"
timeout 10 "$MSCHED" status >/dev/null || fail "msched status failed after the config flood"
pass "a client flooding CONFIG_SET without reading is dropped"
kill "$DAEMON"
wait "$DAEMON"

# ---- ghosts -------------------------------------------------------------------------------------
start_daemon --max-tasks 2 --budget 64MiB
shim g1 --chunks 4 --work 20000 --close-at run:1 --timeout 30
shim g2 --chunks 4 --work 20000 --close-at run:1 --timeout 30
for _ in $(seq 1 200); do
    [ "$("$MSCHED" status | grep -c " dropped ")" -eq 2 ] && break
    sleep 0.05
done
[ "$("$MSCHED" status | grep -c " dropped ")" -eq 2 ] ||
    fail "the closed tasks are not listed dropped: $("$MSCHED" status)"
shim third --chunks 4 --work 200
wait_shim third 0 20
grep -q "too many tasks" "$T/third.out" && fail "refused: $(cat "$T/third.out")"
[ "$(metric msched_resident_bytes)" -ge $((8 * 2097152)) ] || fail "the ghosts' memory was released"
pass "two ghosts at max_tasks 2: a new task still runs; their memory stays charged"
check_log_clean
