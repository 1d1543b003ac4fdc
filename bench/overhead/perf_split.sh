#!/usr/bin/env bash
# bench/overhead/perf_split.sh OUT [--system engine|daemon|observe] [--budget SIZE] [--freq HZ]
#                              -- PROGRAM [ARGS...]
#
# Where a program's CPU time goes natively and under msched, by shared object: the question the
# overhead benchmark's ratios leave open for a launch-bound program (issue 25's Llama decode,
# 0.88 of native). Runs PROGRAM twice under `perf record -g` (HZ samples a second, default 999):
# natively, then under msched as --system says:
#   engine   `msched run --no-daemon --budget SIZE` (the engine alone; default 70GiB, room)
#   daemon   `msched run` joined to an mschedd of --budget started on a private socket
#   observe  `msched run --no-daemon` (interposition only)
# and writes OUT/native.txt and OUT/msched.txt: the share of samples of every shared object
# (full paths, perf report -v: libmsched's libcuda.so.1 and the driver's are told apart) and the 40 hottest
# symbols, and OUT/split.txt: samples per object side by side, with libmsched's own share.
# The program's output goes to OUT/native.out and OUT/msched.out. Needs perf (linux-perf) and
# permission to record (perf_event_paranoid <= 2 for one's own processes); says so and exits 2
# otherwise. Sampling is statistical: compare shares, not single samples.
set -u
usage() {
    sed -n '2,3p' "$0" | sed 's/^# //' >&2
    exit 2
}
[ $# -ge 1 ] || usage
OUT=$1
shift
SYSTEM=engine BUDGET=70GiB FREQ=999
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    case $1 in
    --system) SYSTEM=${2:-}; shift 2 ;;
    --budget) BUDGET=${2:-}; shift 2 ;;
    --freq) FREQ=${2:-}; shift 2 ;;
    *) echo "perf_split.sh: unknown option $1" >&2; usage ;;
    esac
done
[ "${1:-}" = "--" ] && [ $# -ge 2 ] || usage
shift
case $SYSTEM in engine | daemon | observe) ;; *)
    echo "perf_split.sh: --system must be engine, daemon or observe, not '$SYSTEM'" >&2
    exit 2
    ;;
esac
command -v perf >/dev/null || {
    echo "perf_split.sh: no perf on this machine (Debian: linux-perf)" >&2
    exit 2
}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-build}
MSCHED=$ROOT/$BUILD/bin/msched
[ -x "$MSCHED" ] || {
    echo "perf_split.sh: no $MSCHED (run make first)" >&2
    exit 2
}
mkdir -p "$OUT" || exit 2
perf record -q -F "$FREQ" -o "$OUT/probe.data" -- true 2>"$OUT/probe.err" || {
    echo "perf_split.sh: perf cannot record here: $(head -1 "$OUT/probe.err")" >&2
    exit 2
}
rm -f "$OUT/probe.data" "$OUT/probe.err"

record() { # NAME COMMAND...: perf record the command; its output in OUT/NAME.out
    local name=$1
    shift
    local t0=$SECONDS
    "$@" >"$OUT/$name.out" 2>&1
    local rc=$?
    echo "$name: exit $rc in $((SECONDS - t0)) s"
    return $rc
}
report() { # NAME: OUT/NAME.txt from OUT/NAME.data
    local d=$OUT/$1.data
    {
        echo "# samples by shared object"
        perf report -i "$d" --no-children --sort dso -v --stdio 2>/dev/null | grep -E '^ +[0-9.]+%'
        echo "# the 40 hottest symbols"
        perf report -i "$d" --no-children --sort dso,sym --stdio 2>/dev/null | grep -E '^ +[0-9.]+%' |
            head -40
    } >"$OUT/$1.txt"
    perf report -i "$d" --no-children --sort dso -v --stdio -F overhead,sample,dso 2>/dev/null |
        grep -E '^ +[0-9.]+%' >"$OUT/$1.dso"
    rm -f "$d"
}

rc=0
record native perf record -q -g -F "$FREQ" -o "$OUT/native.data" -- "$@" || rc=1
DPID=
case $SYSTEM in
engine) record msched "$MSCHED" run --no-daemon --budget "$BUDGET" -- \
    perf record -q -g -F "$FREQ" -o "$OUT/msched.data" -- "$@" || rc=1 ;;
observe) record msched "$MSCHED" run --no-daemon -- \
    perf record -q -g -F "$FREQ" -o "$OUT/msched.data" -- "$@" || rc=1 ;;
daemon)
    SOCK=$(mktemp -d /tmp/msched-perf.XXXXXX)/gpu0.sock
    "$ROOT/$BUILD/bin/mschedd" --foreground --socket "$SOCK" --budget "$BUDGET" \
        >"$OUT/daemon.log" 2>&1 &
    DPID=$!
    for _ in $(seq 1 100); do
        MSCHED_SOCKET=$SOCK "$MSCHED" status >/dev/null 2>&1 && break
        sleep 0.05
    done
    MSCHED_SOCKET=$SOCK record msched "$MSCHED" run -- \
        perf record -q -g -F "$FREQ" -o "$OUT/msched.data" -- "$@" || rc=1
    kill "$DPID" 2>/dev/null
    wait "$DPID" 2>/dev/null
    rm -rf "$(dirname "$SOCK")"
    ;;
esac
for n in native msched; do
    [ -s "$OUT/$n.data" ] && report "$n"
done
[ -s "$OUT/native.dso" ] && [ -s "$OUT/msched.dso" ] || {
    echo "perf_split.sh: a run left no samples (see $OUT/*.out)" >&2
    exit 1
}
python3 - "$OUT/native.dso" "$OUT/msched.dso" "$ROOT/$BUILD/lib/msched" <<'PY' | tee "$OUT/split.txt"
import sys
def load(p):
    d = {}
    for line in open(p):
        f = line.split()
        if len(f) >= 3:
            d[f[2]] = d.get(f[2], 0) + int(f[1])
    return d
nat, ms, shimdir = load(sys.argv[1]), load(sys.argv[2]), sys.argv[3]
tn, tm = sum(nat.values()), sum(ms.values())
print(f"samples: native {tn}, msched {tm} ({tm / tn:.3f}x)")
shim = sum(v for k, v in ms.items() if k.startswith(shimdir))
print(f"libmsched's own: {shim} samples, {100 * shim / tm:.1f} % of the msched run")
print(f"{'native':>8} {'msched':>8}  object")
for k in sorted(set(nat) | set(ms), key=lambda k: -(ms.get(k, 0) + nat.get(k, 0)))[:25]:
    print(f"{nat.get(k, 0):8d} {ms.get(k, 0):8d}  {k}")
PY
exit $rc
