/*
 * profile_san.c - the profiler's touch source on the NVIDIA Compute Sanitizer API (the seam:
 * struct ms_touch_source in profile.h; the device record: profile_patch.h; the device patch:
 * shim/prof_patch.cu).
 *
 * Design
 *   libsanitizer-public.so is loaded with dlopen (MSCHED_SANITIZER=<path>, else found on the
 *   library path or in the toolkit's compute-sanitizer directory) and subscribed to at cuInit,
 *   before any module is loaded, for two callback domains:
 *     RESOURCE / MODULE_LOADED  the patch (embedded at build time) is added to the module's
 *               context once; the module's global memory accesses are patched to call
 *               ms_prof_access, its bulk copies and TMA loads to call the ms_prof_* functions
 *               that flag the launch opaque; the module is patched; and a 64-bit FNV-1a hash
 *               of its image is kept (module -> hash; `mod=` of its kernels' records). With
 *               lazy loading the callback may come inside a launch.
 *     LAUNCH / LAUNCH_BEGIN     in the launching thread, inside the driver's launch call: if
 *               this thread armed the source (profile.c, after synchronizing), the launch's
 *               record goes to device memory (sanitizerAlloc, kept and grown per context) on
 *               the launch's stream, and becomes the launch's callback data; a launch with a
 *               cluster of more than one block is opaque (distributed shared memory and
 *               multicast copies are not global accesses). Any other launch gets NULL callback
 *               data, so the patch returns at once (its call overhead remains: modules stay
 *               patched).
 *   collect copies the record back (sanitizerMemcpyDeviceToHost, synchronous) after profile.c
 *   synchronized the context.
 *
 *   Opaque rule: a launch is opaque when it ran with clusters (clusterDim product > 1) or when
 *   one of its bulk-copy or TMA-load instructions executed (the patch flags it at run time).
 *   TMA stores (cp.async.bulk.tensor shared -> global) have no callback type in the headers
 *   this was written against and are not patched: a kernel that only stores through TMA is
 *   reported with its other accesses only.
 *
 *   Status: written against the Sanitizer API headers of CUDA 13 (nvidia-cuda-sanitizer-api
 *   13.5) and exercised in CI only against the stand-in tests/shim/fake_sanitizer.c; it has
 *   never run on a GPU. Unverified above all: that the library accepts a subscriber started
 *   from inside the process after cuInit (NVIDIA's tools are injection libraries loaded by
 *   the driver through CUDA_INJECTION64_PATH); docs/shim.md lists the rest. Built without the
 * Sanitizer headers or without the device patch (no nvcc), start() says so and the profiler stays
 * off.
 *
 * Locking: the module table and the callback bookkeeping are under prof_rec (shim/locks.h),
 *   never held across a Sanitizer call that may call back.
 */
#include "shim/shim_int.h"
#include "shim/locks.h"
#include "shim/config.h"

#include "shim/profile.h"
#include "shim/profile_patch.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__has_include)
#if __has_include(<sanitizer_callbacks.h>)
#define MS_HAVE_SANITIZER 1
#endif
#endif

extern const char *const ms_prof_patch; /* generated from shim/prof_patch.cu; NULL without */

#ifdef MS_HAVE_SANITIZER
/* Not <sanitizer.h>: it declares stand-in v1 structures that the shim's cuda.h (with
 * __CUDA_API_VERSION_INTERNAL) defines for real. */
#include <sanitizer_callbacks.h>
#include <sanitizer_memory.h>
#include <sanitizer_patching.h>
#include <sanitizer_result.h>

#define MAX_MODULES 4096u
#define MAX_CTX 64u

static struct {
    __typeof__(&sanitizerSubscribe) subscribe;
    __typeof__(&sanitizerEnableDomain) enable_domain;
    __typeof__(&sanitizerAddPatches) add_patches;
    __typeof__(&sanitizerPatchInstructions) patch_insn;
    __typeof__(&sanitizerPatchModule) patch_module;
    __typeof__(&sanitizerSetCallbackData) set_data;
    __typeof__(&sanitizerSetLaunchCallbackData) set_launch_data; /* optional */
    __typeof__(&sanitizerAlloc) alloc;
    __typeof__(&sanitizerFree) free;
    __typeof__(&sanitizerMemcpyHostToDeviceAsync) h2d;
    __typeof__(&sanitizerMemcpyDeviceToHost) d2h;
    __typeof__(&sanitizerGetResultString) str;
} S;

struct module {
    CUmodule m;
    uint64_t hash;
};

