"""rtbe.py rt|be PAD_GIB SECONDS [INTERVAL_MS] - the two processes of the RT+BE experiment
(a latency-critical inference service next to a best-effort job; section 7.5 of the MSched paper).

rt  ResNet152 inference (torchvision, random weights, no download), batch 1, requests arriving
    open-loop every INTERVAL_MS (default 200): request i is due at start + i * INTERVAL_MS and,
    if the previous one is still running, waits for it; its latency runs from when it was due
    to when its result is on the host, so queueing behind a slow request counts. Each request
    also reads a PAD_GIB state buffer (standing for the service's other models, caches or
    features), so the process holds PAD_GIB more device memory that every request touches.
be  VGG19 inference, batch 32, back to back, each pass also reading its own PAD_GIB buffer.

Both fill their buffer with int32 ones once and check its sum on every request or pass (row
sums first, so the reduction allocates no copy of the buffer), so data
lost or corrupted while the memory is moved is counted ("mismatches"). After one warm-up
request or pass the loop runs SECONDS of wall time and prints one JSON line: for rt the latency
percentiles in milliseconds, requests and requests per second, and "slow": [due time (Unix
seconds), latency ms] of each request over 500 ms; for be images per second. Both
carry "tasks_per_s", so bench/micro/run_sweep.sh's tools read them."""
import json
import sys
import time

import torch
import torchvision

if len(sys.argv) < 4 or sys.argv[1] not in ("rt", "be"):
    sys.exit("usage: rtbe.py rt|be PAD_GIB SECONDS [INTERVAL_MS]")
role, pad_gib, seconds = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
interval = float(sys.argv[4]) / 1000 if len(sys.argv) > 4 else 0.2
if pad_gib < 0 or seconds <= 0 or interval <= 0:
    sys.exit("rtbe.py: PAD_GIB must be >= 0, SECONDS and INTERVAL_MS positive")
torch.manual_seed(0)
if role == "rt":
    model, batch = torchvision.models.resnet152(weights=None), 1
else:
    model, batch = torchvision.models.vgg19(weights=None), 32
model = model.cuda().eval()
x = torch.randn(batch, 3, 224, 224, device="cuda")
ROW = 1024
rows = max(1, int(pad_gib * 2**30) // (4 * ROW))
pad = torch.ones(rows, ROW, dtype=torch.int32, device="cuda")
want = rows * ROW
mismatches = 0


def step():
    """One request (rt) or pass (be): forward, read the whole pad, wait for both."""
    global mismatches
    with torch.no_grad():
        out = model(x)
        # row sums in int32 (no int64 copy of the pad), then the small vector in int64
        s = pad.sum(dim=1, dtype=torch.int32).sum(dtype=torch.int64)
    got = int(s.item())  # synchronizes
    if got != want:
        mismatches += 1
    return out


step()
torch.cuda.synchronize()
t0 = time.time()
if role == "rt":
    lat, slow, i = [], [], 0
    while True:
        due = t0 + i * interval
        now = time.time()
        if due - t0 >= seconds:
            break
        if now < due:
            time.sleep(due - now)
        step()
        lat.append(time.time() - due)
        if lat[-1] > 0.5:  # a tail request: when it was due (wall clock) and how long it took
            slow.append([round(due, 3), round(1000 * lat[-1], 1)])
        i += 1
    el = time.time() - t0
    lat.sort()

    def pct(p):
        return round(1000 * lat[min(len(lat) - 1, int(p / 100 * len(lat)))], 3)

    print(json.dumps({"program": "rtbe", "role": "rt", "model": "resnet152", "batch": batch,
                      "pad_gib": pad_gib, "interval_ms": round(1000 * interval, 3),
                      "requests": len(lat), "p50_ms": pct(50), "p90_ms": pct(90),
                      "p99_ms": pct(99), "max_ms": round(1000 * lat[-1], 3),
                      "mean_ms": round(1000 * sum(lat) / len(lat), 3),
                      "tasks_per_s": round(len(lat) / el, 3),
                      "max_reserved_bytes": torch.cuda.max_memory_reserved(),
                      "mismatches": mismatches, "slow": slow}), flush=True)
else:
    n = 0
    while time.time() - t0 < seconds:
        step()
        n += 1
    el = time.time() - t0
    print(json.dumps({"program": "rtbe", "role": "be", "model": "vgg19", "batch": batch,
                      "pad_gib": pad_gib, "passes": n, "seconds": round(el, 3),
                      "tasks_per_s": round(n * batch / el, 3),
                      "max_reserved_bytes": torch.cuda.max_memory_reserved(),
                      "mismatches": mismatches}), flush=True)
