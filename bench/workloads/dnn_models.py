"""dnn_models.py - workload B's four torchvision models (random weights, no download) and the
straight-line footprint fit per model that dnn.py --gib uses.

MODELS: name -> (constructor, input side in pixels). FIT: name -> (fixed bytes, bytes per image)
of the device memory PyTorch reserves for inference at a batch size (measured on the H200 by
dnn_calibrate.py; raw lines in bench/results/gpu/2026-12-02-dnn-calibrate.jsonl; VGG19 from
the workload's own runs, below)."""
import torchvision

MODELS = {
    "resnet152": (torchvision.models.resnet152, 224),
    "vgg19": (torchvision.models.vgg19, 224),
    "inception_v3": (lambda **kw: torchvision.models.inception_v3(aux_logits=False,
                                                                   init_weights=True, **kw), 299),
    "densenet201": (torchvision.models.densenet201, 224),
}

# Least-squares fit of bench/results/gpu/2026-12-02-dnn-calibrate.jsonl (batches 8, 64, 128;
# within 1 % of every point). Larger batches are extrapolated, which holds within 2 % for
# three models at batches 240-911 (the `ref` runs' max_reserved_bytes in
# bench/results/gpu/paper/B-*.jsonl) but not for VGG19: it reserved 1.44-1.47x its
# extrapolation at batches 112, 153 and 236, so its fit is those three points' (within 0.01 %).
FIT = {
    "resnet152": (328619995, 13777295),
    "vgg19": (609644258, 77677911),
    "inception_v3": (145224673, 26248525),
    "densenet201": (138579555, 15065524),
}


def batch_for(name, gib):
    """The batch whose predicted footprint is closest to gib GiB (at least 1)."""
    if name not in FIT:
        raise SystemExit(f"dnn: no footprint fit for {name}: run dnn_calibrate.py first")
    fixed, per = FIT[name]
    return max(1, round((gib * 2**30 - fixed) / per))
