/*
 * shim.c - libmsched's loader: find the real driver, fill the forwarding slots, and the
 * process-wide plumbing (configuration, logging, fork, exit).
 *
 * Design
 *   libmsched is installed as libcuda.so.1 in msched's own directory and found first on the
 *   library path (or preloaded, shim/preload.c). It must therefore load the *real* driver
 *   itself, by absolute path, and never itself: a self-lookup through RTLD_DEFAULT recurses
 *   (HAMi-core #215). Candidates, in order:
 *     1. $MSCHED_REAL_LIBCUDA;
 *     2. libcuda.so.1 in each directory of $LD_LIBRARY_PATH;
 *     3. the usual driver locations (Debian/Ubuntu multiarch, RHEL lib64, the NVIDIA container
 *        toolkit's /usr/local/nvidia, WSL).
 *   A candidate is rejected when it is the same file as libmsched (device and inode of the
 *   mapping that holds this code, from /proc/self/maps), when it exports ms_shim_marker
 *   (another libmsched build), or when it does not export cuInit. It is opened RTLD_NOW |
 *   RTLD_LOCAL and never through RTLD_DEFAULT. Not RTLD_DEEPBIND: it would bind the driver to
 *   the C library's malloc even where the application preloads another one, and it is refused
 *   by the sanitizers.
 *
 *   Initialisation is lazy (first call of any driver function, through a hook or a
 *   trampoline's slow path) and runs once (pthread_once): a process that merely loads
 *   libmsched, or a shell that inherits LD_PRELOAD, never loads a driver. It reads the
 *   environment once, loads the driver, resolves every exported symbol into its slot and
 *   registers the fork handlers. A symbol the driver lacks gets a stub that returns
 *   CUDA_ERROR_NOT_FOUND; without any driver every slot returns CUDA_ERROR_NOT_INITIALIZED and
 *   cuInit returns CUDA_ERROR_NO_DEVICE, as on a machine without GPUs. Every exported driver
 *   function returns CUresult, so one stub fits all of them (arguments are ignored; the
 *   caller cleans up its own stack on x86-64).
 *
 * Invariants
 *   - Slots go from NULL to their final value once (release store); readers use acquire loads
 *     (or plain loads in the trampolines: x86-64 orders them).
 *   - A driver call made while the driver is being loaded (its constructors calling back into
 *     libcuda) gets CUDA_ERROR_NOT_INITIALIZED instead of deadlocking on the once-guard.
 *   - fork: ms__shim_lock is held across fork() by the prepare handler and re-initialised in
 *     the child, so the child never inherits a lock held by a thread that does not exist there.
 */
#include "shim/shim_int.h"
#include "shim/client.h"
#include "shim/engine.h"
#include "shim/hostmem.h"

#include "shim/procaddr.h"
#include "shim/shim_events.h"

#include "core/units.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

void *ms__shim_slots[MS_SYM_COUNT];
pthread_mutex_t ms__shim_lock = PTHREAD_MUTEX_INITIALIZER;

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static bool initialized;           /* init finished (atomic access) */
static bool verbose;               /* MSCHED_VERBOSE set and not "0" */
static void *real_handle;          /* the real driver, NULL when none was found */
static _Thread_local bool in_init; /* this thread is running init (driver constructors) */

typedef void *(*dlsym_fn)(void *, const char *);
static dlsym_fn libc_dlsym; /* atomic access */

/* The hooks of shim/hooks.def, by symbol index; NULL for forwarded symbols. */
#define MS_HOOK(name) [MS_SYM_##name] = (void *)&name,
static void *const hooks[MS_SYM_COUNT] = {
#include "shim/hooks.def"
};
#undef MS_HOOK

/* Marker that lets a second libmsched recognise this one as "not a real driver". */
__attribute__((visibility("default"))) int ms_shim_marker(void);
int ms_shim_marker(void)
{
    return 1;
}

static CUresult stub_missing(void)
{
    return CUDA_ERROR_NOT_FOUND;
}

