// hostmap_probe.cu - what GPU kernels, copies, memsets and atomics do on memory that is a
// host-located VMM handle, against a device-located VMM handle of the same size mapped the
// same way.
//
// Design. Both backings are made with the driver's virtual memory calls, exactly as msched's
// engine would make them: cuMemCreate (PINNED; location HOST for the host handle, DEVICE for
// the device handle; size rounded up to both handles' minimum granularity), cuMemAddressReserve,
// cuMemMap, cuMemSetAccess (location DEVICE = the probed device, READWRITE). The probe then runs
// the same tests over each mapping, one after the other, on one non-blocking stream:
//
//   write_seq   coalesced 16-byte stores of the pattern word[i] = i            (GB/s)
//   read_seq    coalesced 16-byte loads, summed; the sum is checked exactly    (GB/s)
//   read_random 4-byte loads at a hash of the access number; sum checked       (accesses/s)
//   read_stride 4-byte loads 4 KiB and 64 KiB apart, the in-stride offset moved
//               by 256 bytes each round so no sector is read twice; sum checked (accesses/s)
//   memset_d32, memset_d8   cuMemsetD32Async / cuMemsetD8Async over the whole mapping; a few
//               words copied back and compared                                  (GB/s)
//   memcpy_dtod cuMemcpyDtoDAsync host->device, device->host and device->device (the
//               baseline, a second device mapping); a few words compared        (GB/s)
//   remap       per 2 MiB and per 64 MiB chunk: unmap the host handle at an address, map a
//               device handle there, set access (and back), timed on the host; after each
//               remap a kernel reads the chunk's first, middle and last words and they must
//               be the new backing's contents (a stale GPU translation would show here)
//   atomic_*    atomicAdd int / unsigned long long and atomicCAS (as a CAS-increment loop),
//               device scope and system scope (_system), on 4 hot counters 128 bytes apart
//               (contended) and on up to 1 Mi counters 128 bytes apart (spread); the counters
//               are copied back by the copy engine and must be exactly the number of
//               increments times the increment (the 64-bit increment is 2^32+1, so a carry
//               lost between the halves shows)
//
// Timing: CUDA events around the work on the stream; each test runs once untimed-in-the-median
// (reported as first_ms: it includes first-touch costs) and then --runs times, and the median
// is reported. A test whose first run takes over 2 s runs only once more, and no new test starts
// after 100 s, so the whole probe stays well under two minutes even if some path is very slow.
//
// Output: one human-readable line per measurement on stdout, and (with --json FILE) one JSON
// object per line: {"probe":"hostmap","test":...,"backing":"host"|"device","bytes":...,
// "gbps":...,"ops_per_s":...,"ok":true|false,...}; fields that do not apply are null. The first
// JSON line (test "env") describes the device and the granularities. A CUDA error stops the
// probe with a message naming the call (and a JSON line with test "error"), exit status 2; a
// wrong result is a FAIL line, ok=false, and exit status 1. No managed memory is allocated.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

static FILE *g_json;
static int g_failures;
static int g_records;

static void json_raw(const std::string &line)
{
    if (g_json == nullptr)
        return;
    fprintf(g_json, "%s\n", line.c_str());
    fflush(g_json);
}

static std::string json_escape(const char *s)
{
    std::string o;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            o += '\\';
            o += (char)c;
        } else if (c < 0x20) {
            char b[8];
            snprintf(b, sizeof b, "\\u%04x", c);
            o += b;
        } else {
            o += (char)c;
        }
    }
    return o;
}

[[noreturn]] static void fatal(const char *file, int line, const char *call, const char *name,
                               const char *msg)
{
    fprintf(stderr, "hostmap_probe: %s:%d: %s failed: %s (%s)\n", file, line, call, name, msg);
    char where[512];
    snprintf(where, sizeof where, "%s:%d: %s: %s (%s)", file, line, call, name, msg);
    json_raw(std::string("{\"probe\":\"hostmap\",\"test\":\"error\",\"ok\":false,\"message\":\"") +
             json_escape(where) + "\"}");
    if (g_json != nullptr)
        fclose(g_json);
    exit(2);
}

#define CU(x)                                                                                      \
    do {                                                                                           \
        CUresult r_ = (x);                                                                         \
        if (r_ != CUDA_SUCCESS) {                                                                  \
            const char *n_ = nullptr, *s_ = nullptr;                                               \
            cuGetErrorName(r_, &n_);                                                               \
            cuGetErrorString(r_, &s_);                                                             \
            fatal(__FILE__, __LINE__, #x, n_ ? n_ : "unknown CUresult",                            \
                  s_ ? s_ : "no description");                                                     \
        }                                                                                          \
    } while (0)

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess)                                                                     \
            fatal(__FILE__, __LINE__, #x, cudaGetErrorName(e_), cudaGetErrorString(e_));           \
    } while (0)

// ---- options and shared state ---------------------------------------------------------------

static int g_device = 0;
static int g_runs = 5;
static size_t g_size_mib = 1024;
static std::string g_tests = "all";
static const char *g_json_path = nullptr;

static CUdevice g_cudev;
static cudaStream_t g_stream;
static CUstream g_custream;
static cudaEvent_t g_e0, g_e1;
static int g_blocks; // streaming kernels: 8 blocks of 256 threads per SM
static const int THREADS = 256;
static CUdeviceptr g_res; // 16 unsigned long long results, plain device memory
static double g_t_start;
static const double DEADLINE_S = 100.0;

