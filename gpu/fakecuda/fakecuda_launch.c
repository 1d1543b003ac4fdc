/*
 * fakecuda_launch.c - the fake driver's kernels: registration, cuFuncGetParamInfo /
 * cuFuncGetName, and the launch entry points (the legacy cuParamSet* / cuLaunchGrid API too).
 *
 * Design
 *   A kernel is a host function registered with ms_fake_register_kernel; its CUfunction is a
 *   pointer to the registration record. Parameter offsets follow the device's packing rule
 *   (each parameter aligned to the largest power of two <= 8 dividing its size), which is what
 *   cuFuncGetParamInfo reports on the H200 for ordinary scalar and pointer parameters
 *   (docs/h200-measurements.md). Launches check what the real driver checks (handle, grid and
 *   block dimensions, 1024 threads per block, stream, and exactly one of kernelParams/extra
 *   when the kernel has parameters), then call the function synchronously. With `extra`, the
 *   function gets args[] pointing into the caller's buffer, so kernels are written once for
 *   both ways of passing parameters.
 *   Each kernel also has a CUkernel handle (ms_fake_kernel_handle: the address of a byte in its
 *   record), as the driver's library API hands out: cuKernelGetParamInfo / cuKernelGetName
 *   answer for it, the launch entry points accept it in place of a CUfunction (as CUDA 12+
 *   does), and the CUfunction queries refuse it (CUDA_ERROR_INVALID_HANDLE), so an interposer
 *   must try the CUkernel query.
 *   The oracle's host counter: before a launch runs (directly or as a graph's node, both
 *   through launch()), each parameter of pointer size (8 bytes; kernels registered with
 *   sizes only) is read and looked up; a value inside a mapping of a host handle counts
 *   (ms_fake_stats.host_mapped_args, and host_mapped_launches once per launch). Such memory
 *   may be touched; unmapped memory in a reservation still faults, as before. A launch
 *   recorded by a stream capture runs later, as a graph's node, and is counted then.
 *
 * Invariants
 *   - Registration records are never freed: a CUfunction stays valid until exit.
 *   - The kernel runs without ms__fk_lock held (it may take as long as it likes, or fault).
 */
#include "gpu/fakecuda/fakecuda_int.h"

#include <stdlib.h>
#include <string.h>

#define KERNEL_MAGIC 0x6c6e726bu /* "krnl" */
#define MAX_KERNELS 4096u
#define MAX_PARAMS 1024u

struct fk_kernel {
    uint32_t magic;
    char *name;
    ms_fake_kernel_fn fn;
    void *user;
    bool has_info;
    size_t nparams;
    size_t *offsets, *sizes;
    size_t param_bytes;
    char as_kernel; /* its address is the kernel's CUkernel handle */
    /* The legacy launch API's state (cuFuncSetBlockShape, cuFuncSetSharedSize, cuParamSet*),
     * under ms__fk_lock: the block shape (0 until set: such a launch is refused, as the driver
     * refuses it), the dynamic shared memory and the parameter buffer cuLaunch* passes. */
    unsigned int legacy_block[3], legacy_smem;
    uint8_t *legacy_params;
    size_t legacy_bytes;
};

static struct fk_kernel *kernels[MAX_KERNELS]; /* reachable for leak checkers; under ms__fk_lock */
static size_t nkernels;

/* The kernel whose CUfunction (as_function) and/or CUkernel (as_kernel) handle is h. */
static struct fk_kernel *lookup(const void *h, bool as_function, bool as_kernel)
{
    pthread_mutex_lock(&ms__fk_lock);
    struct fk_kernel *k = NULL;
    for (size_t i = 0; i < nkernels && !k; i++)
        if ((as_function && (const void *)kernels[i] == h) ||
            (as_kernel && (const void *)&kernels[i]->as_kernel == h))
            k = kernels[i];
    pthread_mutex_unlock(&ms__fk_lock);
    return k;
}

/* For launches: a CUfunction, or a CUkernel passed as one. */
static struct fk_kernel *kernel_of(CUfunction f)
{
    return lookup(f, true, true);
}

MS_FK_EXPORT CUresult ms_fake_kernel_handle(CUfunction f, CUkernel *out)
{
    struct fk_kernel *k = lookup(f, true, false);
    if (!k || !out)
        return CUDA_ERROR_INVALID_VALUE;
    *out = (CUkernel)&k->as_kernel;
    return CUDA_SUCCESS;
}