static CUresult stub_no_driver(void)
{
    return CUDA_ERROR_NOT_INITIALIZED;
}

static CUresult stub_no_device(void)
{
    return CUDA_ERROR_NO_DEVICE;
}

/* ------------------------------------------------------------------------------------------ */
/* Logging and configuration                                                                    */

bool ms__shim_verbose(void)
{
    return verbose;
}

void ms__shim_log(const char *fmt, ...)
{
    if (!verbose)
        return;
    char buf[1024];
    int n = snprintf(buf, sizeof buf, "msched[%d]: ", (int)getpid());
    if (n < 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : MS_MIN((size_t)m, sizeof buf - (size_t)n - 2));
    buf[len++] = '\n';
    ssize_t w = write(2, buf, len);
    (void)w;
}

void ms__shim_wallclock(const struct timespec *at, char *buf, size_t n)
{
    struct tm tm;
    time_t sec = at->tv_sec;
    localtime_r(&sec, &tm);
    size_t k = strftime(buf, n, "%Y-%m-%dT%H:%M:%S", &tm);
    if (k && k + 5 <= n)
        snprintf(buf + k, n - k, ".%03ld", at->tv_nsec / 1000000L);
}

static const char *env(const char *name)
{
    const char *v = secure_getenv(name);
    return v && *v ? v : NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* Finding the real driver                                                                      */

void *ms__shim_libc_dlsym(void *handle, const char *name)
{
    dlsym_fn f = __atomic_load_n(&libc_dlsym, __ATOMIC_ACQUIRE);
    if (!f) {
        /* RTLD_NEXT from here skips libmsched (whose preload build exports its own dlsym). */
        static const char *const versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17"};
        for (size_t i = 0; !f && i < MS_ARRAY_LEN(versions); i++)
            f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", versions[i]);
        if (!f) {
            MS_LOG_ONCE("cannot find the C library's dlsym; driver symbols will be missing");
            return NULL;
        }
        __atomic_store_n(&libc_dlsym, f, __ATOMIC_RELEASE);
    }
    return f(handle, name);
}

/* Device and inode of the file mapped at this code's address (the libmsched being run). */
static bool self_identity(dev_t *dev, ino_t *ino)
{
    uintptr_t here = (uintptr_t)&self_identity;
    FILE *f = fopen("/proc/self/maps", "re");
    if (f) {
        char line[4096];
        while (fgets(line, sizeof line, f)) {
            unsigned long lo, hi, off, inode;
            unsigned maj, min;
            char perms[8];
            if (sscanf(line, "%lx-%lx %7s %lx %x:%x %lu", &lo, &hi, perms, &off, &maj, &min,
                       &inode) == 7 &&
                here >= lo && here < hi) {
                fclose(f);
                *dev = makedev(maj, min);
                *ino = (ino_t)inode;
                return true;
            }
        }
        fclose(f);
    }
    Dl_info info;
    struct stat st;
    if (dladdr((void *)&self_identity, &info) && info.dli_fname && stat(info.dli_fname, &st) == 0) {
        *dev = st.st_dev;
        *ino = st.st_ino;
        return true;
    }
    return false;
}

static void *try_load(const char *path, bool have_self, dev_t self_dev, ino_t self_ino)
{
    struct stat st;
    char abs[PATH_MAX];
    if (stat(path, &st) != 0)
        return NULL;
    if (realpath(path, abs))
        path = abs; /* by absolute path, also for relative $LD_LIBRARY_PATH entries */
    if (have_self && st.st_dev == self_dev && st.st_ino == self_ino) {
        ms__shim_log("skipping %s: it is libmsched itself", path);
        return NULL;
    }
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        ms__shim_log("cannot load %s: %s", path, why ? why : "unknown error");
        return NULL;
    }
    if (ms__shim_libc_dlsym(h, "ms_shim_marker")) {
        ms__shim_log("skipping %s: it is another libmsched", path);
        dlclose(h);
        return NULL;
    }
    if (!ms__shim_libc_dlsym(h, "cuInit")) {
        ms__shim_log("skipping %s: it does not export cuInit", path);
        dlclose(h);
        return NULL;
    }
    ms__shim_log("real driver: %s", path);
    return h;
}

