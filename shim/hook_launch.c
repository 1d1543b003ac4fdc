/*
 * hook_launch.c - hooks for kernel launches: every launch becomes one packed parameter buffer.
 *
 * Design
 *   The working-set predictor scans a launch's parameter bytes for addresses (core/predict.h),
 *   so the hook rebuilds the buffer the device will see, before forwarding the launch:
 *     kernelParams   an array of pointers, one per parameter: each parameter is copied to its
 *                    offset (cuFuncGetParamInfo, cached per function in funcinfo.c); padding
 *                    is zero. Without a layout the bytes cannot be built: "unknown layout".
 *     extra          CU_LAUNCH_PARAM_BUFFER_POINTER / _SIZE already give the packed buffer; it
 *                    is reported in place (the layout, when known, comes along).
 *     neither        a kernel without parameters (or an invalid launch the driver rejects).
 *   A kernel the driver reports as parameterless keeps that (known, empty) layout only when the
 *   launch passes no parameters: the driver gives the same answer for kernels whose parameter
 *   information it does not have.
 *   Buffers up to 4 KiB (the classic limit) are built on the stack, larger ones (CUDA allows
 *   32 KiB) on the heap; a failed allocation reports the launch as unknown rather than fail it.
 *
 *   The event goes out before the real call: that is where the launch gate will hold a launch
 *   whose memory is not resident. The launch itself is forwarded unchanged.
 *
 *   cuGraphLaunch: a graph's kernels are not visible at launch (their parameters were fixed at
 *   capture or instantiation); hook_graph.c records at instantiation what the graph reaches,
 *   and the launch is gated on that union (the whole footprint when unknown), with the daemon
 *   only during the process's slice. It is counted apart (graph_launches), not as kernel
 *   launches.
 */
#include "shim/shim_int.h"

#include "shim/phases.h"
#include "shim/shim_events.h"

#include <stdlib.h>
#include <string.h>

#define STACK_PARAM_BYTES 4096u
#define MAX_EXTRA_PAIRS 64 /* an extra list longer than this is not believed */

static const struct ms_param_layout no_params[1];

struct dims {
    unsigned int grid[3], block[3], smem;
};

/*
 * Fill *out for a launch of f (dimensions d) with kernelParams or extra, as the device will see
 * it. The parameter bytes live in local (cap bytes) or, when larger, in *heap (the caller
 * frees it).
 */
void ms__shim_launch_build(struct ms_shim_launch *out, int kind, CUfunction f,
                           const unsigned grid[3], const unsigned block[3], unsigned smem,
                           struct ms_shim_stream s, void **kernelParams, void **extra,
                           uint8_t *local, size_t cap, uint8_t **heap)
{
    const struct ms_funcinfo *fi = ms__shim_funcinfo(f);
    *heap = NULL;
    struct ms_shim_launch l = {
        .func = f,
        .name = fi->name,
        .smem_bytes = smem,
        .stream = s,
        .kind = (enum ms_shim_launch_kind)kind,
        .layout = fi->known ? (fi->nparams ? fi->layout : no_params) : NULL,
        .nlayout = fi->known ? fi->nparams : 0,
    };
    for (int i = 0; i < 3; i++) {
        l.grid[i] = grid[i];
        l.block[i] = block[i];
    }
    if (kernelParams) {
        /* "No parameters" from the driver (CUDA_ERROR_INVALID_VALUE for index 0) cannot be
         * told apart from "no information", so a launch that passes parameters to such a
         * kernel is unknown: never under-predict. */
        if (fi->known && fi->nparams == 0) {
            l.layout = NULL;
        } else if (fi->known) {
            size_t n = fi->params_bytes;
            uint8_t *buf = n <= cap ? local : (*heap = ms_malloc(n));
            if (buf) {
                memset(buf, 0, n);
                for (uint32_t i = 0; i < fi->nparams; i++) {
                    const void *src = kernelParams[i];
                    uint8_t *dst = buf + fi->layout[i].offset;
                    uint32_t size = fi->layout[i].size;
                    if (!src)
                        continue;
                    /* pointers and ints, copied inline; the rest through memcpy */
                    if (size == 8)
                        memcpy(dst, src, 8);
                    else if (size == 4)
                        memcpy(dst, src, 4);
                    else
                        memcpy(dst, src, size);
                }
                l.params = buf;
                l.params_len = n;
                l.params_known = true;
            } else {
                MS_LOG_ONCE("out of memory packing %zu parameter bytes of %s", n, fi->name);
            }
        }
    } else if (extra) {
        const void *buf = NULL;
        const size_t *size = NULL;
        for (int i = 0; i < 2 * MAX_EXTRA_PAIRS && extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
            if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) {
                buf = extra[i + 1];
            } else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) {
                size = extra[i + 1];
            } else {
                MS_LOG_ONCE("launch of %s: unknown 'extra' key %p", fi->name, extra[i]);
                break;
            }
        }
        if (buf && size) {
            l.params = buf;
            l.params_len = *size;
            l.params_known = true;
            if (fi->known && (fi->nparams ? fi->params_bytes > *size : *size > 0)) {
                l.layout = NULL; /* the layout does not describe this buffer: do not trust it */
                l.nlayout = 0;
            }
        }
    } else {
        l.params_known = fi->known && fi->nparams == 0;
    }
    *out = l;
}

