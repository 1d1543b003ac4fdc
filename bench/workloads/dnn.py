"""dnn.py MODEL BATCH|--gib GIB SECONDS - one instance of workload B (multi-DNN): torchvision inference with
random weights (no download), one model per process.

MODEL is resnet152, vgg19, inception_v3 or densenet201 (dnn_models.py); BATCH images per forward
pass (the batch scales the footprint), or --gib GIB: the batch whose measured footprint is about
GIB GiB (dnn_models.FIT); after one warm-up pass the loop runs for SECONDS of wall time and prints
one JSON line: images per second ("tasks_per_s", so bench/micro/run_sweep.sh reads it), and the
device memory PyTorch reserved at most (to size batches to a footprint), and the loop's progress
samples (progress.py)."""
import json
import sys
import time

import torch

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from dnn_models import MODELS, batch_for  # noqa: E402
from progress import Progress, barrier  # noqa: E402

USAGE = "usage: dnn.py MODEL BATCH|--gib GIB SECONDS (MODEL: " + ", ".join(MODELS) + ")"
if len(sys.argv) < 4 or sys.argv[1] not in MODELS:
    sys.exit(USAGE)
name = sys.argv[1]
if sys.argv[2] == "--gib":
    if len(sys.argv) < 5:
        sys.exit(USAGE)
    batch, seconds = batch_for(name, float(sys.argv[3])), float(sys.argv[4])
else:
    batch, seconds = int(sys.argv[2]), float(sys.argv[3])
if batch < 1 or seconds <= 0:
    sys.exit("dnn.py: BATCH and SECONDS must be positive")
torch.manual_seed(0)
build, side = MODELS[name]
model = build(weights=None).cuda().eval()
x = torch.randn(batch, 3, side, side, device="cuda")


def task():
    with torch.no_grad():
        out = model(x)
    torch.cuda.synchronize()
    return out


task()
barrier()
n, t0, prog = 0, time.time(), Progress()
while time.time() - t0 < seconds:
    out = task()
    n += 1
    prog.tick(n * batch)
el = time.time() - t0
print(json.dumps({"program": "dnn", "model": name, "batch": batch, "passes": n,
                  "seconds": round(el, 3), "images_per_s": round(n * batch / el, 3),
                  "tasks_per_s": round(n * batch / el, 3),
                  "max_reserved_bytes": torch.cuda.max_memory_reserved(),
                  "checksum": float(out.float().sum()), **prog.fields(n * batch)}), flush=True)
