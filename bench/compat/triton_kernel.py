"""Triton @triton.jit kernels whose outputs are fresh torch.empty_like / torch.empty tensors:
a fused element-wise kernel over 128 Mi floats, a row softmax, and a tiled fp16 matrix product
with fp32 accumulation (one program per output tile: no atomics). About 2.2 GiB. Hashes every
output and checks each against PyTorch (the comparison's outcome is hashed too)."""
import triton
import triton.language as tl

from compat import Digest, finish, torch_footprint_mib, torch_setup, tsum

torch = torch_setup()


@triton.jit
def fma_sin(x_ptr, y_ptr, out_ptr, n, scale, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x * scale + tl.sin(y), mask=mask)


@triton.jit
def row_softmax(x_ptr, out_ptr, cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < cols
    x = tl.load(x_ptr + row * stride + offs, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(out_ptr + row * stride + offs, e / tl.sum(e, axis=0), mask=mask)


@triton.jit
def matmul(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pm = tl.program_id(0)
    pn = tl.program_id(1)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :])
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


gen = torch.Generator(device="cuda").manual_seed(6)
n = 128 * 2**20
x = torch.randn(n, device="cuda", generator=gen)
y = torch.randn(n, device="cuda", generator=gen)
out = torch.empty_like(x)
fma_sin[(triton.cdiv(n, 1024),)](x, y, out, n, 0.5, BLOCK=1024)

s_in = torch.randn(8192, 4000, device="cuda", generator=gen)
s_out = torch.empty_like(s_in)
row_softmax[(s_in.shape[0],)](s_in, s_out, s_in.shape[1], s_in.stride(0), BLOCK=4096)

M = N = K = 4096
a = torch.randn(M, K, device="cuda", generator=gen).half()
b = torch.randn(K, N, device="cuda", generator=gen).half()
c = torch.empty(M, N, device="cuda", dtype=torch.float32)
matmul[(M // 128, N // 128)](a, b, c, M, N, K, BM=128, BN=128, BK=32)
torch.cuda.synchronize()

checks = [
    bool(torch.allclose(out, x * 0.5 + torch.sin(y), rtol=1e-5, atol=1e-5)),
    bool(torch.allclose(s_out, torch.softmax(s_in, dim=1), rtol=1e-4, atol=1e-6)),
    bool(torch.allclose(c, a.float() @ b.float(), rtol=1e-2, atol=1e-1)),
]
d = Digest().add(out, s_out, c, checks)
d.value(tsum(out)).value(tsum(s_out)).value(tsum(c))
finish("triton_kernel", d, torch_footprint_mib(), checks="/".join(map(str, checks)))