static struct {
    struct ms_lock lock; /* prof_rec: everything below */
    Sanitizer_SubscriberHandle sub;
    void *patch; /* the patch image, 8-byte aligned */
    CUcontext patched_ctx[MAX_CTX];
    size_t npatched;
    struct module mods[MAX_MODULES];
    size_t nmods;
    char err[200]; /* the first error inside a callback */
    /* device record, reused while large enough and in the same context */
    void *dev;
    size_t dev_bytes;
    CUcontext dev_ctx;
} R = {.lock = MS_LOCK_INIT(MS_LK_PROF_REC, "prof_rec")};

/* The armed launch of this thread (arm -> LAUNCH_BEGIN -> collect). */
static _Thread_local struct {
    bool armed, seen, opaque;
    struct ms_prof_dev *host; /* the record, host copy */
    size_t bytes;
    void *dev;
    Sanitizer_StreamHandle stream;
    uint64_t mod;
} T;

static const char *san_err(SanitizerResult r)
{
    const char *s = NULL;
    if (!S.str || S.str(r, &s) != SANITIZER_SUCCESS || !s)
        return "unknown Sanitizer error";
    return s;
}

static void fail_cb(const char *what, SanitizerResult r)
{
    ms_lock(&R.lock);
    if (!R.err[0])
        snprintf(R.err, sizeof R.err, "%s: %s", what, san_err(r));
    ms_unlock(&R.lock);
}