static double now_s()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static bool want(const char *name)
{
    if (g_tests == "all")
        return true;
    std::string list = "," + g_tests + ",";
    return list.find(std::string(",") + name + ",") != std::string::npos;
}

static bool out_of_time(const char *test)
{
    if (now_s() - g_t_start <= DEADLINE_S)
        return false;
    printf("%-24s skipped: the probe has run for over %.0f s\n", test, DEADLINE_S);
    json_raw(std::string("{\"probe\":\"hostmap\",\"test\":\"") + test +
             "\",\"skipped\":true,\"ok\":null}");
    return true;
}

// ---- JSON records ---------------------------------------------------------------------------

struct Rec {
    std::string s;
    Rec(const char *test, const char *backing)
    {
        s = "{\"probe\":\"hostmap\"";
        str("test", test);
        str("backing", backing);
    }
    Rec &str(const char *k, const char *v)
    {
        s += std::string(",\"") + k + "\":\"" + json_escape(v) + "\"";
        return *this;
    }
    Rec &num(const char *k, double v)
    {
        char b[64];
        if (std::isfinite(v))
            snprintf(b, sizeof b, "%.6g", v);
        else
            snprintf(b, sizeof b, "null");
        s += std::string(",\"") + k + "\":" + b;
        return *this;
    }
    Rec &u64(const char *k, uint64_t v)
    {
        char b[32];
        snprintf(b, sizeof b, "%" PRIu64, v);
        s += std::string(",\"") + k + "\":" + b;
        return *this;
    }
    Rec &boolean(const char *k, bool v)
    {
        s += std::string(",\"") + k + "\":" + (v ? "true" : "false");
        return *this;
    }
    Rec &null(const char *k)
    {
        s += std::string(",\"") + k + "\":null";
        return *this;
    }
    void emit()
    {
        s += "}";
        json_raw(s);
    }
};

struct Timing {
    double first_ms = NAN, med_ms = NAN, min_ms = NAN, max_ms = NAN;
    int runs = 0;
};

static double median(std::vector<double> v)
{
    if (v.empty())
        return NAN;
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// One line on stdout and one JSON record for a GPU-timed measurement. gbps and ops may be NAN.
static void report(const char *test, const char *backing, uint64_t bytes, const Timing &t,
                   double gbps, double ops, bool ok, Rec &r, const char *note = "")
{
    char g[32] = "", o[32] = "";
    if (std::isfinite(gbps))
        snprintf(g, sizeof g, "%9.2f GB/s", gbps);
    if (std::isfinite(ops))
        snprintf(o, sizeof o, "%10.3g op/s", ops);
    printf("%-24s %-7s %8.1f MiB  median %9.3f ms (first %9.3f)  %-14s %-15s %s%s%s\n", test,
           backing, bytes / 1048576.0, t.med_ms, t.first_ms, g, o, ok ? "PASS" : "FAIL",
           *note ? "  " : "", note);
    g_records++;
    if (!ok)
        g_failures++;
    r.u64("bytes", bytes);
    r.num("gbps", gbps);
    r.num("ops_per_s", ops);
    r.boolean("ok", ok);
    r.num("median_ms", t.med_ms);
    r.num("min_ms", t.min_ms);
    r.num("max_ms", t.max_ms);
    r.num("first_ms", t.first_ms);
    r.u64("runs", (uint64_t)t.runs);
    r.emit();
}

// Runs pre(run) (enqueued before the start event: not timed), body(run) between the events,
// then check(run) after the stop event has completed. Run 0 is the first (first-touch) run and
// is reported apart; runs 1..g_runs make the median.
template <class Pre, class Body, class Check>
static Timing run_timed(Pre pre, Body body, Check check, bool *ok)
{
    Timing t;
    std::vector<double> ms;
    int total = 1 + g_runs;
    for (int run = 0; run < total; run++) {
        pre(run);
        CK(cudaGetLastError());
        CK(cudaEventRecord(g_e0, g_stream));
        body(run);
        CK(cudaGetLastError());
        CK(cudaEventRecord(g_e1, g_stream));
        CK(cudaEventSynchronize(g_e1));
        float m = 0;
        CK(cudaEventElapsedTime(&m, g_e0, g_e1));
        if (!check(run))
            *ok = false;
        if (run == 0) {
            t.first_ms = m;
            if (m > 2000.0 && total > 2)
                total = 2;
        } else {
            ms.push_back(m);
        }
    }
    t.runs = (int)ms.size();
    t.med_ms = median(ms);
    t.min_ms = *std::min_element(ms.begin(), ms.end());
    t.max_ms = *std::max_element(ms.begin(), ms.end());
    return t;
}

// ---- kernels --------------------------------------------------------------------------------

__host__ __device__ static inline uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

// The random access index: a hash of the access number scaled into [0, nwords).
__host__ __device__ static inline uint64_t rand_index(uint64_t k, uint64_t nwords)
{
#ifdef __CUDA_ARCH__
    return __umul64hi(mix64(k), nwords);
#else
    return (uint64_t)(((unsigned __int128)mix64(k) * nwords) >> 64);
#endif
}

__device__ static inline void reduce_add(unsigned long long v, unsigned long long *out)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_down_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0)
        atomicAdd(out, v);
}

// word[i] = i + seed, 16 bytes per store.
__global__ void k_write(uint4 *p, size_t n16, uint32_t seed)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n16; i += stride) {
        uint32_t w = (uint32_t)(4 * i) + seed;
        p[i] = make_uint4(w, w + 1, w + 2, w + 3);
    }
}

