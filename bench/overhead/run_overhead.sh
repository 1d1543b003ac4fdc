#!/usr/bin/env bash
# bench/overhead/run_overhead.sh OUT [--rounds N] [--seconds S] [--only P,...]
#                                [--systems S,...] [--trio yes|no|only] [--trio-rounds N]
#                                [--trio-seconds S] [--budget SIZE] [--deadline S]
#                                [--summary RAW...]
#
# The overhead benchmark (issue 25 item 4) on a GPU machine: what msched costs when memory fits.
# Programs (--only): train (HF GPT-2 small training, about 6 GiB), infer (torchvision
# ResNet-50 inference), conv (a cuDNN convolution net trained, over 10 GiB), llama
# (bench/workloads/llama_onebuf.py: a Llama-shaped decode, 6.8 GiB of weights in one buffer and
# a 1 GiB KV pool), cuda (bench/overhead/ovh_cuda.cu, a plain CUDA C program). Each prints its
# start-up time (process start to the first timed step) and its steady-state throughput over
# S seconds (default 10) separately; the runner also takes each process's whole wall time.
# Systems (--systems, default native,msched), run interleaved: each round runs every program
# under every system, the systems' order rotated from round to round (--rounds, default 3):
#   native    the program alone, no msched
#   msched    `msched run -- PROGRAM` joined to one mschedd that the runner starts on a private
#             socket with --budget (default 126GiB, nothing oversubscribed) and keeps for the call
#   auto      `msched run -- PROGRAM` in a fresh, empty XDG_RUNTIME_DIR: msched starts its daemon
#             on demand, as on a fresh machine (issue 25 item 1)
#   nodaemon  `msched run --no-daemon -- PROGRAM` (the shim alone, observing)
#   engine    `msched run --no-daemon --budget SIZE -- PROGRAM` (the engine alone, room to spare)
# Then (--trio yes, the default; only: nothing else) train, conv and llama at once under each
# system for --trio-seconds (default 20), --trio-rounds times (default 1).
# A call stops starting runs that would not end by --deadline S (default 540, 0 = none) and
# exits 3 naming what it left out. Results: OUT/overhead-<UTC stamp>.jsonl (one line per run;
# bench/overhead/run_overhead.py says what) and OUT/overhead-logs-<stamp>.tgz (every run's
# output, the daemon's log). --summary RAW... prints each program's and system's medians (wall,
# start-up, steady throughput) and their ratios to native, and runs nothing.
# Time: a run is about S plus its start-up (5-20 s); one round of all five programs under two
# systems is about 3 minutes at S=10, so a 10-minute call holds 2 rounds, or 3 with --only.
# Run from anywhere; builds what it needs first.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
export PYTHONUNBUFFERED=1
case " $* " in *" --summary "*) exec python3 bench/overhead/run_overhead.py "$@" ;; esac
BIN=$ROOT/build/overhead
mkdir -p "$BIN"
if [ ! -x "$BIN/ovh_cuda" ] || [ bench/overhead/ovh_cuda.cu -nt "$BIN/ovh_cuda" ]; then
    nvcc -O2 -std=c++17 "${NVCC_ARCH:--arch=sm_90}" -o "$BIN/ovh_cuda" bench/overhead/ovh_cuda.cu || {
        echo "run_overhead.sh: nvcc failed" >&2
        exit 1
    }
fi
make -s -j"$(nproc)" build/bin/msched build/bin/mschedd shim >/dev/null || {
    echo "run_overhead.sh: building msched failed" >&2
    exit 1
}
exec python3 bench/overhead/run_overhead.py "$@" --bindir "$BIN"
