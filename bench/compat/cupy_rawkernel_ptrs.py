"""A CuPy RawKernel that reads and writes through a device array of device pointers: 64 separate
16 MiB arrays, their addresses in a uint64 array on the device; one kernel gathers
out[i] = sum over j of arrays[j][(i * 7 + j * 131) % n] through the table, a second scales every
array in place through it, the gather runs again. The kernels' arguments name only the table
and the output: the arrays they touch are reached through pointers in device memory. About 1.1
GiB. Hashes the outputs and every array."""
import cupy as cp
import numpy as np

from compat import Digest, cupy_footprint_mib, finish

SRC = r"""
extern "C" __global__ void gather(const float *const *tab, int nt, long long n, float *out)
{
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    float s = 0.0f;
    for (int j = 0; j < nt; j++)
        s += tab[j][(i * 7 + j * 131) % n];
    out[i] = s;
}

extern "C" __global__ void scale(float *const *tab, int nt, long long n)
{
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    for (int j = 0; j < nt; j++)
        tab[j][i] = tab[j][i] * (1.0f + 0.01f * j) - 0.5f;
}
"""
mod = cp.RawModule(code=SRC)
gather, scale = mod.get_function("gather"), mod.get_function("scale")
n, nt = 4 * 2**20, 64
rs = cp.random.RandomState(seed=18)
arrays = [rs.standard_normal(n, dtype=cp.float32) for _ in range(nt)]
tab = cp.asarray(np.array([a.data.ptr for a in arrays], dtype=np.uint64))
out1 = cp.empty(n, dtype=cp.float32)
out2 = cp.empty(n, dtype=cp.float32)
grid, block = ((n + 255) // 256,), (256,)
gather(grid, block, (tab, np.int32(nt), np.int64(n), out1))
scale(grid, block, (tab, np.int32(nt), np.int64(n)))
gather(grid, block, (tab, np.int32(nt), np.int64(n), out2))
cp.cuda.Device().synchronize()
ref = sum(a[(cp.arange(n, dtype=cp.int64) * 7 + j * 131) % n] for j, a in enumerate(arrays))
ok = bool(cp.allclose(out2, ref, rtol=1e-4, atol=1e-3))
d = Digest().add(out1, out2, arrays, ok)
d.value(float(cp.abs(out1).astype(cp.float64).sum())).value(float(cp.abs(out2).astype(cp.float64).sum()))
finish("cupy_rawkernel_ptrs", d, cupy_footprint_mib(), matches_cupy=ok)