__global__ void k_read(const uint4 *p, size_t n16, unsigned long long *out)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    unsigned long long s = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n16; i += stride) {
        uint4 v = p[i];
        s += (unsigned long long)v.x + v.y + v.z + v.w;
    }
    reduce_add(s, out);
}

__global__ void k_rand(const uint32_t *p, uint64_t nwords, uint64_t accesses,
                       unsigned long long *out)
{
    uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    unsigned long long s = 0;
#pragma unroll 4
    for (uint64_t k = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; k < accesses; k += stride)
        s += p[rand_index(k, nwords)];
    reduce_add(s, out);
}

// Access j: round r = j / count, k = j % count, word k * stride_words + (r * 64) % stride_words.
// Consecutive threads take consecutive k, so a warp's 32 loads fall on 32 strides.
__global__ void k_stride(const uint32_t *p, uint64_t count, uint64_t stride_words, uint64_t total,
                         unsigned long long *out)
{
    uint64_t step = (uint64_t)gridDim.x * blockDim.x;
    unsigned long long s = 0;
    for (uint64_t j = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; j < total; j += step) {
        uint64_t r = j / count, k = j - r * count;
        s += p[k * stride_words + (r * 64) % stride_words];
    }
    reduce_add(s, out);
}

// Reads words 0, n/2 and n-1 into out[0..2] (after a remap).
__global__ void k_peek(const uint32_t *p, uint64_t nwords, unsigned long long *out)
{
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        out[0] = p[0];
        out[1] = p[nwords / 2];
        out[2] = p[nwords - 1];
    }
}

template <typename T, bool SYS> __device__ static inline void atomic_add(T *p, T v)
{
    if constexpr (SYS)
        atomicAdd_system(p, v);
    else
        atomicAdd(p, v);
}

template <typename T, bool SYS> __device__ static inline T atomic_cas(T *p, T cmp, T v)
{
    if constexpr (SYS)
        return atomicCAS_system(p, cmp, v);
    else
        return atomicCAS(p, cmp, v);
}

// Operation o = it * threads + tid (each of threads * iters operations once) adds inc to slot
// o % slots; slots are stride_elems elements apart. With CAS, the add is a compare-and-swap loop.
template <typename T, bool SYS, bool CAS>
__global__ void k_atomic(T *base, uint32_t slots, uint32_t stride_elems, uint32_t iters, T inc)
{
    uint32_t threads = gridDim.x * blockDim.x;
    uint32_t tid = blockIdx.x * blockDim.x + threadIdx.x;
    for (uint32_t it = 0; it < iters; it++) {
        uint32_t slot = (uint32_t)(((uint64_t)it * threads + tid) % slots);
        T *p = base + (size_t)slot * stride_elems;
        if constexpr (CAS) {
            T old = *(volatile T *)p;
            for (;;) {
                T prev = atomic_cas<T, SYS>(p, old, (T)(old + inc));
                if (prev == old)
                    break;
                old = prev;
            }
        } else {
            atomic_add<T, SYS>(p, inc);
        }
    }
}

// ---- mappings -------------------------------------------------------------------------------

struct Mapping {
    CUdeviceptr va = 0;
    size_t size = 0;
    CUmemGenericAllocationHandle h = 0;
    bool host = false;
    double create_ms = 0, map_ms = 0;
};

static CUmemAllocationProp prop_for(bool host)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    if (host) {
        p.location.type = CU_MEM_LOCATION_TYPE_HOST;
        p.location.id = 0; // ignored for HOST
    } else {
        p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        p.location.id = (int)g_cudev;
    }
    return p;
}

static CUmemAccessDesc access_desc()
{
    CUmemAccessDesc a;
    memset(&a, 0, sizeof a);
    a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    a.location.id = (int)g_cudev;
    a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    return a;
}

static size_t granularity(bool host, CUmemAllocationGranularity_flags which)
{
    CUmemAllocationProp p = prop_for(host);
    size_t g = 0;
    CU(cuMemGetAllocationGranularity(&g, &p, which));
    return g;
}

static size_t g_gran; // the larger of the two backings' minimum granularity

static size_t round_up(size_t v, size_t g)
{
    return (v + g - 1) / g * g;
}

static CUmemGenericAllocationHandle create_handle(bool host, size_t size)
{
    CUmemAllocationProp p = prop_for(host);
    CUmemGenericAllocationHandle h = 0;
    CU(cuMemCreate(&h, size, &p, 0));
    return h;
}

static Mapping map_new(bool host, size_t size)
{
    Mapping m;
    m.host = host;
    m.size = size;
    double t0 = now_s();
    m.h = create_handle(host, size);
    double t1 = now_s();
    CU(cuMemAddressReserve(&m.va, size, g_gran, 0, 0));
    CU(cuMemMap(m.va, size, 0, m.h, 0));
    CUmemAccessDesc a = access_desc();
    CU(cuMemSetAccess(m.va, size, &a, 1));
    double t2 = now_s();
    m.create_ms = (t1 - t0) * 1e3;
    m.map_ms = (t2 - t1) * 1e3;
    return m;
}

static void map_free(Mapping &m)
{
    if (m.va == 0)
        return;
    CU(cuMemUnmap(m.va, m.size));
    CU(cuMemRelease(m.h));
    CU(cuMemAddressFree(m.va, m.size));
    m.va = 0;
}

