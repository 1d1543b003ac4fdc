/*
 * fake_sanitizer.c - a stand-in for libsanitizer-public.so over the fake CUDA driver, so the
 * profiler (shim/profile.c with its Compute Sanitizer touch source, shim/profile_san.c) runs
 * end to end in CI against touches that are known exactly.
 *
 * Design
 *   Only what the touch source calls: subscribing, enabling domains, adding patches, patching
 *   instructions and modules, callback data, device memory (host memory here: the fake's
 *   device pointers are host addresses), copies, result strings. Events come from the fake
 *   driver, found by dlopening it at MSCHED_REAL_LIBCUDA (the object libmsched loaded): its
 *   launch observer (ms_fake_set_launch_observer) drives the subscriber's LAUNCH_BEGIN and
 *   LAUNCH_END callbacks, in the launching thread; just before the first launch, one
 *   MODULE_LOADED for a single fake module holding every kernel (its image the text
 *   FAKE_MODULE_IMAGE; lazy loading, as CUDA 12+ does by default).
 *
 *   What the device patch would mark is done here at LAUNCH_END, with the record's own lookup
 *   (shim/profile_patch.h), from what the kernel declared (ms_fake_touch_drain): every granule
 *   of a read or written range, in its region, gets the read or written bit, a range outside
 *   every region counts in `outside`, and a bulk (TMA) copy sets MS_PROF_OPAQUE. Only as the
 *   real patch would: nothing is marked unless the patch image was added (it must be a
 *   fatbin), ms_prof_access was patched on GLOBAL_MEMORY_ACCESS and the module was patched;
 *   the opaque flag needs a bulk or TMA instruction patched. As on the real GPU (an H100 answered
 *   sanitizerPatchInstructions with an invalid parameter), patching fails unless the patch image
 *   holds code the fake GPU (compute capability 9.0) runs: its fatbin must name sm_90. A kernel
 *   whose name starts with
 *   "cluster_" is reported as launched with a cluster of 2 blocks.
 *
 *   FAKE_SANITIZER_FAIL=<function> makes that entry point fail (SANITIZER_ERROR_UNKNOWN), to
 *   test the source's error paths.
 */
#include "gpu/fakecuda/fakecuda.h"
#include "shim/profile_patch.h"

#include <sanitizer_callbacks.h>
#include <sanitizer_memory.h>
#include <sanitizer_patching.h>
#include <sanitizer_result.h>

#include <dlfcn.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))
#define FAKE_MODULE_IMAGE "fake module image: every registered kernel"

static Sanitizer_CallbackFunc cb;
static void *cb_user;
static bool dom_launch, dom_resource;
static bool patches_added, access_patched, bulk_patched, module_patched, module_loaded;
static bool patch_runs;  /* the patch image has code for the fake GPU's sm_90 */
static char fake_module; /* its address is the CUmodule */
static ms_fake_touch_drain_fn drain;
/* callback data: per launch (sanitizerSetLaunchCallbackData) and per function */
static uint64_t data_seq;
static const void *data_launch;
static struct {
    CUfunction f;
    const void *data;
} fdata[256];

static SanitizerResult fail(const char *name)
{
    const char *f = getenv("FAKE_SANITIZER_FAIL");
    return f && strcmp(f, name) == 0 ? SANITIZER_ERROR_UNKNOWN : SANITIZER_SUCCESS;
}

static const void *data_for(uint64_t seq, CUfunction f)
{
    if (data_seq == seq)
        return data_launch;
    for (size_t i = 0; i < 256; i++)
        if (fdata[i].f == f)
            return fdata[i].data;
    return NULL;
}

static void mark(struct ms_prof_dev *d, const struct ms_fake_touch *t)
{
    if (t->mode & MS_FAKE_TOUCH_BULK) {
        if (bulk_patched)
            d->flags |= MS_PROF_OPAQUE;
        return;
    }
    uint32_t m = (uint32_t)t->mode & (MS_PROF_READ | MS_PROF_WRITE);
    if (!m || !t->bytes)
        return;
    /* One access per granule of the range, as a kernel sweeping it would make. */
    uint64_t a = t->addr, end = t->addr + t->bytes;
    while (a < end) {
        int32_t i = ms_prof_find(d, a);
        if (i < 0) {
            d->outside++;
            a = ((a >> MS_PROF_GRANULE_SHIFT) + 1) << MS_PROF_GRANULE_SHIFT;
            continue;
        }
        uint64_t g = ms_prof_granule_in(d, i, a);
        *ms_prof_word(d, g) |= ms_prof_mask(g, m);
        uint64_t base = d->reg[i].base;
        a = base + ((((a - base) >> MS_PROF_GRANULE_SHIFT) + 1) << MS_PROF_GRANULE_SHIFT);
    }
}

