/*
 * fakecuda_capture.c - the fake driver's stream capture: cuStreamBeginCapture_v2,
 * cuStreamEndCapture, cuStreamIsCapturing, and what a synchronization does to a capture.
 *
 * Design
 *   A capturing stream records its kernel launches as kernel nodes of a new graph
 *   (fakecuda_graph.c) instead of running them; cuStreamEndCapture hands the graph over. As on
 *   the real driver, synchronizing while a capture is active breaks it: cuCtxSynchronize while
 *   any capture in global or thread-local mode is active, or cuStreamSynchronize of the
 *   capturing stream, returns CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the capture
 *   (cuStreamIsCapturing then says INVALIDATED, and cuStreamEndCapture fails with
 *   CUDA_ERROR_STREAM_CAPTURE_INVALIDATED). This is how PyTorch's torch.cuda.graph failed under
 *   the engine on the H200 (a fault's cuCtxSynchronize during capture), and CI must see it.
 *   Device-to-device copies and 1D memsets on a capturing stream are recorded as graph nodes,
 *   copies after the check the real driver makes at capture time: every device address they
 *   name must be memory (mapped); one that is not fails with CUDA_ERROR_INVALID_VALUE and
 *   invalidates the capture (on the H200, cu_graph's captured cudaMemcpyAsync of memory the
 *   engine had not mapped yet failed so). Other copies and memsets on a capturing stream
 *   invalidate the capture and return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED.
 *   The legacy stream (NULL) cannot capture.
 *
 * Invariants (under ms__fk_lock): at most MAX_CAPTURES captures; each capturing stream appears
 * once; an entry's graph is live until the capture ends.
 */
#include "gpu/fakecuda/fakecuda_int.h"

#define MAX_CAPTURES 64

struct capture {
    CUstream stream; /* NULL: free slot */
    CUgraph graph;
    CUstreamCaptureMode mode;
    bool invalidated;
};

static struct capture caps[MAX_CAPTURES];

static struct capture *find(CUstream s)
{
    for (int i = 0; s && i < MAX_CAPTURES; i++)
        if (caps[i].stream == s)
            return &caps[i];
    return NULL;
}

CUresult CUDAAPI cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
    CUresult rc = ms__fk_ready();
    if (rc == CUDA_SUCCESS)
        rc = ms__fk_stream_ok(hStream);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!hStream || hStream == CU_STREAM_LEGACY)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    CUgraph g = NULL;
    rc = cuGraphCreate(&g, 0);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&ms__fk_lock);
    struct capture *c = find(hStream);
    if (c) {
        rc = CUDA_ERROR_ILLEGAL_STATE;
    } else {
        c = find((CUstream)NULL);
        for (int i = 0; !c && i < MAX_CAPTURES; i++)
            if (!caps[i].stream)
                c = &caps[i];
        if (!c)
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        else
            *c = (struct capture){hStream, g, mode, false};
    }
    pthread_mutex_unlock(&ms__fk_lock);
    if (rc != CUDA_SUCCESS)
        cuGraphDestroy(g);
    return rc;
}

CUresult CUDAAPI cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode)
{
    return cuStreamBeginCapture_v2(hStream, mode);
}

CUresult CUDAAPI cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
    CUresult rc = ms__fk_inited();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!phGraph)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&ms__fk_lock);
    struct capture *c = find(hStream);
    struct capture was = c ? *c : (struct capture){0};
    if (c)
        c->stream = NULL;
    pthread_mutex_unlock(&ms__fk_lock);
    if (!was.stream)
        return CUDA_ERROR_ILLEGAL_STATE;
    if (was.invalidated) {
        cuGraphDestroy(was.graph);
        *phGraph = NULL;
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    }
    *phGraph = was.graph;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph)
{
    return cuStreamEndCapture(hStream, phGraph);
}

CUresult CUDAAPI cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
    CUresult rc = ms__fk_inited();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!captureStatus)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&ms__fk_lock);
    struct capture *c = find(hStream);
    *captureStatus = !c               ? CU_STREAM_CAPTURE_STATUS_NONE
                     : c->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                                      : CU_STREAM_CAPTURE_STATUS_ACTIVE;
    pthread_mutex_unlock(&ms__fk_lock);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
    return cuStreamIsCapturing(hStream, captureStatus);
}