static size_t param_align(size_t size)
{
    size_t a = 8;
    while (a > 1 && size % a != 0)
        a /= 2;
    return a;
}

MS_FK_EXPORT CUresult ms_fake_register_kernel(const char *name, ms_fake_kernel_fn fn,
                                              const size_t *param_sizes, size_t nparams, void *user,
                                              CUfunction *out)
{
    if (!name || !fn || !out || nparams > MAX_PARAMS)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; param_sizes && i < nparams; i++)
        if (param_sizes[i] == 0 || param_sizes[i] > 4096)
            return CUDA_ERROR_INVALID_VALUE;
    struct fk_kernel *k = calloc(1, sizeof *k);
    if (!k)
        return CUDA_ERROR_OUT_OF_MEMORY;
    k->magic = KERNEL_MAGIC;
    k->name = strdup(name);
    k->fn = fn;
    k->user = user;
    k->has_info = param_sizes != NULL;
    k->nparams = param_sizes ? nparams : 0;
    if (k->nparams) {
        k->offsets = calloc(k->nparams, sizeof *k->offsets);
        k->sizes = calloc(k->nparams, sizeof *k->sizes);
    }
    if (!k->name || (k->nparams && (!k->offsets || !k->sizes))) {
        free(k->name);
        free(k->offsets);
        free(k->sizes);
        free(k);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    size_t off = 0;
    for (size_t i = 0; i < k->nparams; i++) {
        size_t a = param_align(param_sizes[i]);
        off = (off + a - 1) / a * a;
        k->offsets[i] = off;
        k->sizes[i] = param_sizes[i];
        off += param_sizes[i];
    }
    k->param_bytes = off;
    pthread_mutex_lock(&ms__fk_lock);
    bool ok = nkernels < MAX_KERNELS;
    if (ok)
        kernels[nkernels++] = k;
    pthread_mutex_unlock(&ms__fk_lock);
    if (!ok) {
        free(k->name);
        free(k->offsets);
        free(k->sizes);
        free(k);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *out = (CUfunction)k;
    return CUDA_SUCCESS;
}

static CUresult param_info(struct fk_kernel *k, size_t paramIndex, size_t *paramOffset,
                           size_t *paramSize)
{
    if (!k)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!k->has_info)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (!paramOffset || !paramSize || paramIndex >= k->nparams)
        return CUDA_ERROR_INVALID_VALUE;
    *paramOffset = k->offsets[paramIndex];
    *paramSize = k->sizes[paramIndex];
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset,
                                    size_t *paramSize)
{
    CUresult rc = ms__fk_inited();
    if (rc != CUDA_SUCCESS)
        return rc;
    return param_info(lookup(func, true, false), paramIndex, paramOffset, paramSize);
}

CUresult CUDAAPI cuKernelGetParamInfo(CUkernel kernel, size_t paramIndex, size_t *paramOffset,
                                      size_t *paramSize)
{
    CUresult rc = ms__fk_inited();
    if (rc != CUDA_SUCCESS)
        return rc;
    return param_info(lookup(kernel, false, true), paramIndex, paramOffset, paramSize);
}

CUresult CUDAAPI cuKernelGetName(const char **name, CUkernel hfunc)
{
    CUresult rc = ms__fk_inited();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!name)
        return CUDA_ERROR_INVALID_VALUE;
    struct fk_kernel *k = lookup(hfunc, false, true);
    if (!k)
        return CUDA_ERROR_INVALID_HANDLE;
    *name = k->name;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuFuncGetName(const char **name, CUfunction hfunc)
{
    CUresult rc = ms__fk_inited();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!name)
        return CUDA_ERROR_INVALID_VALUE;
    struct fk_kernel *k = lookup(hfunc, true, false);
    if (!k)
        return CUDA_ERROR_INVALID_HANDLE;
    *name = k->name;
    return CUDA_SUCCESS;
}

/* Parameters of pointer size whose value lies in a mapping of a host handle (args as the kernel
 * gets them: l->args[i] points at parameter i). Takes ms__fk_lock. */
static uint64_t host_mapped_args(const struct fk_kernel *k, void *const *args, size_t nargs)
{
    uint64_t n = 0;
    pthread_mutex_lock(&ms__fk_lock);
    for (size_t i = 0; args && i < nargs && i < k->nparams; i++) {
        if (k->sizes[i] != sizeof(CUdeviceptr))
            continue;
        CUdeviceptr v;
        memcpy(&v, args[i], sizeof v);
        if (ms__fk_host_mapped((uint64_t)v))
            n++;
    }
    pthread_mutex_unlock(&ms__fk_lock);
    return n;
}

