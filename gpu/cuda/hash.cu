// hash.cu - the GPU content hash used to find chunks that were touched but not changed.
//
// Each 8-byte word is mixed with its index (so moved data hashes differently) through the
// splitmix64 finalizer and the results are summed: order-independent, so threads and blocks
// can combine with atomicAdd. Reads at HBM speed; one 64-bit result per call.
extern "C" __global__ void ms_hash64(const unsigned long long *p, unsigned long long n,
                                     unsigned long long *out)
{
    unsigned long long acc = 0;
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += stride) {
        unsigned long long x = p[i] ^ (i * 0x9E3779B97F4A7C15ull);
        x ^= x >> 30;
        x *= 0xbf58476d1ce4e5b9ull;
        x ^= x >> 27;
        x *= 0x94d049bb133111ebull;
        x ^= x >> 31;
        acc += x;
    }
    for (int o = 16; o > 0; o >>= 1)
        acc += __shfl_down_sync(0xffffffffu, acc, o);
    if ((threadIdx.x & 31) == 0)
        atomicAdd(out, acc);
}
