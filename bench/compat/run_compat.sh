#!/usr/bin/env bash
# bench/compat/run_compat.sh OUT [--mode M]... [--only NAMES]... [--list] [--from DIR]...
#                            [--resume] [--repeat N] [--deadline S] [--timeout S] [--trios G]
#
# The compatibility suite (issue 24 item 5) on a GPU machine: every program of
# bench/compat/programs.txt run four ways, each a mode:
#   native  without msched; its FOOTPRINT_MIB line sizes the other modes' budgets
#   big     msched run --no-daemon --budget max(2 x footprint, footprint + 2 GiB) (capped at
#           --cap-mib, default 130 GiB): the engine on, nothing short
#   half    msched run --no-daemon --budget footprint / 2: alone, oversubscribed
#   trio    groups of three programs at once, each under `msched run` joined to one mschedd on a
#           private socket (MSCHED_SOCKET) whose budget is the group's summed footprints / 1.5
#           (150 %); groups are consecutive programs of the list (the last one filled from the
#           start), or --trios 'a,b,c;d,e,f'
# Without --mode, all four, in that order. --only a,b,c narrows the programs; --list prints them.
# Native footprints (and wall times, to plan the deadline) come from native records in OUT, in
# each --from DIR or file, and by default in bench/results/gpu/compat/ if it exists: run the
# native mode first, keep its JSONL there (or pass it with --from), then the other modes.
# --resume skips (program, mode) pairs that already have a record in OUT or in a --from given on
# the command line; never for records of the default directory (the published matrix's runs;
# COMPAT_DEFAULT_FROM names another).
# Each call should fit the device's 10 minutes: --deadline S (default 540, 0 = none) starts no
# run that is not expected to end by S seconds (its native wall time times 1.5 big, 3 half,
# 2 x the group's sum trio; 60 s when unknown) and cuts a run at S + 30 s; what was left out is
# printed as the command that continues it (exit status 3). --timeout S replaces the per-run
# limits (native 180, big 300, half 420, trio 540 s). --repeat N runs each program N times in
# each mode (native twice shows which programs are not bit-deterministic by themselves).
# MSCHED, MSCHEDD: the binaries (default build/bin/...); COMPAT_MSCHED_ARGS adds options to
# every `msched run` (e.g. --verbose), COMPAT_MSCHEDD_ARGS to the trio's mschedd.
#
# Output (at most five files, so a device call brings them all back):
#   OUT/compat-<mode>-<UTC stamp>.jsonl  one record per run (bench/compat/run_compat.py says what)
#   OUT/compat-logs-<UTC stamp>.tgz      every run's stdout and stderr, each trio's mschedd log
# bench/compat/make_matrix.py reads the JSONL files and writes docs/compatibility.md.
# Rough times on an H200 (to be measured): native 5-6 min for all 25; big about the same plus the
# engine's overhead; half and trio depend on the engine; use --only to split them.
# Run from anywhere; builds what it needs first (nvcc for the .cu programs; make for msched).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
export PYTHONUNBUFFERED=1 CUBLAS_WORKSPACE_CONFIG=:4096:8

need_msched=0 list=0 prev=""
for a in "$@"; do
    case $a in
    --list) list=1 ;;
    big | half | trio) [ "$prev" = --mode ] && need_msched=1 ;;
    --mode=big | --mode=half | --mode=trio) need_msched=1 ;;
    esac
    prev=$a
done
# no --mode at all: every mode, msched included
case " $* " in *" --mode"*) ;; *) need_msched=1 ;; esac
[ "$list" = 1 ] && exec python3 bench/compat/run_compat.py "$@"

BIN=$ROOT/build/compat
mkdir -p "$BIN"
ARCH=${NVCC_ARCH:--arch=sm_90}
for src in bench/compat/*.cu; do
    name=$(basename "$src" .cu)
    exe=$BIN/$name
    if [ ! -x "$exe" ] || [ "$src" -nt "$exe" ] || [ bench/compat/compat_cu.h -nt "$exe" ]; then
        # shellcheck disable=SC2086
        nvcc -O2 -std=c++17 $ARCH -o "$exe" "$src" -lcuda || {
            echo "run_compat.sh: nvcc failed on $src" >&2
            exit 1
        }
    fi
done
if [ "$need_msched" = 1 ]; then
    make -s -j"$(nproc)" build/bin/msched build/bin/mschedd shim >/dev/null || {
        echo "run_compat.sh: building msched failed" >&2
        exit 1
    }
fi
exec python3 bench/compat/run_compat.py "$@" --bindir "$BIN"
