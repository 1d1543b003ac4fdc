"""dnn_calibrate.py [BATCH...] - device memory of workload B's models against batch size.

For each model of bench/workloads/dnn.py and each batch size (default 8 32 128 256): build the
model (random weights), run two inference passes, and print one JSON line with the most device
memory PyTorch's caching allocator reserved (what a process of that batch holds on the GPU),
and the time per pass. dnn.py's --gib mode sizes batches from a straight-line fit of these
numbers (footprint = fixed + per_image * batch)."""
import json
import sys
import time

import torch

sys.argv = [sys.argv[0]] + (sys.argv[1:] or ["8", "32", "128", "256"])
batches = [int(b) for b in sys.argv[1:]]
sys.path.insert(0, __file__.rsplit("/", 1)[0])
from dnn_models import MODELS  # noqa: E402

for name, (build, side) in MODELS.items():
    for b in batches:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        model = build(weights=None).cuda().eval()
        x = torch.randn(b, 3, side, side, device="cuda")
        with torch.no_grad():
            model(x)
            torch.cuda.synchronize()
            t = time.time()
            model(x)
            torch.cuda.synchronize()
        print(json.dumps({"model": name, "batch": b,
                          "max_reserved_bytes": torch.cuda.max_memory_reserved(),
                          "pass_s": round(time.time() - t, 4)}), flush=True)
        del model, x
