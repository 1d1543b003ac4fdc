"""jax_mlp.py NAME - JAX (XLA on the GPU): a jit-compiled 6-layer MLP (4096 wide, fp32, GELU,
softmax cross-entropy) trained 25 steps with plain SGD through jax.grad, then a jitted
convolution and an FFT of its input (cuDNN and cuFFT through XLA). Seeded with jax.random; no
scatter ops. About 1 GiB of arrays. The allocator is whatever the environment says:
run_compat.sh runs it as jax_prealloc (the default preallocated BFC arena, with
XLA_PYTHON_CLIENT_MEM_FRACTION so the arena is a few GiB), jax_prealloc_full (the default arena,
75 % of the card), jax_platform (XLA_PYTHON_CLIENT_ALLOCATOR=platform) and jax_noprealloc
(XLA_PYTHON_CLIENT_PREALLOCATE=false). FOOTPRINT_MIB is the arena (bytes_limit) when
preallocating, else the allocator's peak, else NVML's device-wide growth past the first op.
XLA's GPU ops are deterministic here but not promised to be: the losses are compared with a
tolerance. XLA_FLAGS defaults to --xla_gpu_autotune_level=0 (no timing-based algorithm choice)."""
import os
import sys

from compat import Digest, finish, mib, nvml_used_mib

name = sys.argv[1] if len(sys.argv) > 1 else "jax_mlp"
# XLA picks GEMM and convolution algorithms by timing them when it compiles; timings differ
# between runs (and under msched), so the pick, and the result's last bits, could too.
os.environ.setdefault("XLA_FLAGS", "--xla_gpu_autotune_level=0")
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

dev = jax.devices()[0]
assert dev.platform == "gpu", f"jax runs on {dev.platform}, not the GPU"
jnp.zeros(1).block_until_ready()
nvml0 = nvml_used_mib()
peak_nvml = [0.0]


def sample():
    u = nvml_used_mib()
    if u is not None and nvml0 is not None:
        peak_nvml[0] = max(peak_nvml[0], u - nvml0)


key = jax.random.PRNGKey(19)
W = 4096
dims = [W] * 6 + [1000]
params = []
for i in range(6):
    key, k1 = jax.random.split(key)
    params.append((jax.random.normal(k1, (dims[i], dims[i + 1]), jnp.float32) / np.sqrt(dims[i]),
                   jnp.zeros((dims[i + 1],), jnp.float32)))


def loss_fn(params, x, y):
    h = x
    for w, b in params[:-1]:
        h = jax.nn.gelu(h @ w + b)
    w, b = params[-1]
    logits = h @ w + b
    logp = jax.nn.log_softmax(logits)
    # one-hot, not take_along_axis: a gather's gradient is a scatter-add (atomics)
    return -jnp.mean(jnp.sum(logp * jax.nn.one_hot(y, logits.shape[1], dtype=logp.dtype), axis=1))


@jax.jit
def step(params, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    return [(w - 0.05 * gw, b - 0.05 * gb) for (w, b), (gw, gb) in zip(params, grads)], loss


losses = []
for i in range(25):
    key, kx, ky = jax.random.split(key, 3)
    x = jax.random.normal(kx, (2048, W), jnp.float32)
    y = jax.random.randint(ky, (2048,), 0, 1000)
    params, loss = step(params, x, y)
    losses.append(loss)
    if i % 5 == 0:
        loss.block_until_ready()
        sample()
losses = jnp.stack(losses)


@jax.jit
def conv_fft(img, ker):
    out = jax.lax.conv_general_dilated(img, ker, (1, 1), "SAME",
                                       dimension_numbers=("NCHW", "OIHW", "NCHW"))
    return out, jnp.fft.fft2(img.astype(jnp.complex64))


key, ki, kk = jax.random.split(key, 3)
img = jax.random.normal(ki, (16, 32, 256, 256), jnp.float32)
ker = jax.random.normal(kk, (64, 32, 3, 3), jnp.float32)
conv, spec = conv_fft(img, ker)
spec.block_until_ready()
sample()
d = Digest().add(losses, [p for wb in params for p in wb], conv, spec)
d.value(losses[0]).value(losses[-1]).value(float(jnp.abs(conv).astype(jnp.float32).sum()))
stats = {}
try:
    stats = dev.memory_stats() or {}
except Exception:  # noqa: BLE001 - the platform allocator may have none
    stats = {}
prealloc = os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE", "true").lower() not in ("false", "0")
platform = os.environ.get("XLA_PYTHON_CLIENT_ALLOCATOR", "") == "platform"
if prealloc and not platform and stats.get("bytes_limit", -1) > 0:
    fp, how = mib(stats["bytes_limit"]), "bytes_limit"
elif max(stats.get("peak_pool_bytes", -1), stats.get("peak_bytes_in_use", -1)) > 0:
    fp, how = mib(max(stats.get("peak_pool_bytes", -1), stats.get("peak_bytes_in_use", -1))), "peak"
else:
    fp, how = int(peak_nvml[0]), "nvml"
finish(name, d, fp, tol=1e-4, footprint_from=how, nvml_peak_mib=int(peak_nvml[0]),
       allocator=os.environ.get("XLA_PYTHON_CLIENT_ALLOCATOR", "default"),
       preallocate=prealloc, mem_fraction=os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION", "-"))