static void observe(void *user, int phase, uint64_t seq, CUfunction f,
                    const struct ms_fake_launch *l)
{
    (void)user;
    if (!cb)
        return;
    if (phase == MS_FAKE_LAUNCH_BEGIN && dom_resource && !module_loaded) {
        module_loaded = true;
        Sanitizer_ResourceModuleData md;
        memset(&md, 0, sizeof md);
        md.module = (CUmodule)(void *)&fake_module;
        md.pCubin = FAKE_MODULE_IMAGE;
        md.cubinSize = sizeof FAKE_MODULE_IMAGE - 1;
        cb(cb_user, SANITIZER_CB_DOMAIN_RESOURCE, SANITIZER_CBID_RESOURCE_MODULE_LOADED, &md);
    }
    if (!dom_launch)
        return;
    Sanitizer_LaunchData ld;
    memset(&ld, 0, sizeof ld);
    ld.stream = l->stream;
    ld.hStream = (Sanitizer_StreamHandle)(uintptr_t)(l->stream ? (uintptr_t)l->stream : 1);
    ld.module = module_loaded ? (CUmodule)(void *)&fake_module : NULL;
    ld.function = f;
    ld.functionName = l->name;
    ld.gridDim_x = l->grid[0], ld.gridDim_y = l->grid[1], ld.gridDim_z = l->grid[2];
    ld.blockDim_x = l->block[0], ld.blockDim_y = l->block[1], ld.blockDim_z = l->block[2];
    bool cluster = strncmp(l->name, "cluster_", 8) == 0;
    ld.clusterDim_x = cluster ? 2 : 1;
    ld.clusterDim_y = ld.clusterDim_z = 1;
    ld.gridId = seq;
    ld.hLaunch = (Sanitizer_LaunchHandle)(uintptr_t)seq;
    if (phase == MS_FAKE_LAUNCH_BEGIN) {
        cb(cb_user, SANITIZER_CB_DOMAIN_LAUNCH, SANITIZER_CBID_LAUNCH_BEGIN, &ld);
        return;
    }
    struct ms_fake_touch t[256];
    size_t n;
    struct ms_prof_dev *d = (struct ms_prof_dev *)(uintptr_t)data_for(seq, f);
    bool live = patches_added && access_patched && module_patched;
    while ((n = drain(t, 256)) > 0)
        for (size_t i = 0; i < n; i++)
            if (d && live && t[i].launch == seq)
                mark(d, &t[i]);
    cb(cb_user, SANITIZER_CB_DOMAIN_LAUNCH, SANITIZER_CBID_LAUNCH_END, &ld);
}

EXPORT SanitizerResult sanitizerSubscribe(Sanitizer_SubscriberHandle *sub,
                                          Sanitizer_CallbackFunc callback, void *userdata)
{
    if (!sub || !callback)
        return SANITIZER_ERROR_INVALID_PARAMETER;
    if (fail("sanitizerSubscribe"))
        return SANITIZER_ERROR_UNKNOWN;
    const char *path = getenv("MSCHED_REAL_LIBCUDA");
    void *h = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
    ms_fake_set_launch_observer_fn set = NULL;
    *(void **)&set = h ? dlsym(h, "ms_fake_set_launch_observer") : NULL;
    *(void **)&drain = h ? dlsym(h, "ms_fake_touch_drain") : NULL;
    if (!set || !drain)
        return SANITIZER_ERROR_NOT_INITIALIZED;
    cb = callback;
    cb_user = userdata;
    *sub = (Sanitizer_SubscriberHandle)(void *)&cb;
    set(observe, NULL);
    return SANITIZER_SUCCESS;
}

EXPORT SanitizerResult sanitizerEnableDomain(uint32_t enable, Sanitizer_SubscriberHandle sub,
                                             Sanitizer_CallbackDomain domain)
{
    if (sub != (Sanitizer_SubscriberHandle)(void *)&cb)
        return SANITIZER_ERROR_INVALID_PARAMETER;
    if (domain == SANITIZER_CB_DOMAIN_LAUNCH)
        dom_launch = enable != 0;
    else if (domain == SANITIZER_CB_DOMAIN_RESOURCE)
        dom_resource = enable != 0;
    return fail("sanitizerEnableDomain");
}

