"""cuFFT through CuPy: cp.fft.fft2 / ifft2 of four 4096 x 4096 complex64 images, rfftn / irfftn
of the real parts, and a batched 1-D fft along the columns. About 2.5 GiB (CuPy's pool holds the
plans' work areas). Hashes every transform."""
import cupy as cp

from compat import Digest, cupy_footprint_mib, finish

rs = cp.random.RandomState(seed=13)
re = rs.standard_normal((4, 4096, 4096), dtype=cp.float32)
z = re + 1j * rs.standard_normal((4, 4096, 4096), dtype=cp.float32)
z = z.astype(cp.complex64)
f = cp.fft.fft2(z)
back = cp.fft.ifft2(f)
err = float(cp.abs(back - z).max())
d = Digest().add(f, back)
d.value(float(cp.abs(f).astype(cp.float64).sum()))
del f, back
r = cp.fft.rfftn(re, axes=(1, 2))
rb = cp.fft.irfftn(r, s=re.shape[1:], axes=(1, 2))
col = cp.fft.fft(z[:, :, :512], axis=1)
cp.cuda.Device().synchronize()
d.add(r, rb, col)
d.value(float(cp.abs(rb).astype(cp.float64).sum())).value(err)
finish("cupy_fft", d, cupy_footprint_mib(), roundtrip_err=err)