static const char *bname(bool host)
{
    return host ? "host" : "device";
}

// Reads word i of a mapping through the copy engine.
static uint32_t word_at(CUdeviceptr va, uint64_t i)
{
    uint32_t w = 0;
    CU(cuMemcpyDtoH(&w, va + i * 4, 4));
    return w;
}

// Eight spread word indices of an nwords mapping, first and last included.
static std::vector<uint64_t> probe_points(uint64_t nwords)
{
    std::vector<uint64_t> v = {0, 1, nwords / 3, nwords / 2, nwords - 2, nwords - 1};
    v.push_back(rand_index(17, nwords));
    v.push_back(rand_index(4711, nwords));
    return v;
}

static void reset_res()
{
    CU(cuMemsetD8Async(g_res, 0, 16 * sizeof(unsigned long long), g_custream));
}

static unsigned long long res0()
{
    unsigned long long v = 0;
    CU(cuMemcpyDtoH(&v, g_res, sizeof v));
    return v;
}

static void fill_pattern(const Mapping &m, uint32_t seed)
{
    k_write<<<g_blocks, THREADS, 0, g_stream>>>((uint4 *)m.va, m.size / 16, seed);
    CK(cudaGetLastError());
}

// ---- tests ----------------------------------------------------------------------------------

static void test_alloc(const Mapping &m)
{
    unsigned int mt = 0;
    CUresult r = cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, m.va);
    const char *rn = "CUDA_SUCCESS";
    if (r != CUDA_SUCCESS)
        cuGetErrorName(r, &rn);
    printf("%-24s %-7s %8.1f MiB  cuMemCreate %.3f ms, reserve+map+set access %.3f ms, "
           "memory type attribute %u (%s)\n",
           "alloc", bname(m.host), m.size / 1048576.0, m.create_ms, m.map_ms, mt,
           r == CUDA_SUCCESS ? "1 host, 2 device" : rn);
    Rec rec("alloc", bname(m.host));
    rec.u64("bytes", m.size).null("gbps").null("ops_per_s").boolean("ok", true);
    rec.num("create_ms", m.create_ms).num("map_access_ms", m.map_ms);
    rec.num("create_gbps", m.size / (m.create_ms * 1e-3) / 1e9);
    if (r == CUDA_SUCCESS)
        rec.u64("memory_type", mt);
    else
        rec.null("memory_type").str("memory_type_error", rn);
    rec.emit();
    g_records++;
}

static void test_write(const Mapping &m)
{
    if (out_of_time("write_seq"))
        return;
    bool ok = true;
    uint64_t nwords = m.size / 4;
    Timing t = run_timed([&](int) {}, [&](int) { fill_pattern(m, 0); },
                         [&](int) {
                             for (uint64_t i : probe_points(nwords))
                                 if (word_at(m.va, i) != (uint32_t)i)
                                     return false;
                             return true;
                         },
                         &ok);
    Rec r("write_seq", bname(m.host));
    report("write_seq", bname(m.host), m.size, t, m.size / (t.med_ms * 1e-3) / 1e9, NAN, ok, r);
}

// The read tests expect word[i] == i (fill_pattern(m, 0)).
static void test_read(const Mapping &m)
{
    if (out_of_time("read_seq"))
        return;
    fill_pattern(m, 0);
    bool ok = true;
    uint64_t n = m.size / 4;
    unsigned long long expect = (unsigned long long)n * (n - 1) / 2;
    Timing t = run_timed([&](int) { reset_res(); },
                         [&](int) {
                             k_read<<<g_blocks, THREADS, 0, g_stream>>>(
                                 (const uint4 *)m.va, m.size / 16, (unsigned long long *)g_res);
                         },
                         [&](int) { return res0() == expect; }, &ok);
    Rec r("read_seq", bname(m.host));
    report("read_seq", bname(m.host), m.size, t, m.size / (t.med_ms * 1e-3) / 1e9, NAN, ok, r);
}

static void test_random(const Mapping &m, uint64_t accesses)
{
    if (out_of_time("read_random"))
        return;
    fill_pattern(m, 0);
    uint64_t n = m.size / 4;
    unsigned long long expect = 0;
    for (uint64_t k = 0; k < accesses; k++)
        expect += rand_index(k, n);
    bool ok = true;
    Timing t = run_timed([&](int) { reset_res(); },
                         [&](int) {
                             k_rand<<<g_blocks, THREADS, 0, g_stream>>>(
                                 (const uint32_t *)m.va, n, accesses, (unsigned long long *)g_res);
                         },
                         [&](int) { return res0() == expect; }, &ok);
    double secs = t.med_ms * 1e-3;
    Rec r("read_random", bname(m.host));
    r.u64("accesses", accesses).u64("access_bytes", 4).num("ns_per_access", secs * 1e9 / accesses);
    char note[64];
    snprintf(note, sizeof note, "%" PRIu64 " accesses of 4 B", accesses);
    report("read_random", bname(m.host), m.size, t, accesses * 4.0 / secs / 1e9, accesses / secs,
           ok, r, note);
}

