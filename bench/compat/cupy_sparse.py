"""cuSPARSE through CuPy (cupyx.scipy.sparse): a 1,000,000-square CSR matrix with 16 distinct
columns per row (built without duplicates, so no summing of repeated entries), SpMV A @ x,
SpMM A @ X (64 columns), the transpose to CSR, and SpGEMM B @ B of a 200,000-square one.
About 2 GiB. Hashes every result (values, indices, row pointers)."""
import cupy as cp
import cupyx.scipy.sparse as sp

from compat import Digest, cupy_footprint_mib, finish


def matrix(n, per_row, seed):
    rs = cp.random.RandomState(seed=seed)
    rows = cp.repeat(cp.arange(n, dtype=cp.int64), per_row)
    start = rs.randint(0, n, size=n, dtype=cp.int64)
    step = n // per_row
    cols = (cp.repeat(start, per_row) + cp.tile(cp.arange(per_row, dtype=cp.int64) * step, n)) % n
    key = cp.sort(rows * n + cols)  # row-major order, columns ascending within a row
    indices = (key % n).astype(cp.int32)
    indptr = cp.arange(0, n * per_row + 1, per_row, dtype=cp.int32)
    data = rs.standard_normal(n * per_row, dtype=cp.float32)
    return sp.csr_matrix((data, indices, indptr), shape=(n, n))


A = matrix(1_000_000, 16, 15)
rs = cp.random.RandomState(seed=16)
x = rs.standard_normal(A.shape[1], dtype=cp.float32)
X = rs.standard_normal((A.shape[1], 64), dtype=cp.float32)
y = A @ x
Y = A @ X
At = A.T.tocsr()
d = Digest().add(y, Y, At.data, At.indices, At.indptr)
d.value(float(cp.abs(y).astype(cp.float64).sum())).value(float(cp.abs(Y).astype(cp.float64).sum()))
del Y, X, At
B = matrix(200_000, 16, 17)
C = B @ B
C.sort_indices()
cp.cuda.Device().synchronize()
d.add(C.data, C.indices, C.indptr)
d.value(float(cp.abs(C.data).astype(cp.float64).sum())).value(int(C.nnz))
finish("cupy_sparse", d, cupy_footprint_mib(), tol=1e-5, nnz_a=int(A.nnz), nnz_c=int(C.nnz))
