/*
 * driver.c - finding and loading the real CUDA driver, and the slots (contract: driver.h).
 */
#include "shim/driver.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "core/ms.h"

void *ms__shim_slots[MS_SYM_COUNT];

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static void (*init_fn)(void);      /* registered by ms__drv_set_init */
static bool initialized;           /* init finished (atomic access) */
static void *real_handle;          /* the real driver, NULL when none was found */
static _Thread_local bool in_init; /* this thread is running init (driver constructors) */

typedef void *(*dlsym_fn)(void *, const char *);
static dlsym_fn libc_dlsym; /* atomic access */

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

static void *find_driver(const char *explicit_path)
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

    if (explicit_path) {
        h = try_load(explicit_path, have_self, sdev, sino);
        if (!h)
            ms__shim_log("MSCHED_REAL_LIBCUDA=%s is not usable; searching", explicit_path);
    }
    const char *llp = secure_getenv("LD_LIBRARY_PATH");
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

void ms__drv_load(const char *explicit_path)
{
    void *h = find_driver(explicit_path);
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
}

void ms__drv_set_init(void (*init)(void))
{
    init_fn = init;
}

static void init_once_fn(void)
{
    in_init = true;
    if (init_fn)
        init_fn();
    else
        ms__drv_load(NULL);
    in_init = false;
    __atomic_store_n(&initialized, true, __ATOMIC_RELEASE);
}

void ms__drv_init(void)
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
    ms__drv_init();
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