struct launch_args {
    CUfunction f;
    unsigned int grid[3], block[3], smem;
    CUstream stream;
    void **params, **extra;
};

static CUresult launch(const struct launch_args *a)
{
    CUresult rc = ms__fk_ready();
    if (rc == CUDA_SUCCESS)
        rc = ms__fk_stream_ok(a->stream);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct fk_kernel *k = kernel_of(a->f);
    if (!k)
        return CUDA_ERROR_INVALID_HANDLE;
    uint64_t threads = 1;
    for (int i = 0; i < 3; i++) {
        if (a->grid[i] == 0 || a->block[i] == 0)
            return CUDA_ERROR_INVALID_VALUE;
        threads *= a->block[i];
    }
    if (threads > 1024 || (a->params && a->extra))
        return CUDA_ERROR_INVALID_VALUE;
    if (k->nparams > 0 && !a->params && !a->extra)
        return CUDA_ERROR_INVALID_VALUE;

    struct ms_fake_launch l = {
        .name = k->name,
        .smem_bytes = a->smem,
        .stream = a->stream,
        .user = k->user,
    };
    memcpy(l.grid, a->grid, sizeof l.grid);
    memcpy(l.block, a->block, sizeof l.block);
    void **args = NULL;
    if (a->params) {
        l.args = a->params;
        l.nargs = k->nparams;
    } else if (a->extra) {
        const void *buf = NULL;
        const size_t *size = NULL;
        for (int i = 0; i < 128 && a->extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
            if (a->extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
                buf = a->extra[i + 1];
            else if (a->extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE)
                size = a->extra[i + 1];
            else
                return CUDA_ERROR_INVALID_VALUE;
        }
        if (!buf || !size || *size < k->param_bytes)
            return CUDA_ERROR_INVALID_VALUE;
        l.buf = buf;
        l.buf_bytes = *size;
        if (k->nparams) {
            args = calloc(k->nparams, sizeof *args);
            if (!args)
                return CUDA_ERROR_OUT_OF_MEMORY;
            for (size_t i = 0; i < k->nparams; i++)
                args[i] = (char *)(uintptr_t)buf + k->offsets[i];
            l.args = args;
            l.nargs = k->nparams;
        }
    }
    bool captured = false;
    rc = ms__fk_capture_launch(a->stream, a->f, a->grid, a->block, a->smem, l.args, &captured);
    if (captured) {
        free(args);
        return rc;
    }
    uint64_t host_args = host_mapped_args(k, l.args, l.nargs);
    ms__fk_um_kernel(true);
    uint64_t seq = ms__fk_observe(MS_FAKE_LAUNCH_BEGIN, &l, a->f, 0);
    k->fn(&l);
    ms__fk_observe(MS_FAKE_LAUNCH_END, &l, a->f, seq);
    ms__fk_um_kernel(false);
    free(args);
    pthread_mutex_lock(&ms__fk_lock);
    ms__fk_stats.launches++;
    ms__fk_stats.host_mapped_launches += host_args > 0;
    ms__fk_stats.host_mapped_args += host_args;
    pthread_mutex_unlock(&ms__fk_lock);
    return CUDA_SUCCESS;
}

CUresult ms__fk_pack_params(CUfunction f, void **params, void **out, size_t *out_bytes)
{
    struct fk_kernel *k = kernel_of(f);
    if (!k)
        return CUDA_ERROR_INVALID_HANDLE;
    *out = NULL;
    *out_bytes = k->param_bytes;
    if (k->nparams == 0)
        return CUDA_SUCCESS;
    if (!params)
        return CUDA_ERROR_INVALID_VALUE;
    char *buf = calloc(1, k->param_bytes);
    if (!buf)
        return CUDA_ERROR_OUT_OF_MEMORY;
    for (size_t i = 0; i < k->nparams; i++)
        memcpy(buf + k->offsets[i], params[i], k->sizes[i]);
    *out = buf;
    return CUDA_SUCCESS;
}

CUresult ms__fk_param_offsets(CUfunction f, size_t *n, const size_t **offsets)
{
    struct fk_kernel *k = kernel_of(f);
    if (!k)
        return CUDA_ERROR_INVALID_HANDLE;
    *n = k->nparams;
    *offsets = k->offsets;
    return CUDA_SUCCESS;
}

CUresult ms__fk_launch_packed(CUfunction f, const unsigned grid[3], const unsigned block[3],
                              unsigned smem, CUstream stream, void *buf, size_t bytes)
{
    size_t size = bytes;
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                     CU_LAUNCH_PARAM_END};
    struct launch_args a = {
        f,    {grid[0], grid[1], grid[2]}, {block[0], block[1], block[2]}, smem, stream,
        NULL, buf ? extra : NULL};
    return launch(&a);
}