CUresult ms__fk_capture_sync(CUstream s, bool context)
{
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&ms__fk_lock);
    for (int i = 0; i < MAX_CAPTURES; i++) {
        struct capture *c = &caps[i];
        if (!c->stream)
            continue;
        if ((context && c->mode != CU_STREAM_CAPTURE_MODE_RELAXED) ||
            (!context && c->stream == s)) {
            c->invalidated = true;
            rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        }
    }
    pthread_mutex_unlock(&ms__fk_lock);
    return rc;
}

CUresult ms__fk_capture_launch(CUstream s, CUfunction f, const unsigned grid[3],
                               const unsigned block[3], unsigned smem, void **args, bool *captured)
{
    *captured = false;
    if (!s)
        return CUDA_SUCCESS;
    pthread_mutex_lock(&ms__fk_lock);
    struct capture *c = find(s);
    CUgraph g = c ? c->graph : NULL;
    bool bad = c && c->invalidated;
    pthread_mutex_unlock(&ms__fk_lock);
    if (!c)
        return CUDA_SUCCESS;
    *captured = true;
    if (bad)
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    CUDA_KERNEL_NODE_PARAMS_v2 p = {.func = f,
                                    .gridDimX = grid[0],
                                    .gridDimY = grid[1],
                                    .gridDimZ = grid[2],
                                    .blockDimX = block[0],
                                    .blockDimY = block[1],
                                    .blockDimZ = block[2],
                                    .sharedMemBytes = smem,
                                    .kernelParams = args};
    CUgraphNode n;
    return cuGraphAddKernelNode_v2(&n, g, NULL, 0, &p);
}

/* The capture of s (unlocked copy of its state): NULL when s does not capture. */
static bool capture_of(CUstream s, CUgraph *g, bool *bad)
{
    if (!s)
        return false;
    pthread_mutex_lock(&ms__fk_lock);
    struct capture *c = find(s);
    if (c) {
        *g = c->graph;
        *bad = c->invalidated;
    }
    pthread_mutex_unlock(&ms__fk_lock);
    return c != NULL;
}

/* Is every byte of [p, p + n) memory (an allocation or a mapping)? Invalidates the capture of s
 * when not. */
static bool named_memory(CUstream s, uint64_t p, uint64_t n)
{
    bool ok = true;
    pthread_mutex_lock(&ms__fk_lock);
    for (uint64_t cur = p; ok && cur < p + n;) {
        struct ms__fk_ptr info;
        ok = ms__fk_ptr_info(cur, &info) == CUDA_SUCCESS && info.base + info.size > cur;
        if (ok)
            cur = info.base + info.size;
    }
    if (!ok) {
        struct capture *c = find(s);
        if (c)
            c->invalidated = true;
    }
    pthread_mutex_unlock(&ms__fk_lock);
    return ok;
}

CUresult ms__fk_capture_copy(CUstream s, uint64_t dst, uint64_t src, uint64_t bytes, bool *captured)
{
    CUgraph g = NULL;
    bool bad = false;
    *captured = capture_of(s, &g, &bad);
    if (!*captured)
        return CUDA_SUCCESS;
    if (bad)
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    if (!named_memory(s, dst, bytes) || !named_memory(s, src, bytes))
        return CUDA_ERROR_INVALID_VALUE;
    return ms__fk_graph_add_copy(g, dst, src, bytes);
}

CUresult ms__fk_capture_fill(CUstream s, uint64_t dst, uint32_t value, unsigned elem, uint64_t n,
                             bool *captured)
{
    CUgraph g = NULL;
    bool bad = false;
    *captured = capture_of(s, &g, &bad);
    if (!*captured)
        return CUDA_SUCCESS;
    if (bad)
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    /* Not checked at capture time: on the H200, cu_graph's captured memset of memory the
     * engine had not mapped was accepted (the copy after it was not). */
    return ms__fk_graph_add_fill(g, dst, value, elem, n);
}

CUresult ms__fk_capture_other(CUstream s)
{
    bool captured = false;
    pthread_mutex_lock(&ms__fk_lock);
    struct capture *c = find(s);
    if (c) {
        c->invalidated = true;
        captured = true;
    }
    pthread_mutex_unlock(&ms__fk_lock);
    return captured ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}
