"""ovh.py - what the overhead programs (bench/overhead/*.py) share: the process's age, and a
timed steady-state loop that prints the one JSON line run_overhead.sh reads.

startup_s is the time from the process's own start (the kernel's start time in /proc/self/stat,
so the interpreter's start, imports, CUDA's initialization, the model's construction and the
warm-up steps all count) to the first timed step; steady_per_s is the work done per second over
the timed loop that follows (steps synchronized with the GPU, so queued work is not counted
early). The loop runs for SECONDS (the first argument, default 10)."""
import json
import os
import statistics
import sys
import time


def process_age():
    """Seconds since this process started (Linux), or since this module was imported."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        start_ticks = int(fields[19])  # field 22 of stat(5); fields[0] is field 3
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return uptime - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return time.time() - _IMPORTED


_IMPORTED = time.time()


def seconds_arg(default=10.0):
    return float(sys.argv[1]) if len(sys.argv) > 1 else default


def steady(program, step, seconds, unit, per_step, warmup=3, sync=None, **fields):
    """Run step() warmup times, then for `seconds` of wall time; print the JSON line.
    per_step: units of work one step does (images, tokens, bytes...)."""
    if sync is None:
        import torch
        sync = torch.cuda.synchronize
    for _ in range(warmup):
        step()
    sync()
    startup = process_age()
    t0 = time.time()
    times = []
    n = 0
    while True:
        a = time.time()
        step()
        sync()
        b = time.time()
        times.append(b - a)
        n += 1
        if b - t0 >= seconds:
            break
    el = time.time() - t0
    rec = {"program": program, "startup_s": round(startup, 3), "steady_s": round(el, 3),
           "steps": n, "unit": unit, "steady_per_s": round(n * per_step / el, 3),
           "step_ms_median": round(1000 * statistics.median(times), 3),
           "step_ms_p90": round(1000 * sorted(times)[int(0.9 * (len(times) - 1))], 3)}
    try:
        import torch
        rec["max_reserved_bytes"] = torch.cuda.max_memory_reserved()
    except Exception:  # noqa: BLE001 - not a torch program
        pass
    rec.update(fields)
    print(json.dumps(rec), flush=True)
    return rec