static int report(enum ms_shim_launch_kind kind, CUfunction f, const struct dims *d,
                  struct ms_shim_stream s, void **kernelParams, void **extra)
{
    uint8_t local[STACK_PARAM_BYTES];
    uint8_t *heap;
    struct ms_shim_launch l;
    uint64_t t = ms__ph_start();
    ms__shim_launch_build(&l, kind, f, d->grid, d->block, d->smem, s, kernelParams, extra, local,
                          sizeof local, &heap);
    ms__ph_stop(MS_PH_PACK, t);
    int gate = ms_shim_on_launch(&l);
    ms_free(heap);
    return gate;
}

/* MSCHED_PHASES (phases.h): the whole hook, timed until its scope ends (after the gate's end,
 * a cleanup declared earlier runs later), and the real call. */
#define MS_PH_HOOK_SCOPE                                                                           \
    uint64_t ms_ph_hook_ __attribute__((cleanup(ms__ph_stop_hook))) = ms__ph_start()
#define MS_PH_DRIVER_CALL(call)                                                                    \
    __extension__({                                                                                \
        uint64_t ms_ph_t_ = ms__ph_start();                                                        \
        CUresult ms_ph_r_ = (call);                                                                \
        ms__ph_stop(MS_PH_DRIVER, ms_ph_t_);                                                       \
        ms_ph_r_;                                                                                  \
    })

#define LAUNCH_HOOK(name, pt)                                                                      \
    CUresult CUDAAPI name(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,              \
                          unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,   \
                          unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,   \
                          void **kernelParams, void **extra)                                       \
    {                                                                                              \
        MS_PH_HOOK_SCOPE;                                                                          \
        __typeof__(&name) real = MS_REAL(name);                                                    \
        struct dims d = {                                                                          \
            {gridDimX, gridDimY, gridDimZ}, {blockDimX, blockDimY, blockDimZ}, sharedMemBytes};    \
        MS_GATED(report(MS_SHIM_LAUNCH_KERNEL, f, &d, (struct ms_shim_stream){hStream, pt},        \
                        kernelParams, extra));                                                     \
        return MS_PH_DRIVER_CALL(real(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY,       \
                                      blockDimZ, sharedMemBytes, hStream, kernelParams, extra));   \
    }

#define LAUNCH_COOP_HOOK(name, pt)                                                                 \
    CUresult CUDAAPI name(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,              \
                          unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,   \
                          unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,   \
                          void **kernelParams)                                                     \
    {                                                                                              \
        MS_PH_HOOK_SCOPE;                                                                          \
        __typeof__(&name) real = MS_REAL(name);                                                    \
        struct dims d = {                                                                          \
            {gridDimX, gridDimY, gridDimZ}, {blockDimX, blockDimY, blockDimZ}, sharedMemBytes};    \
        MS_GATED(report(MS_SHIM_LAUNCH_COOP, f, &d, (struct ms_shim_stream){hStream, pt},          \
                        kernelParams, NULL));                                                      \
        return MS_PH_DRIVER_CALL(real(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY,       \
                                      blockDimZ, sharedMemBytes, hStream, kernelParams));          \
    }