static uint64_t fnv1a(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static void module_loaded(const Sanitizer_ResourceModuleData *md)
{
    uint64_t h = md->pCubin && md->cubinSize ? fnv1a(md->pCubin, md->cubinSize) : 0;
    bool need_patches = true;
    ms_lock(&R.lock);
    for (size_t i = 0; i < R.npatched && need_patches; i++)
        need_patches = R.patched_ctx[i] != md->context;
    if (R.nmods < MAX_MODULES)
        R.mods[R.nmods++] = (struct module){md->module, h};
    ms_unlock(&R.lock);
    SanitizerResult r;
    if (need_patches) {
        if ((r = S.add_patches(R.patch, md->context)) != SANITIZER_SUCCESS) {
            fail_cb("sanitizerAddPatches", r);
            return;
        }
        ms_lock(&R.lock);
        if (R.npatched < MAX_CTX)
            R.patched_ctx[R.npatched++] = md->context;
        ms_unlock(&R.lock);
    }
    static const struct {
        Sanitizer_InstructionId id;
        const char *fn;
    } patches[] = {
        {SANITIZER_INSTRUCTION_GLOBAL_MEMORY_ACCESS, "ms_prof_access"},
        {SANITIZER_INSTRUCTION_BULK_COPY_GLOBAL_TO_SHARED, "ms_prof_bulk_g2s"},
        {SANITIZER_INSTRUCTION_BULK_COPY_SHARED_TO_GLOBAL, "ms_prof_bulk_s2g"},
        {SANITIZER_INSTRUCTION_BULK_REDUCTION_SHARED_TO_GLOBAL, "ms_prof_bulk_red"},
#ifdef MS_SAN_TMA /* headers without it: tensor copies go unseen (docs/templates.md) */
        {SANITIZER_INSTRUCTION_TMA_LOAD, "ms_prof_tma_load"},
#endif
    };
    for (size_t i = 0; i < MS_ARRAY_LEN(patches); i++)
        if ((r = S.patch_insn(patches[i].id, md->module, patches[i].fn)) != SANITIZER_SUCCESS) {
            char what[96]; /* which patch point, which device function */
            snprintf(what, sizeof what, "sanitizerPatchInstructions (instruction %d, %s)",
                     (int)patches[i].id, patches[i].fn);
            fail_cb(what, r);
            return;
        }
    if ((r = S.patch_module(md->module)) != SANITIZER_SUCCESS)
        fail_cb("sanitizerPatchModule", r);
}

static SanitizerResult set_data(const Sanitizer_LaunchData *ld, const void *data)
{
    if (S.set_launch_data)
        return S.set_launch_data(ld->hLaunch, ld->function, ld->hStream, data);
    return S.set_data(ld->function, data);
}

static void launch_begin(const Sanitizer_LaunchData *ld)
{
    SanitizerResult r;
    if (!T.armed) {
        if ((r = set_data(ld, NULL)) != SANITIZER_SUCCESS)
            fail_cb("sanitizerSetCallbackData", r);
        return;
    }
    T.armed = false;
    T.seen = true;
    T.opaque = (uint64_t)ld->clusterDim_x * ld->clusterDim_y * ld->clusterDim_z > 1;
    ms_lock(&R.lock);
    for (size_t i = 0; i < R.nmods; i++)
        if (R.mods[i].m == ld->module)
            T.mod = R.mods[i].hash;
    void *dev = R.dev_ctx == ld->context && R.dev_bytes >= T.bytes ? R.dev : NULL;
    void *old = dev ? NULL : R.dev;
    CUcontext old_ctx = R.dev_ctx;
    R.dev = NULL;
    ms_unlock(&R.lock);
    if (old && S.free(old_ctx, old) != SANITIZER_SUCCESS)
        MS_LOG_ONCE("MSCHED_PROFILE: sanitizerFree failed (a device buffer leaks)");
    size_t bytes = dev ? 0 : T.bytes;
    if (!dev && (r = S.alloc(ld->context, &dev, T.bytes)) != SANITIZER_SUCCESS) {
        fail_cb("sanitizerAlloc", r);
        T.seen = false;
        set_data(ld, NULL);
        return;
    }
    ms_lock(&R.lock);
    R.dev = dev;
    R.dev_ctx = ld->context;
    if (bytes)
        R.dev_bytes = bytes;
    ms_unlock(&R.lock);
    T.dev = dev;
    T.stream = ld->hStream;
    if ((r = S.h2d(dev, T.host, T.bytes, ld->hStream)) != SANITIZER_SUCCESS ||
        (r = set_data(ld, dev)) != SANITIZER_SUCCESS) {
        fail_cb("copying the launch's record to the device", r);
        T.seen = false;
        set_data(ld, NULL);
    }
}

static void SANITIZERAPI callback(void *userdata, Sanitizer_CallbackDomain domain,
                                  Sanitizer_CallbackId cbid, const void *cbdata)
{
    (void)userdata;
    if (domain == SANITIZER_CB_DOMAIN_RESOURCE && cbid == SANITIZER_CBID_RESOURCE_MODULE_LOADED)
        module_loaded(cbdata);
    else if (domain == SANITIZER_CB_DOMAIN_LAUNCH && cbid == SANITIZER_CBID_LAUNCH_BEGIN)
        launch_begin(cbdata);
}

static void *open_sanitizer(void)
{
    const char *want = ms__shim_opt_text(MS_OPT_SANITIZER);
    if (want && *want)
        return dlopen(want, RTLD_NOW | RTLD_LOCAL);
    static const char *const names[] = {
        "libsanitizer-public.so", "/usr/local/cuda/compute-sanitizer/libsanitizer-public.so",
        "/usr/local/cuda/extras/compute-sanitizer/libsanitizer-public.so"};
    for (size_t i = 0; i < MS_ARRAY_LEN(names); i++) {
        void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (h)
            return h;
    }
    return NULL;
}

/* The embedded fatbin's size from its header (magic, version, header size, payload size). */
static size_t fatbin_bytes(const void *p)
{
    uint32_t magic;
    uint16_t hsize;
    uint64_t fsize;
    memcpy(&magic, p, 4);
    memcpy(&hsize, (const char *)p + 6, 2);
    memcpy(&fsize, (const char *)p + 8, 8);
    if (magic != 0xba55ed50u || hsize < 16 || fsize > (64u << 20))
        return 0;
    return hsize + (size_t)fsize;
}

static int san_start(char *why, size_t whylen)
{
    if (!ms_prof_patch) {
        snprintf(why, whylen,
                 "built without the device patch (nvcc and the Compute Sanitizer "
                 "headers are needed at build time)");
        return MS_E_NOTFOUND;
    }
    size_t n = fatbin_bytes(ms_prof_patch);
    if (!n || !(R.patch = aligned_alloc(8, (n + 7) & ~(size_t)7))) {
        snprintf(why, whylen, "the embedded device patch is not a fatbin");
        return MS_E_NOTFOUND;
    }
    memcpy(R.patch, ms_prof_patch, n);
    void *h = open_sanitizer();
    if (!h) {
        snprintf(why, whylen, "cannot load libsanitizer-public.so (set MSCHED_SANITIZER): %s",
                 dlerror());
        return MS_E_NOTFOUND;
    }
#define SYM(f, name)                                                                               \
    if (!(*(void **)&S.f = dlsym(h, name))) {                                                      \
        snprintf(why, whylen, "the Sanitizer library lacks %s", name);                             \
        return MS_E_NOTFOUND;                                                                      \
    }
    SYM(subscribe, "sanitizerSubscribe");
    SYM(enable_domain, "sanitizerEnableDomain");
    SYM(add_patches, "sanitizerAddPatches");
    SYM(patch_insn, "sanitizerPatchInstructions");
    SYM(patch_module, "sanitizerPatchModule");
    SYM(set_data, "sanitizerSetCallbackData");
    SYM(alloc, "sanitizerAlloc");
    SYM(free, "sanitizerFree");
    SYM(h2d, "sanitizerMemcpyHostToDeviceAsync");
    SYM(d2h, "sanitizerMemcpyDeviceToHost");
    SYM(str, "sanitizerGetResultString");
#undef SYM
    *(void **)&S.set_launch_data = dlsym(h, "sanitizerSetLaunchCallbackData");
    SanitizerResult r = S.subscribe(&R.sub, callback, NULL);
    if (r == SANITIZER_SUCCESS)
        r = S.enable_domain(1, R.sub, SANITIZER_CB_DOMAIN_RESOURCE);
    if (r == SANITIZER_SUCCESS)
        r = S.enable_domain(1, R.sub, SANITIZER_CB_DOMAIN_LAUNCH);
    if (r != SANITIZER_SUCCESS) {
        snprintf(why, whylen, "subscribing to the Sanitizer: %s", san_err(r));
        return MS_E_GPU;
    }
    return MS_OK;
}

static int san_arm(const struct ms_prof_region *regs, uint32_t nreg, uint64_t total, char *why,
                   size_t whylen)
{
    size_t bytes = MS_PROF_BYTES(nreg, total);
    if (bytes > T.bytes || !T.host) {
        free(T.host);
        T.host = aligned_alloc(16, (bytes + 15) & ~(size_t)15);
        T.bytes = T.host ? bytes : 0;
        if (!T.host) {
            snprintf(why, whylen, "out of memory for a %zu-byte record", bytes);
            return MS_E_NOMEM;
        }
    }
    T.bytes = bytes;
    memset(T.host, 0, bytes);
    T.host->nreg = nreg;
    T.host->total = total;
    memcpy(T.host->reg, regs, nreg * sizeof *regs);
    T.armed = true;
    T.seen = T.opaque = false;
    T.mod = 0;
    return MS_OK;
}

static int san_collect(struct ms_touch_result *out, char *why, size_t whylen)
{
    T.armed = false;
    ms_lock(&R.lock);
    bool failed = R.err[0] != '\0';
    if (failed)
        snprintf(why, whylen, "%s", R.err);
    ms_unlock(&R.lock);
    if (failed)
        return MS_E_GPU;
    memset(out, 0, sizeof *out);
    if (!T.seen)
        return MS_OK;
    SanitizerResult r = S.d2h(T.host, T.dev, T.bytes, T.stream);
    if (r != SANITIZER_SUCCESS) {
        snprintf(why, whylen, "sanitizerMemcpyDeviceToHost: %s", san_err(r));
        return MS_E_GPU;
    }
    out->seen = true;
    out->opaque = T.opaque || (T.host->flags & MS_PROF_OPAQUE);
    out->mod = T.mod;
    out->outside = T.host->outside;
    out->map = (const uint32_t *)((const char *)T.host + MS_PROF_BITS_OFF(T.host->nreg));
    return MS_OK;
}

static void san_atfork_child(void)
{
    ms_lock_reset(&R.lock);
    T.armed = false;
}

#else /* !MS_HAVE_SANITIZER */

static void san_atfork_child(void) {}

static int san_start(char *why, size_t whylen)
{
    snprintf(why, whylen, "built without the Compute Sanitizer headers");
    return MS_E_NOTFOUND;
}

static int san_arm(const struct ms_prof_region *regs, uint32_t nreg, uint64_t total, char *why,
                   size_t whylen)
{
    (void)regs, (void)nreg, (void)total;
    snprintf(why, whylen, "no touch source");
    return MS_E_NOTFOUND;
}

static int san_collect(struct ms_touch_result *out, char *why, size_t whylen)
{
    (void)out;
    snprintf(why, whylen, "no touch source");
    return MS_E_NOTFOUND;
}

#endif /* MS_HAVE_SANITIZER */

const struct ms_touch_source ms__prof_sanitizer = {
    .name = "compute-sanitizer",
    .start = san_start,
    .arm = san_arm,
    .collect = san_collect,
    .atfork_child = san_atfork_child,
};
