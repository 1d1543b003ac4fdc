"""compat.py - what the compatibility programs (bench/compat/*.py) share.

Every program ends by calling finish(), which prints, in this order:

    FOOTPRINT_MIB <n>      device memory the program's framework held at most (MiB, rounded up):
                           torch.cuda.max_memory_reserved(), CuPy's pool, JAX's arena or peak;
                           run_compat.sh takes it from the native run to size the budgets
    INFO key=value ...     free-form (wall time, NVML's view of the card), for people
    RESULT <name> <sha256 hex> tol=<rtol> <v1> <v2> ...
                           the last line: the digest of the program's GPU outputs (bytes, dtype
                           and shape of every tensor it hashed) and a few summary values (float64
                           sums of outputs, losses). Two runs are identical when the digests are
                           equal; when they are not, make_matrix.py calls them close when every
                           value agrees within the stated relative tolerance (for ops that are
                           not bit-deterministic run to run, and to tell noise from corruption).

Determinism: torch programs call torch_setup() first: seeds, deterministic algorithms
(warn_only, so an op without a deterministic version warns on stderr instead of stopping the
program), cuDNN deterministic, no benchmark autotuning, no TF32. CUBLAS_WORKSPACE_CONFIG is set
before torch is imported."""
import hashlib
import math
import os
import sys
import time

T0 = time.time()
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
os.environ.setdefault("PYTHONHASHSEED", "0")
_NVML = {}


def nvml_used_mib():
    """Device memory in use on GPU 0 as NVML sees it (MiB), or None. Needs no CUDA context."""
    try:
        import pynvml
        if "h" not in _NVML:
            pynvml.nvmlInit()
            _NVML["h"] = pynvml.nvmlDeviceGetHandleByIndex(0)
        return pynvml.nvmlDeviceGetMemoryInfo(_NVML["h"]).used / 2**20
    except Exception:  # noqa: BLE001 - informative only
        return None


_NVML_BASE = nvml_used_mib()


def torch_setup(seed=0):
    """Import torch with every determinism switch on; returns the module."""
    import torch
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.cuda.init()
    return torch


class Digest:
    """sha256 over tensors/arrays (dtype, shape, bytes) and plain values (repr), plus the summary
    values printed after the digest."""

    def __init__(self):
        self.h = hashlib.sha256()
        self.values = []

    def add(self, *xs):
        for x in xs:
            self._add(x)
        return self

    def _add(self, x):
        mod = type(x).__module__ or ""
        if isinstance(x, (list, tuple)):
            self.h.update(b"[")
            for y in x:
                self._add(y)
            self.h.update(b"]")
        elif mod.startswith("torch"):
            import torch
            t = x.detach().contiguous().cpu()
            self.h.update(f"{t.dtype}{tuple(t.shape)}".encode())
            self.h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
        elif mod.startswith("cupy"):
            import cupy
            self._add_np(cupy.asnumpy(x))
        elif mod.startswith("jax") or mod.startswith("jaxlib") or mod.startswith("numpy"):
            import numpy as np
            self._add_np(np.asarray(x))
        else:
            self.h.update(repr(x).encode())

    def _add_np(self, a):
        import numpy as np
        a = np.ascontiguousarray(a)
        self.h.update(f"{a.dtype}{a.shape}".encode())
        self.h.update(a.view(np.uint8).tobytes())

    def value(self, v):
        """A summary value (a float, or a 0-d tensor/array), printed and compared by tolerance."""
        self.values.append(float(v))
        return self

    def hexdigest(self):
        return self.h.hexdigest()


def tsum(t):
    """float64 sum of |t| (a torch tensor), a summary value."""
    return float(t.detach().double().abs().sum())


def mib(nbytes):
    return int(math.ceil(nbytes / 2**20))


def torch_footprint_mib():
    import torch
    return mib(torch.cuda.max_memory_reserved())


def cupy_footprint_mib(peak_bytes=0):
    """CuPy's device pool as it stands (blocks freed back to the pool stay counted) or
    peak_bytes, whichever is larger."""
    import cupy
    return mib(max(cupy.get_default_memory_pool().total_bytes(), peak_bytes))


def finish(name, digest, footprint_mib, tol=1e-5, **info):
    """Print FOOTPRINT_MIB, INFO and the RESULT line (last) and flush."""
    sys.stderr.flush()
    used = nvml_used_mib()
    info = dict(info)
    info["wall_s"] = round(time.time() - T0, 2)
    if used is not None and _NVML_BASE is not None:
        info["nvml_delta_mib"] = int(used - _NVML_BASE)
    print(f"FOOTPRINT_MIB {int(footprint_mib)}")
    print("INFO " + " ".join(f"{k}={v}" for k, v in info.items()))
    vals = " ".join(f"{v:.17g}" for v in digest.values)
    print(f"RESULT {name} {digest.hexdigest()} tol={tol:g} {vals}".rstrip(), flush=True)