/* cuLaunchKernelEx: the gate sits at function scope (MS_GATED), so the dimensions are read
 * here; a NULL config is the driver's to reject. */
static int report_ex(const CUlaunchConfig *config, CUfunction f, bool pt, void **kernelParams,
                     void **extra)
{
    if (!config)
        return 0;
    struct dims d = {{config->gridDimX, config->gridDimY, config->gridDimZ},
                     {config->blockDimX, config->blockDimY, config->blockDimZ},
                     config->sharedMemBytes};
    return report(MS_SHIM_LAUNCH_EX, f, &d, (struct ms_shim_stream){config->hStream, pt},
                  kernelParams, extra);
}

#define LAUNCH_EX_HOOK(name, pt)                                                                   \
    CUresult CUDAAPI name(const CUlaunchConfig *config, CUfunction f, void **kernelParams,         \
                          void **extra)                                                            \
    {                                                                                              \
        MS_PH_HOOK_SCOPE;                                                                          \
        __typeof__(&name) real = MS_REAL(name);                                                    \
        MS_GATED(report_ex(config, f, pt, kernelParams, extra));                                   \
        return MS_PH_DRIVER_CALL(real(config, f, kernelParams, extra));                            \
    }

LAUNCH_HOOK(cuLaunchKernel, false)
LAUNCH_HOOK(cuLaunchKernel_ptsz, true)
LAUNCH_COOP_HOOK(cuLaunchCooperativeKernel, false)
LAUNCH_COOP_HOOK(cuLaunchCooperativeKernel_ptsz, true)
LAUNCH_EX_HOOK(cuLaunchKernelEx, false)
LAUNCH_EX_HOOK(cuLaunchKernelEx_ptsz, true)

/* The legacy launch API (deprecated, still exported): the block shape and the parameter bytes
 * were set on the function beforehand (cuFuncSetBlockShape, cuParamSet*), which the shim does
 * not follow. So the launch is gated as one whose parameters are unknown (an unbounded launch:
 * everything reachable, nothing left mapped to nothing), in its place in the process's slice. */
static int report_legacy(CUfunction f, int w, int h, CUstream s)
{
    /* The block shape is not known here either: recorded as one thread. */
    struct dims d = {{w > 0 ? (unsigned int)w : 0, h > 0 ? (unsigned int)h : 0, 1}, {1, 1, 1}, 0};
    return report(MS_SHIM_LAUNCH_KERNEL, f, &d, (struct ms_shim_stream){s, false}, NULL, NULL);
}

CUresult CUDAAPI cuLaunch(CUfunction f)
{
    __typeof__(&cuLaunch) real = MS_REAL(cuLaunch);
    MS_GATED(report_legacy(f, 1, 1, NULL));
    return real(f);
}

CUresult CUDAAPI cuLaunchGrid(CUfunction f, int grid_width, int grid_height)
{
    __typeof__(&cuLaunchGrid) real = MS_REAL(cuLaunchGrid);
    MS_GATED(report_legacy(f, grid_width, grid_height, NULL));
    return real(f, grid_width, grid_height);
}

CUresult CUDAAPI cuLaunchGridAsync(CUfunction f, int grid_width, int grid_height, CUstream hStream)
{
    __typeof__(&cuLaunchGridAsync) real = MS_REAL(cuLaunchGridAsync);
    MS_GATED(report_legacy(f, grid_width, grid_height, hStream));
    return real(f, grid_width, grid_height, hStream);
}

