"""cuSOLVER through CuPy (cupy.linalg), float64: Cholesky of an 8192 x 8192 SPD matrix and the
solve with it, LU solve of a general 8192 x 8192 system with 64 right-hand sides, QR of
4096 x 2048, SVD of 2048 x 1024, eigh of 3072 x 3072, and the residuals. About 2.5 GiB.
Hashes every factor; the residuals are printed."""
import cupy as cp

from compat import Digest, cupy_footprint_mib, finish

rs = cp.random.RandomState(seed=14)
n = 8192
m = rs.standard_normal((n, n), dtype=cp.float64) / n**0.5
spd = m @ m.T + cp.eye(n, dtype=cp.float64)
L = cp.linalg.cholesky(spd)
b = rs.standard_normal((n, 64), dtype=cp.float64)
x1 = cp.linalg.solve(spd, b)
x2 = cp.linalg.solve(m + 2 * cp.eye(n, dtype=cp.float64), b)
res1 = float(cp.abs(spd @ x1 - b).max())
res2 = float(cp.abs((m + 2 * cp.eye(n, dtype=cp.float64)) @ x2 - b).max())
d = Digest().add(L, x1, x2)
del spd, L
q, r = cp.linalg.qr(m[:4096, :2048])
u, s, vt = cp.linalg.svd(m[:2048, :1024], full_matrices=False)
sym = m[:3072, :3072] + m[:3072, :3072].T
w, v = cp.linalg.eigh(sym)
cp.cuda.Device().synchronize()
d.add(q, r, u, s, vt, w, v)
d.value(float(s.sum())).value(float(w.sum())).value(float(cp.abs(x1).sum()))
finish("cupy_solver", d, cupy_footprint_mib(), tol=1e-9, res_chol=res1, res_lu=res2)