static void test_stride(const Mapping &m, uint64_t stride_bytes)
{
    char name[32];
    snprintf(name, sizeof name, "read_stride_%" PRIu64 "k", stride_bytes >> 10);
    if (out_of_time(name))
        return;
    uint64_t n = m.size / 4, stride_words = stride_bytes / 4;
    uint64_t count = n / stride_words;
    if (count == 0) {
        printf("%-24s %-7s skipped: the mapping is smaller than the stride\n", name, bname(m.host));
        return;
    }
    const uint64_t target = 1ull << 22;
    uint64_t rounds = std::max<uint64_t>(1, target / count);
    uint64_t total = count * rounds;
    fill_pattern(m, 0);
    unsigned long long expect = 0;
    for (uint64_t j = 0; j < total; j++) {
        uint64_t r = j / count, k = j % count;
        expect += k * stride_words + (r * 64) % stride_words;
    }
    bool ok = true;
    Timing t = run_timed([&](int) { reset_res(); },
                         [&](int) {
                             k_stride<<<g_blocks, THREADS, 0, g_stream>>>(
                                 (const uint32_t *)m.va, count, stride_words, total,
                                 (unsigned long long *)g_res);
                         },
                         [&](int) { return res0() == expect; }, &ok);
    double secs = t.med_ms * 1e-3;
    Rec r(name, bname(m.host));
    r.u64("stride_bytes", stride_bytes).u64("accesses", total).u64("access_bytes", 4);
    r.num("ns_per_access", secs * 1e9 / total);
    char note[64];
    snprintf(note, sizeof note, "%" PRIu64 " accesses of 4 B", total);
    report(name, bname(m.host), m.size, t, total * 4.0 / secs / 1e9, total / secs, ok, r, note);
}

static void test_memset(const Mapping &m)
{
    uint64_t n = m.size / 4;
    if (!out_of_time("memset_d32")) {
        bool ok = true;
        Timing t =
            run_timed([&](int) {},
                      [&](int run) {
                          CU(cuMemsetD32Async(m.va, 0xA5A50000u + (unsigned)run, n, g_custream));
                      },
                      [&](int run) {
                          for (uint64_t i : probe_points(n))
                              if (word_at(m.va, i) != 0xA5A50000u + (unsigned)run)
                                  return false;
                          return true;
                      },
                      &ok);
        Rec r("memset_d32", bname(m.host));
        report("memset_d32", bname(m.host), m.size, t, m.size / (t.med_ms * 1e-3) / 1e9, NAN, ok,
               r);
    }
    if (!out_of_time("memset_d8")) {
        bool ok = true;
        Timing t = run_timed(
            [&](int) {},
            [&](int run) {
                CU(cuMemsetD8Async(m.va, (unsigned char)(0x30 + run), m.size, g_custream));
            },
            [&](int run) {
                uint32_t b = (uint32_t)(0x30 + run);
                uint32_t w = b | b << 8 | b << 16 | b << 24;
                for (uint64_t i : probe_points(n))
                    if (word_at(m.va, i) != w)
                        return false;
                return true;
            },
            &ok);
        Rec r("memset_d8", bname(m.host));
        report("memset_d8", bname(m.host), m.size, t, m.size / (t.med_ms * 1e-3) / 1e9, NAN, ok, r);
    }
}

static void test_memcpy(const Mapping &src, const Mapping &dst, const char *label)
{
    if (out_of_time("memcpy_dtod"))
        return;
    uint64_t n = src.size / 4;
    uint32_t seed = 1000u + (src.host ? 1 : 0) + (dst.host ? 2 : 0);
    bool ok = true;
    Timing t = run_timed(
        [&](int) {
            fill_pattern(src, seed);
            CU(cuMemsetD32Async(dst.va, 0xDEADBEEFu, n, g_custream));
        },
        [&](int) { CU(cuMemcpyDtoDAsync(dst.va, src.va, src.size, g_custream)); },
        [&](int) {
            for (uint64_t i : probe_points(n))
                if (word_at(dst.va, i) != (uint32_t)i + seed)
                    return false;
            return true;
        },
        &ok);
    Rec r("memcpy_dtod", bname(src.host));
    r.str("src", bname(src.host)).str("dst", bname(dst.host)).str("direction", label);
    report("memcpy_dtod", bname(src.host), src.size, t, src.size / (t.med_ms * 1e-3) / 1e9, NAN, ok,
           r, label);
}

// Unmap whatever is at va, map h there, set access; times each of the three calls.
struct RemapTimes {
    std::vector<double> unmap_us, map_us, access_us, total_us;
};

static void remap_to(CUdeviceptr va, size_t size, CUmemGenericAllocationHandle h, RemapTimes &rt)
{
    CUmemAccessDesc a = access_desc();
    CU(cuCtxSynchronize());
    double t0 = now_s();
    CU(cuMemUnmap(va, size));
    double t1 = now_s();
    CU(cuMemMap(va, size, 0, h, 0));
    double t2 = now_s();
    CU(cuMemSetAccess(va, size, &a, 1));
    double t3 = now_s();
    rt.unmap_us.push_back((t1 - t0) * 1e6);
    rt.map_us.push_back((t2 - t1) * 1e6);
    rt.access_us.push_back((t3 - t2) * 1e6);
    rt.total_us.push_back((t3 - t0) * 1e6);
}

// A kernel reads words 0, n/2, n-1 of the chunk; all must be `expect`.
static bool peek_is(CUdeviceptr va, size_t size, uint32_t expect)
{
    reset_res();
    k_peek<<<1, 32, 0, g_stream>>>((const uint32_t *)va, size / 4, (unsigned long long *)g_res);
    CK(cudaGetLastError());
    CK(cudaStreamSynchronize(g_stream));
    unsigned long long v[3];
    CU(cuMemcpyDtoH(v, g_res, sizeof v));
    return v[0] == expect && v[1] == expect && v[2] == expect;
}