#define GRAPH_HOOK(name, pt)                                                                       \
    CUresult CUDAAPI name(CUgraphExec hGraphExec, CUstream hStream)                                \
    {                                                                                              \
        __typeof__(&name) real = MS_REAL(name);                                                    \
        CUresult prc;                                                                              \
        struct ms_graph_whole w __attribute__((cleanup(ms__graph_pieces_whole_end)));              \
        if (ms__graph_pieces_launch(hGraphExec, (struct ms_shim_stream){hStream, pt}, real, &prc,  \
                                    &w))                                                           \
            return prc;                                                                            \
        MS_GATED(ms_shim_on_graph_launch(hGraphExec, (struct ms_shim_stream){hStream, pt}));       \
        return real(hGraphExec, hStream);                                                          \
    }

GRAPH_HOOK(cuGraphLaunch, false)
GRAPH_HOOK(cuGraphLaunch_ptsz, true)

/* Stream memory operations touch device memory from the stream: their word is gated like a
 * copy's range (a batch of them on the whole footprint). Host functions are only counted. */
#define MEMOP_HOOK(name, val_t, bytes, pt)                                                         \
    CUresult CUDAAPI name(CUstream stream, CUdeviceptr addr, val_t value, unsigned int flags)      \
    {                                                                                              \
        __typeof__(&name) real = MS_REAL(name);                                                    \
        MS_GATED(ms_shim_on_memop(addr, bytes, (struct ms_shim_stream){stream, pt}));              \
        return real(stream, addr, value, flags);                                                   \
    }

MEMOP_HOOK(cuStreamWriteValue32, cuuint32_t, 4, false)
MEMOP_HOOK(cuStreamWriteValue32_ptsz, cuuint32_t, 4, true)
MEMOP_HOOK(cuStreamWriteValue32_v2, cuuint32_t, 4, false)
MEMOP_HOOK(cuStreamWriteValue32_v2_ptsz, cuuint32_t, 4, true)
MEMOP_HOOK(cuStreamWaitValue32, cuuint32_t, 4, false)
MEMOP_HOOK(cuStreamWaitValue32_ptsz, cuuint32_t, 4, true)
MEMOP_HOOK(cuStreamWaitValue32_v2, cuuint32_t, 4, false)
MEMOP_HOOK(cuStreamWaitValue32_v2_ptsz, cuuint32_t, 4, true)
MEMOP_HOOK(cuStreamWriteValue64, cuuint64_t, 8, false)
MEMOP_HOOK(cuStreamWriteValue64_ptsz, cuuint64_t, 8, true)
MEMOP_HOOK(cuStreamWriteValue64_v2, cuuint64_t, 8, false)
MEMOP_HOOK(cuStreamWriteValue64_v2_ptsz, cuuint64_t, 8, true)
MEMOP_HOOK(cuStreamWaitValue64, cuuint64_t, 8, false)
MEMOP_HOOK(cuStreamWaitValue64_ptsz, cuuint64_t, 8, true)
MEMOP_HOOK(cuStreamWaitValue64_v2, cuuint64_t, 8, false)
MEMOP_HOOK(cuStreamWaitValue64_v2_ptsz, cuuint64_t, 8, true)

#define BATCH_MEMOP_HOOK(name, pt)                                                                 \
    CUresult CUDAAPI name(CUstream stream, unsigned int count, CUstreamBatchMemOpParams *p,        \
                          unsigned int flags)                                                      \
    {                                                                                              \
        __typeof__(&name) real = MS_REAL(name);                                                    \
        MS_GATED(ms_shim_on_memop(0, 0, (struct ms_shim_stream){stream, pt}));                     \
        return real(stream, count, p, flags);                                                      \
    }

BATCH_MEMOP_HOOK(cuStreamBatchMemOp, false)
BATCH_MEMOP_HOOK(cuStreamBatchMemOp_ptsz, true)
BATCH_MEMOP_HOOK(cuStreamBatchMemOp_v2, false)
BATCH_MEMOP_HOOK(cuStreamBatchMemOp_v2_ptsz, true)

CUresult CUDAAPI cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData)
{
    ms_shim_on_host_func();
    return MS_REAL(cuLaunchHostFunc)(hStream, fn, userData);
}

CUresult CUDAAPI cuLaunchHostFunc_ptsz(CUstream hStream, CUhostFn fn, void *userData)
{
    ms_shim_on_host_func();
    return MS_REAL(cuLaunchHostFunc_ptsz)(hStream, fn, userData);
}
