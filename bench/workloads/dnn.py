"""dnn.py MODEL BATCH SECONDS - one instance of workload B (multi-DNN): torchvision inference with
random weights (no download), one model per process.

MODEL is resnet152, vgg19, inception_v3 or densenet201; BATCH images per forward pass (the batch
scales the footprint); after one warm-up pass the loop runs for SECONDS of wall time and prints
one JSON line: images per second ("tasks_per_s", so bench/micro/run_sweep.sh reads it), and the
device memory PyTorch reserved at most (to size batches to a footprint)."""
import json
import sys
import time

import torch
import torchvision

MODELS = {
    "resnet152": (torchvision.models.resnet152, 224),
    "vgg19": (torchvision.models.vgg19, 224),
    "inception_v3": (lambda **kw: torchvision.models.inception_v3(aux_logits=False,
                                                                   init_weights=True, **kw), 299),
    "densenet201": (torchvision.models.densenet201, 224),
}

if len(sys.argv) < 4 or sys.argv[1] not in MODELS:
    sys.exit("usage: dnn.py resnet152|vgg19|inception_v3|densenet201 BATCH SECONDS")
name, batch, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
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
n, t0 = 0, time.time()
while time.time() - t0 < seconds:
    out = task()
    n += 1
el = time.time() - t0
print(json.dumps({"program": "dnn", "model": name, "batch": batch, "passes": n,
                  "seconds": round(el, 3), "images_per_s": round(n * batch / el, 3),
                  "tasks_per_s": round(n * batch / el, 3),
                  "max_reserved_bytes": torch.cuda.max_memory_reserved(),
                  "checksum": float(out.float().sum())}), flush=True)