// backing: the chunk's backing before the remap.
static void remap_report(const char *test, const char *backing, size_t size, const RemapTimes &rt,
                         bool ok)
{
    double tot = median(rt.total_us);
    double un = median(rt.unmap_us), mp = median(rt.map_us), ac = median(rt.access_us);
    printf("%-24s %-7s %8.1f MiB  median %9.1f us (unmap %.1f, map %.1f, set access %.1f; "
           "%zu reps)  %s\n",
           test, backing, size / 1048576.0, tot, un, mp, ac, rt.total_us.size(),
           ok ? "PASS" : "FAIL");
    g_records++;
    if (!ok)
        g_failures++;
    Rec r(test, backing);
    r.u64("bytes", size).num("gbps", size / (tot * 1e-6) / 1e9).num("ops_per_s", 1e6 / tot);
    r.boolean("ok", ok).num("median_us", tot).num("unmap_us", un).num("map_us", mp);
    r.num("access_us", ac);
    r.num("min_us", *std::min_element(rt.total_us.begin(), rt.total_us.end()));
    r.num("max_us", *std::max_element(rt.total_us.begin(), rt.total_us.end()));
    r.u64("reps", rt.total_us.size());
    r.str("note", "backing: the chunk's backing before the remap; gbps: chunk bytes / time");
    r.emit();
}

static void test_remap(size_t chunk, int reps)
{
    if (out_of_time("remap"))
        return;
    size_t size = round_up(chunk, g_gran);
    const uint32_t HOSTV = 0x4F4F4F4Fu, DEVV = 0xD0D0D0D0u;
    CUmemGenericAllocationHandle hh = create_handle(true, size);
    CUmemGenericAllocationHandle hd = create_handle(false, size);
    CUdeviceptr va = 0;
    CU(cuMemAddressReserve(&va, size, g_gran, 0, 0));
    CUmemAccessDesc a = access_desc();
    // Give each handle its own contents, then leave the host handle mapped.
    CU(cuMemMap(va, size, 0, hd, 0));
    CU(cuMemSetAccess(va, size, &a, 1));
    CU(cuMemsetD32(va, DEVV, size / 4));
    CU(cuCtxSynchronize());
    CU(cuMemUnmap(va, size));
    CU(cuMemMap(va, size, 0, hh, 0));
    CU(cuMemSetAccess(va, size, &a, 1));
    CU(cuMemsetD32(va, HOSTV, size / 4));
    CU(cuCtxSynchronize());
    bool ok = peek_is(va, size, HOSTV);
    RemapTimes to_dev, to_host;
    for (int i = 0; i < reps; i++) {
        remap_to(va, size, hd, to_dev);
        ok = peek_is(va, size, DEVV) && ok;
        remap_to(va, size, hh, to_host);
        ok = peek_is(va, size, HOSTV) && ok;
        if (now_s() - g_t_start > DEADLINE_S + 10)
            break;
    }
    char name[48];
    snprintf(name, sizeof name, "remap_to_device_%zuM", size >> 20);
    remap_report(name, "host", size, to_dev, ok);
    snprintf(name, sizeof name, "remap_to_host_%zuM", size >> 20);
    remap_report(name, "device", size, to_host, ok);
    CU(cuCtxSynchronize());
    CU(cuMemUnmap(va, size));
    CU(cuMemAddressFree(va, size));
    CU(cuMemRelease(hh));
    CU(cuMemRelease(hd));
}

struct AtomicCase {
    std::string name; // e.g. "atomic_add32_dev_hot"
    int bits;         // 32 or 64
    bool sys, cas, hot;
    uint32_t threads, iters, slots;
};

template <typename T, bool SYS, bool CAS>
static void launch_atomic(const AtomicCase &c, CUdeviceptr base, T inc)
{
    uint32_t stride_elems = 128 / sizeof(T);
    uint32_t blocks = c.threads / THREADS;
    k_atomic<T, SYS, CAS>
        <<<blocks, THREADS, 0, g_stream>>>((T *)base, c.slots, stride_elems, c.iters, inc);
}

template <typename T> static void dispatch_atomic(const AtomicCase &c, CUdeviceptr base, T inc)
{
    if (c.sys && c.cas)
        launch_atomic<T, true, true>(c, base, inc);
    else if (c.sys)
        launch_atomic<T, true, false>(c, base, inc);
    else if (c.cas)
        launch_atomic<T, false, true>(c, base, inc);
    else
        launch_atomic<T, false, false>(c, base, inc);
}

