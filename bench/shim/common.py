"""Shared helpers of the shim identity programs: determinism switches, digests, kernel counts.

Each program prints one JSON line: {"program": ..., "digest": sha256 of its outputs,
"gpu_kernels": kernels the GPU ran according to torch.profiler (CUPTI), ...}. The runner
compares the digest with and without the shim and the kernel count with the shim's own count.
"""
import hashlib
import json
import os
import sys


BASE = {}


def device_used():
    """Device memory in use on the GPU (total - free, cuMemGetInfo), in bytes."""
    import torch
    free, total = torch.cuda.mem_get_info()
    return total - free


def deterministic():
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    import torch
    # The context exists from here on; what it holds before any allocation is its fixed part.
    BASE["device_used"] = device_used()
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return torch


def digest(*tensors):
    h = hashlib.sha256()
    for t in tensors:
        if hasattr(t, "detach"):
            t = t.detach().contiguous().cpu()
            h.update(str(t.dtype).encode())
            h.update(t.view(-1).view(dtype=__import__("torch").uint8).numpy().tobytes())
        else:
            h.update(repr(t).encode())
    return h.hexdigest()


def shim_counter(name):
    """A libmsched counter (None when the shim is not loaded)."""
    import ctypes
    try:
        lib = ctypes.CDLL("libcuda.so.1")  # the object already loaded under that SONAME
        f = lib.ms_shim_counter
    except (OSError, AttributeError):
        return None
    f.restype = ctypes.c_uint64
    f.argtypes = [ctypes.c_char_p]
    return f(name.encode())


LAST = {}


def profiled(fn):
    """Run fn() under torch.profiler; return (result, number of GPU kernels and memsets/copies).
    The shim's own launch count over the same region is left in LAST["shim_launches"]."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        torch.cuda.synchronize()
        before = shim_counter("launches")
        out = fn()
        torch.cuda.synchronize()
        after = shim_counter("launches")
    LAST["shim_launches"] = None if before is None else after - before
    kernels = 0
    other = 0
    for e in prof.events():
        dt = getattr(e, "device_type", None)
        if dt is None or "CUDA" not in str(dt):
            continue
        name = e.name or ""
        if name.startswith("Memcpy") or name.startswith("Memset"):
            other += 1
        else:
            kernels += 1
    return out, kernels, other


def report(program, **fields):
    fields = {"program": program, **fields, **LAST}
    live = shim_counter("live_bytes")
    if live is not None:
        import torch
        fields["shim_live_bytes"] = live
        fields["torch_reserved_bytes"] = torch.cuda.memory_reserved()
    if "device_used" in BASE:
        # Device memory the process gained since its context was created (the GPU is not
        # shared during these runs): what the shim's live bytes are compared with.
        fields["device_used_delta_bytes"] = device_used() - BASE["device_used"]
    print(json.dumps(fields), flush=True)
    sys.stdout.flush()