EXPORT SanitizerResult sanitizerAddPatches(const void *image, CUcontext ctx)
{
    (void)ctx;
    uint32_t magic = 0;
    if (!image)
        return SANITIZER_ERROR_INVALID_PARAMETER;
    memcpy(&magic, image, 4);
    if (magic != 0xba55ed50u)
        return SANITIZER_ERROR_INVALID_PARAMETER; /* not a fatbin */
    if (fail("sanitizerAddPatches"))
        return SANITIZER_ERROR_UNKNOWN;
    uint64_t fat = 0; /* a fatbin: 16 header bytes, then fat bytes of entries */
    memcpy(&fat, (const char *)image + 8, 8);
    patch_runs = fat < (1ull << 30) && memmem(image, 16 + fat, "sm_90", 5) != NULL;
    patches_added = true;
    return SANITIZER_SUCCESS;
}

EXPORT SanitizerResult sanitizerPatchInstructions(const Sanitizer_InstructionId id, CUmodule module,
                                                  const char *name)
{
    if (module != (CUmodule)(void *)&fake_module || !name || !patches_added || !patch_runs)
        return SANITIZER_ERROR_INVALID_PARAMETER;
    if (id == SANITIZER_INSTRUCTION_GLOBAL_MEMORY_ACCESS && strcmp(name, "ms_prof_access") == 0)
        access_patched = true;
    if (id == SANITIZER_INSTRUCTION_BULK_COPY_GLOBAL_TO_SHARED ||
        id == SANITIZER_INSTRUCTION_TMA_LOAD)
        bulk_patched = true;
    return fail("sanitizerPatchInstructions");
}

EXPORT SanitizerResult sanitizerPatchModule(CUmodule module)
{
    if (module != (CUmodule)(void *)&fake_module)
        return SANITIZER_ERROR_INVALID_PARAMETER;
    module_patched = true;
    return fail("sanitizerPatchModule");
}

EXPORT SanitizerResult sanitizerSetCallbackData(CUfunction f, const void *data)
{
    for (size_t i = 0; i < 256; i++)
        if (fdata[i].f == f || !fdata[i].f) {
            fdata[i].f = f;
            fdata[i].data = data;
            return fail("sanitizerSetCallbackData");
        }
    return SANITIZER_ERROR_OUT_OF_MEMORY;
}

EXPORT SanitizerResult sanitizerSetLaunchCallbackData(Sanitizer_LaunchHandle launch, CUfunction f,
                                                      Sanitizer_StreamHandle stream,
                                                      const void *data)
{
    (void)f, (void)stream;
    data_seq = (uint64_t)(uintptr_t)launch;
    data_launch = data;
    return fail("sanitizerSetCallbackData");
}

EXPORT SanitizerResult sanitizerAlloc(CUcontext ctx, void **p, size_t size)
{
    (void)ctx;
    if (!p || !size)
        return SANITIZER_ERROR_INVALID_PARAMETER;
    if (fail("sanitizerAlloc"))
        return SANITIZER_ERROR_UNKNOWN;
    *p = aligned_alloc(64, (size + 63) & ~(size_t)63);
    return *p ? SANITIZER_SUCCESS : SANITIZER_ERROR_OUT_OF_MEMORY;
}

EXPORT SanitizerResult sanitizerFree(CUcontext ctx, void *p)
{
    (void)ctx;
    free(p);
    return SANITIZER_SUCCESS;
}

EXPORT SanitizerResult sanitizerMemcpyHostToDeviceAsync(void *dst, void *src, size_t n,
                                                        Sanitizer_StreamHandle stream)
{
    (void)stream;
    if (!dst || !src)
        return SANITIZER_ERROR_INVALID_PARAMETER;
    memcpy(dst, src, n);
    return SANITIZER_SUCCESS;
}

EXPORT SanitizerResult sanitizerMemcpyDeviceToHost(void *dst, void *src, size_t n,
                                                   Sanitizer_StreamHandle stream)
{
    (void)stream;
    if (!dst || !src)
        return SANITIZER_ERROR_INVALID_PARAMETER;
    if (fail("sanitizerMemcpyDeviceToHost"))
        return SANITIZER_ERROR_UNKNOWN;
    memcpy(dst, src, n);
    return SANITIZER_SUCCESS;
}

EXPORT SanitizerResult sanitizerGetResultString(SanitizerResult r, const char **str)
{
    if (!str)
        return SANITIZER_ERROR_INVALID_PARAMETER;
    *str = r == SANITIZER_SUCCESS ? "success" : "fake Sanitizer error";
    return SANITIZER_SUCCESS;
}