#define LAUNCH_FN(name)                                                                            \
    CUresult CUDAAPI name(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,              \
                          unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,   \
                          unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,   \
                          void **kernelParams, void **extra)                                       \
    {                                                                                              \
        struct launch_args a = {f,                                                                 \
                                {gridDimX, gridDimY, gridDimZ},                                    \
                                {blockDimX, blockDimY, blockDimZ},                                 \
                                sharedMemBytes,                                                    \
                                hStream,                                                           \
                                kernelParams,                                                      \
                                extra};                                                            \
        return launch(&a);                                                                         \
    }

#define LAUNCH_COOP_FN(name)                                                                       \
    CUresult CUDAAPI name(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,              \
                          unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,   \
                          unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,   \
                          void **kernelParams)                                                     \
    {                                                                                              \
        struct launch_args a = {f,                                                                 \
                                {gridDimX, gridDimY, gridDimZ},                                    \
                                {blockDimX, blockDimY, blockDimZ},                                 \
                                sharedMemBytes,                                                    \
                                hStream,                                                           \
                                kernelParams,                                                      \
                                NULL};                                                             \
        return launch(&a);                                                                         \
    }

#define LAUNCH_EX_FN(name)                                                                         \
    CUresult CUDAAPI name(const CUlaunchConfig *config, CUfunction f, void **kernelParams,         \
                          void **extra)                                                            \
    {                                                                                              \
        if (!config)                                                                               \
            return ms__fk_inited() != CUDA_SUCCESS ? CUDA_ERROR_NOT_INITIALIZED                    \
                                                   : CUDA_ERROR_INVALID_VALUE;                     \
        struct launch_args a = {f,                                                                 \
                                {config->gridDimX, config->gridDimY, config->gridDimZ},            \
                                {config->blockDimX, config->blockDimY, config->blockDimZ},         \
                                config->sharedMemBytes,                                            \
                                config->hStream,                                                   \
                                kernelParams,                                                      \
                                extra};                                                            \
        return launch(&a);                                                                         \
    }

LAUNCH_FN(cuLaunchKernel)
LAUNCH_FN(cuLaunchKernel_ptsz)
LAUNCH_COOP_FN(cuLaunchCooperativeKernel)
LAUNCH_COOP_FN(cuLaunchCooperativeKernel_ptsz)
LAUNCH_EX_FN(cuLaunchKernelEx)
LAUNCH_EX_FN(cuLaunchKernelEx_ptsz)

/*
 * The legacy launch API (deprecated, still exported): the block shape, the shared memory and
 * the parameter bytes are set on the function beforehand, and cuLaunch / cuLaunchGrid /
 * cuLaunchGridAsync launch it with them (packed, as `extra` passes them). A launch takes a
 * copy of the bytes, so the next cuParamSet* does not change a launch already made.
 */
static CUresult legacy_set(CUfunction f, size_t off, const void *src, size_t n)
{
    struct fk_kernel *k = kernel_of(f);
    if (!k)
        return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&ms__fk_lock);
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    if (off <= k->legacy_bytes && n <= k->legacy_bytes - off && (src || n == 0)) {
        if (n)
            memcpy(k->legacy_params + off, src, n);
        rc = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&ms__fk_lock);
    return rc;
}