static void test_atomic(const Mapping &m, const AtomicCase &c, void *hostbuf)
{
    if (out_of_time(c.name.c_str()))
        return;
    size_t span = (size_t)c.slots * 128;
    uint64_t ops = (uint64_t)c.threads * c.iters;
    uint64_t per_slot = ops / c.slots;
    const uint32_t inc32 = 3;
    const unsigned long long inc64 = (1ull << 32) + 1;
    bool ok = true;
    uint64_t bad_slots = 0;
    Timing t = run_timed([&](int) { CU(cuMemsetD8Async(m.va, 0, span, g_custream)); },
                         [&](int) {
                             if (c.bits == 32)
                                 dispatch_atomic<int>(c, m.va, (int)inc32);
                             else
                                 dispatch_atomic<unsigned long long>(c, m.va, inc64);
                         },
                         [&](int) {
                             CU(cuMemcpyDtoH(hostbuf, m.va, span));
                             uint64_t bad = 0;
                             for (uint32_t s = 0; s < c.slots; s++) {
                                 const char *p = (const char *)hostbuf + (size_t)s * 128;
                                 if (c.bits == 32) {
                                     int v;
                                     memcpy(&v, p, 4);
                                     bad += (uint64_t)v != per_slot * inc32;
                                 } else {
                                     unsigned long long v;
                                     memcpy(&v, p, 8);
                                     bad += v != per_slot * inc64;
                                 }
                             }
                             bad_slots = std::max(bad_slots, bad);
                             return bad == 0;
                         },
                         &ok);
    double secs = t.med_ms * 1e-3;
    Rec r(c.name.c_str(), bname(m.host));
    r.u64("bits", (uint64_t)c.bits).str("scope", c.sys ? "system" : "device");
    r.str("op", c.cas ? "cas" : "add").str("pattern", c.hot ? "contended" : "spread");
    r.u64("ops", ops).u64("slots", c.slots).u64("threads", c.threads);
    r.u64("bad_slots_max", bad_slots);
    char note[96];
    snprintf(note, sizeof note, "%" PRIu64 " ops on %u slots%s", ops, c.slots,
             ok ? "" : ", counters WRONG");
    report(c.name.c_str(), bname(m.host), span, t, NAN, ops / secs, ok, r, note);
}

// ---- main -----------------------------------------------------------------------------------

static void usage(FILE *f)
{
    fprintf(f, "usage: hostmap_probe [--json FILE] [--size-mib N] [--runs N] [--device N] "
               "[--tests LIST]\n"
               "  --json FILE     also write one JSON object per measurement to FILE\n"
               "  --size-mib N    mapping size for the bandwidth tests (default 1024)\n"
               "  --runs N        timed runs per test after the first run, median reported "
               "(default 5)\n"
               "  --device N      CUDA device ordinal (default 0)\n"
               "  --tests LIST    comma-separated subset of: write,read,random,stride,memset,"
               "memcpy,remap,atomic,cas (default all)\n");
}