static void *find_driver(void)
{
    static const char *const standard[] = {
        "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
        "/usr/lib64/libcuda.so.1",
        "/usr/local/nvidia/lib64/libcuda.so.1",
        "/usr/local/nvidia/lib/libcuda.so.1",
        "/usr/lib/wsl/lib/libcuda.so.1",
        "/lib/x86_64-linux-gnu/libcuda.so.1",
        "/lib64/libcuda.so.1",
        "/usr/lib/libcuda.so.1",
    };
    dev_t sdev = 0;
    ino_t sino = 0;
    bool have_self = self_identity(&sdev, &sino);
    if (!have_self)
        MS_LOG_ONCE("cannot identify libmsched's own file; relying on ms_shim_marker");

    void *h = NULL;
    const char *explicit_path = env("MSCHED_REAL_LIBCUDA");
    if (explicit_path) {
        h = try_load(explicit_path, have_self, sdev, sino);
        if (!h)
            ms__shim_log("MSCHED_REAL_LIBCUDA=%s is not usable; searching", explicit_path);
    }
    const char *llp = env("LD_LIBRARY_PATH");
    while (!h && llp && *llp) {
        const char *end = strchr(llp, ':');
        size_t n = end ? (size_t)(end - llp) : strlen(llp);
        char path[4096];
        if (n > 0 && n < sizeof path - 16) {
            memcpy(path, llp, n);
            memcpy(path + n, "/libcuda.so.1", sizeof "/libcuda.so.1");
            h = try_load(path, have_self, sdev, sino);
        }
        llp = end ? end + 1 : NULL;
    }
    for (size_t i = 0; !h && i < MS_ARRAY_LEN(standard); i++)
        h = try_load(standard[i], have_self, sdev, sino);
    return h;
}

/* ------------------------------------------------------------------------------------------ */
/* Initialisation, fork, exit                                                                   */

static void atfork_prepare(void)
{
    pthread_mutex_lock(&ms__shim_lock);
}

static void atfork_parent(void)
{
    pthread_mutex_unlock(&ms__shim_lock);
}

static void atfork_child(void)
{
    pthread_mutex_init(&ms__shim_lock, NULL);
    ms__shim_events_atfork_child();
    ms__host_atfork_child();
    ms_engine_atfork_child();
}

static void init_once_fn(void)
{
    in_init = true;
    const char *v = env("MSCHED_VERBOSE");
    verbose = v && strcmp(v, "0") != 0;

    void *h = find_driver();
    unsigned missing = 0;
    for (unsigned i = 0; i < MS_SYM_COUNT; i++) {
        void *p = h ? ms__shim_libc_dlsym(h, ms_gen_sym_names[i]) : NULL;
        if (!p) {
            missing += h != NULL;
            p = h ? (void *)&stub_missing : (void *)&stub_no_driver;
        }
        if (!h && i == MS_SYM_cuInit)
            p = (void *)&stub_no_device;
        __atomic_store_n(&ms__shim_slots[i], p, __ATOMIC_RELEASE);
    }
    real_handle = h;
    if (!h)
        ms__shim_log("no real CUDA driver found (set MSCHED_REAL_LIBCUDA); cuInit will report "
                     "CUDA_ERROR_NO_DEVICE");
    else if (missing)
        ms__shim_log("the driver lacks %u of the %d symbols libmsched exports; they return "
                     "CUDA_ERROR_NOT_FOUND",
                     missing, MS_SYM_COUNT);

    ms__shim_events_init(env("MSCHED_TRACE"));
    uint64_t budget = 0;
    const char *b = env("MSCHED_BUDGET");
    if (b && ms_parse_size(b, &budget) != MS_OK) {
        ms__shim_log("MSCHED_BUDGET=%s is not a size (e.g. 17179869184 or 16GiB); ignored", b);
        budget = 0;
    }
    ms_client_configure(env("MSCHED_DAEMON"), env("MSCHED_PRIORITY"), env("MSCHED_WEIGHT"),
                        env("MSCHED_IDLE_MS"), env("MSCHED_DAEMON_TIMEOUT_MS"));
    ms_engine_configure(budget, env("MSCHED_ENGINE"), env("MSCHED_STRICT"));
    uint64_t piece = MS_PIN_PIECE_DEFAULT;
    const char *pp = env("MSCHED_PIN_PIECE");
    if (pp && ms_parse_size(pp, &piece) != MS_OK) {
        ms__shim_log("MSCHED_PIN_PIECE=%s is not a size (e.g. 64MiB, or 0 for one call); host "
                     "stores are pinned in pieces of %llu MiB",
                     pp, (unsigned long long)(MS_PIN_PIECE_DEFAULT / MS_MIB));
        piece = MS_PIN_PIECE_DEFAULT;
    }
    ms__host_configure(piece);
    if (pthread_atfork(atfork_prepare, atfork_parent, atfork_child) != 0)
        ms__shim_log("pthread_atfork failed; a forked child may inherit a held lock");
    in_init = false;
    __atomic_store_n(&initialized, true, __ATOMIC_RELEASE);
}