CUresult CUDAAPI cuParamSetSize(CUfunction hfunc, unsigned int numbytes)
{
    struct fk_kernel *k = kernel_of(hfunc);
    if (!k)
        return CUDA_ERROR_INVALID_HANDLE;
    if (numbytes > 32768)
        return CUDA_ERROR_INVALID_VALUE;
    uint8_t *p = numbytes ? calloc(1, numbytes) : NULL;
    if (numbytes && !p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&ms__fk_lock);
    uint8_t *old = k->legacy_params;
    k->legacy_params = p;
    k->legacy_bytes = numbytes;
    pthread_mutex_unlock(&ms__fk_lock);
    free(old);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuParamSetv(CUfunction hfunc, int offset, void *ptr, unsigned int numbytes)
{
    return offset < 0 ? CUDA_ERROR_INVALID_VALUE : legacy_set(hfunc, (size_t)offset, ptr, numbytes);
}

CUresult CUDAAPI cuParamSeti(CUfunction hfunc, int offset, unsigned int value)
{
    return offset < 0 ? CUDA_ERROR_INVALID_VALUE
                      : legacy_set(hfunc, (size_t)offset, &value, sizeof value);
}

CUresult CUDAAPI cuParamSetf(CUfunction hfunc, int offset, float value)
{
    return offset < 0 ? CUDA_ERROR_INVALID_VALUE
                      : legacy_set(hfunc, (size_t)offset, &value, sizeof value);
}

CUresult CUDAAPI cuFuncSetBlockShape(CUfunction hfunc, int x, int y, int z)
{
    struct fk_kernel *k = kernel_of(hfunc);
    if (!k)
        return CUDA_ERROR_INVALID_HANDLE;
    if (x <= 0 || y <= 0 || z <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&ms__fk_lock);
    k->legacy_block[0] = (unsigned int)x;
    k->legacy_block[1] = (unsigned int)y;
    k->legacy_block[2] = (unsigned int)z;
    pthread_mutex_unlock(&ms__fk_lock);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuFuncSetSharedSize(CUfunction hfunc, unsigned int bytes)
{
    struct fk_kernel *k = kernel_of(hfunc);
    if (!k)
        return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&ms__fk_lock);
    k->legacy_smem = bytes;
    pthread_mutex_unlock(&ms__fk_lock);
    return CUDA_SUCCESS;
}

static CUresult legacy_launch(CUfunction f, int w, int h, CUstream stream)
{
    struct fk_kernel *k = kernel_of(f);
    if (!k)
        return CUDA_ERROR_INVALID_HANDLE;
    if (w <= 0 || h <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&ms__fk_lock);
    size_t bytes = k->legacy_bytes;
    unsigned int block[3] = {k->legacy_block[0], k->legacy_block[1], k->legacy_block[2]};
    unsigned int smem = k->legacy_smem;
    uint8_t *copy = bytes ? malloc(bytes) : NULL;
    if (copy)
        memcpy(copy, k->legacy_params, bytes);
    pthread_mutex_unlock(&ms__fk_lock);
    if (bytes && !copy)
        return CUDA_ERROR_OUT_OF_MEMORY;
    const unsigned int grid[3] = {(unsigned int)w, (unsigned int)h, 1};
    CUresult rc = ms__fk_launch_packed(f, grid, block, smem, stream, copy, bytes);
    free(copy);
    return rc;
}

CUresult CUDAAPI cuLaunch(CUfunction f)
{
    return legacy_launch(f, 1, 1, NULL);
}

CUresult CUDAAPI cuLaunchGrid(CUfunction f, int grid_width, int grid_height)
{
    return legacy_launch(f, grid_width, grid_height, NULL);
}

CUresult CUDAAPI cuLaunchGridAsync(CUfunction f, int grid_width, int grid_height, CUstream hStream)
{
    return legacy_launch(f, grid_width, grid_height, hStream);
}

/*
 * Two functions only tests call, chosen for their argument passing: floats in vector registers,
 * and a seventh argument on the stack. They check their arguments against fixed values, so a
 * forwarder that loses a register or the stack argument fails (CUDA_ERROR_INVALID_VALUE). Both
 * work before cuInit, so a test can make one of them the process's first driver call.
 */
CUresult CUDAAPI cuTexRefSetMipmapLevelClamp(CUtexref hTexRef, float minMipmapLevelClamp,
                                             float maxMipmapLevelClamp)
{
    bool ok =
        hTexRef == (CUtexref)0x7e7 && minMipmapLevelClamp == 1.5f && maxMipmapLevelClamp == 2.5f;
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuOccupancyMaxPotentialBlockSizeWithFlags(
    int *minGridSize, int *blockSize, CUfunction func,
    CUoccupancyB2DSize blockSizeToDynamicSMemSize, size_t dynamicSMemSize, int blockSizeLimit,
    unsigned int flags)
{
    if (!minGridSize || !blockSize || func != (CUfunction)0xf00 || blockSizeToDynamicSMemSize ||
        dynamicSMemSize != 123 || blockSizeLimit != 456 || flags != 789)
        return CUDA_ERROR_INVALID_VALUE;
    *minGridSize = 7;
    *blockSize = 8;
    return CUDA_SUCCESS;
}