static long parse_long(const char *opt, const char *v, long lo, long hi)
{
    char *end = nullptr;
    long x = strtol(v, &end, 10);
    if (end == v || *end != '\0' || x < lo || x > hi) {
        fprintf(stderr, "hostmap_probe: %s wants an integer from %ld to %ld, got '%s'\n", opt, lo,
                hi, v);
        exit(2);
    }
    return x;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "hostmap_probe: %s: unknown option or missing value\n", a);
            usage(stderr);
            return 2;
        }
        const char *v = argv[++i];
        if (!strcmp(a, "--json"))
            g_json_path = v;
        else if (!strcmp(a, "--size-mib"))
            g_size_mib = (size_t)parse_long(a, v, 64, 8192);
        else if (!strcmp(a, "--runs"))
            g_runs = (int)parse_long(a, v, 1, 100);
        else if (!strcmp(a, "--device"))
            g_device = (int)parse_long(a, v, 0, 1023);
        else if (!strcmp(a, "--tests"))
            g_tests = v;
        else {
            fprintf(stderr, "hostmap_probe: unknown option %s\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (g_json_path != nullptr) {
        g_json = fopen(g_json_path, "w");
        if (g_json == nullptr) {
            fprintf(stderr, "hostmap_probe: cannot open %s: %s\n", g_json_path, strerror(errno));
            return 2;
        }
    }
    g_t_start = now_s();

    // The runtime's primary context is the driver calls' current context.
    CK(cudaSetDevice(g_device));
    CK(cudaFree(nullptr));
    CU(cuInit(0));
    CU(cuDeviceGet(&g_cudev, g_device));
    CUcontext ctx = nullptr;
    CU(cuCtxGetCurrent(&ctx));
    if (ctx == nullptr) {
        fprintf(stderr, "hostmap_probe: no current CUDA context after cudaFree(0)\n");
        return 2;
    }
    CK(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
    g_custream = (CUstream)g_stream;
    CK(cudaEventCreate(&g_e0));
    CK(cudaEventCreate(&g_e1));

    char name[256] = "";
    CU(cuDeviceGetName(name, sizeof name, g_cudev));
    int sms = 0, ccmaj = 0, ccmin = 0, vmm = 0, native_atomics = 0, pageable = 0, numa_vmm = 0;
    CU(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, g_cudev));
    CU(cuDeviceGetAttribute(&ccmaj, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, g_cudev));
    CU(cuDeviceGetAttribute(&ccmin, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, g_cudev));
    CU(cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                            g_cudev));
    CU(cuDeviceGetAttribute(&native_atomics, CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED,
                            g_cudev));
    CU(cuDeviceGetAttribute(&pageable, CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS, g_cudev));
    CU(cuDeviceGetAttribute(
        &numa_vmm, CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, g_cudev));
    int drv = 0, rt = 0;
    CU(cuDriverGetVersion(&drv));
    CK(cudaRuntimeGetVersion(&rt));
    if (!vmm) {
        fprintf(stderr, "hostmap_probe: device %d does not support virtual memory management\n",
                g_device);
        return 2;
    }
    g_blocks = sms * 8;
    // The kernel module's version (e.g. 580.x), when this is Linux with the NVIDIA module.
    char kdrv[256] = "unknown";
    if (FILE *f = fopen("/proc/driver/nvidia/version", "r")) {
        if (fgets(kdrv, sizeof kdrv, f) == nullptr)
            snprintf(kdrv, sizeof kdrv, "unknown");
        kdrv[strcspn(kdrv, "\n")] = '\0';
        fclose(f);
    }
    size_t gh = granularity(true, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    size_t gd = granularity(false, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    size_t ghr = granularity(true, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
    size_t gdr = granularity(false, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
    g_gran = std::max(gh, gd);
    size_t size = round_up(g_size_mib << 20, g_gran);

    printf("hostmap_probe: %s (sm_%d%d, %d SMs), CUDA driver API %d.%d, runtime %d.%d\n", name,
           ccmaj, ccmin, sms, drv / 1000, drv % 1000 / 10, rt / 1000, rt % 1000 / 10);
    printf("kernel driver: %s\n", kdrv);
    printf("granularity: host handle %zu KiB (recommended %zu KiB), device handle %zu KiB "
           "(recommended %zu KiB); mapping %zu MiB; %d runs per test after the first; host "
           "native atomics %d\n",
           gh >> 10, ghr >> 10, gd >> 10, gdr >> 10, size >> 20, g_runs, native_atomics);
    {
        Rec r("env", "none");
        r.str("device_name", name).u64("device", (uint64_t)g_device);
        char cc[16];
        snprintf(cc, sizeof cc, "%d.%d", ccmaj, ccmin);
        r.str("cc", cc).u64("sms", (uint64_t)sms).u64("cuda_driver_api_version", (uint64_t)drv);
        r.u64("runtime_version", (uint64_t)rt).u64("gran_host", gh).u64("gran_device", gd);
        r.u64("gran_host_recommended", ghr).u64("gran_device_recommended", gdr);
        r.u64("bytes", size).u64("runs", (uint64_t)g_runs);
        r.boolean("host_native_atomic_supported", native_atomics != 0);
        r.boolean("pageable_memory_access", pageable != 0);
        r.boolean("host_numa_vmm_supported", numa_vmm != 0);
        r.str("kernel_driver", kdrv);
        r.str("tests", g_tests.c_str()).null("gbps").null("ops_per_s").boolean("ok", true);
        r.emit();
    }

    CU(cuMemAlloc(&g_res, 16 * sizeof(unsigned long long)));
    Mapping mh = map_new(true, size);
    Mapping md = map_new(false, size);
    test_alloc(mh);
    test_alloc(md);

    const Mapping *both[2] = {&mh, &md};
    for (const Mapping *m : both) {
        if (want("write"))
            test_write(*m);
        if (want("read"))
            test_read(*m);
    }
    const uint64_t random_accesses = 1ull << 24;
    for (const Mapping *m : both)
        if (want("random"))
            test_random(*m, random_accesses);
    for (const Mapping *m : both)
        if (want("stride")) {
            test_stride(*m, 4096);
            test_stride(*m, 65536);
        }
    for (const Mapping *m : both)
        if (want("memset"))
            test_memset(*m);
    if (want("memcpy")) {
        Mapping md2 = map_new(false, size);
        test_memcpy(mh, md, "host->device");
        test_memcpy(md, mh, "device->host");
        test_memcpy(md, md2, "device->device");
        map_free(md2);
    }
    if (want("remap")) {
        test_remap(2ull << 20, 50);
        test_remap(64ull << 20, 20);
    }

    // Atomics last: if some path faults the context, everything above has been reported.
    std::vector<AtomicCase> cases;
    uint32_t spread = 1u << 20;
    while ((size_t)spread * 128 > size)
        spread >>= 1;
    for (int cas = 0; cas < 2; cas++) {
        if (!want(cas ? "cas" : "atomic"))
            continue;
        for (int bits : {32, 64})
            for (int sys = 0; sys < 2; sys++)
                for (int hot = 1; hot >= 0; hot--) {
                    AtomicCase c;
                    char nm[40];
                    snprintf(nm, sizeof nm, "atomic_%s%d_%s_%s", cas ? "cas" : "add", bits,
                             sys ? "sys" : "dev", hot ? "hot" : "spread");
                    c.name = nm;
                    c.bits = bits;
                    c.sys = sys;
                    c.cas = cas;
                    c.hot = hot;
                    if (hot) {
                        // CAS on a hot word retries once per competitor: keep it small.
                        c.threads = cas ? 1u << 10 : 1u << 16;
                        c.iters = 16;
                        c.slots = 4;
                    } else {
                        c.threads = spread;
                        c.iters = 4;
                        c.slots = spread;
                    }
                    cases.push_back(c);
                }
    }
    if (!cases.empty()) {
        void *hostbuf = nullptr;
        CU(cuMemAllocHost(&hostbuf, (size_t)spread * 128));
        for (const AtomicCase &c : cases)
            for (const Mapping *m : both)
                test_atomic(*m, c, hostbuf);
        CU(cuMemFreeHost(hostbuf));
    }

    CK(cudaStreamSynchronize(g_stream));
    map_free(mh);
    map_free(md);
    CU(cuMemFree(g_res));
    double total = now_s() - g_t_start;
    printf("hostmap_probe: %d measurements, %d FAIL, %.1f s\n", g_records, g_failures, total);
    {
        Rec r("summary", "none");
        r.u64("measurements", (uint64_t)g_records).u64("failures", (uint64_t)g_failures);
        r.num("seconds", total).null("gbps").null("ops_per_s").boolean("ok", g_failures == 0);
        r.emit();
    }
    if (g_json != nullptr)
        fclose(g_json);
    return g_failures ? 1 : 0;
}