void ms__shim_init(void)
{
    if (in_init)
        return;
    pthread_once(&init_once, init_once_fn);
}

void *ms__shim_real(unsigned idx)
{
    if (idx >= MS_SYM_COUNT)
        return (void *)&stub_missing;
    void *p = __atomic_load_n(&ms__shim_slots[idx], __ATOMIC_ACQUIRE);
    if (p)
        return p;
    if (in_init)
        return (void *)&stub_no_driver;
    ms__shim_init();
    p = __atomic_load_n(&ms__shim_slots[idx], __ATOMIC_ACQUIRE);
    return p ? p : (void *)&stub_no_driver;
}

void *ms__shim_resolve(unsigned idx)
{
    return ms__shim_real(idx);
}

void *ms__shim_real_handle(void)
{
    return __atomic_load_n(&initialized, __ATOMIC_ACQUIRE) ? real_handle : NULL;
}

void *ms__shim_hook_for(int idx)
{
    if (idx < 0 || idx >= MS_SYM_COUNT)
        return NULL;
    return hooks[idx];
}

__attribute__((destructor)) static void shim_fini(void)
{
    if (__atomic_load_n(&initialized, __ATOMIC_ACQUIRE)) {
        ms_engine_exit(verbose);
        ms__shim_events_exit(verbose);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* cuGetProcAddress                                                                             */

void *ms__shim_procaddr_wrap(const char *symbol, int cuda_version, cuuint64_t flags, void *real_fn)
{
    if (!symbol || !real_fn)
        return real_fn;
    bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    int sel = ms_procaddr_select(symbol, cuda_version, per_thread, NULL);

    /* The driver knows which ABI it handed out: when its answer is the address of exactly one
     * exported variant, that variant wins over the table's choice. */
    int vars[32], match = -1, nmatch = 0;
    int n = ms_procaddr_variants(symbol, vars, (int)MS_ARRAY_LEN(vars));
    for (int i = 0; i < n && i < (int)MS_ARRAY_LEN(vars); i++) {
        if (ms__shim_real((unsigned)vars[i]) == real_fn) {
            match = vars[i];
            nmatch++;
        }
    }
    if (nmatch == 1 && match != sel) {
        MS_LOG_ONCE("cuGetProcAddress(%s, %d, %#llx): driver chose %s, tables chose %s", symbol,
                    cuda_version, (unsigned long long)flags, ms_sym_name(match),
                    sel >= 0 ? ms_sym_name(sel) : "nothing");
        sel = match;
    }
    void *hook = ms__shim_hook_for(sel);
    ms_shim_on_procaddr(hook != NULL);
    return hook ? hook : real_fn;
}
