/*
 * gpuid.c - a GPU's UUID and memory from the CUDA driver, asked in a child process (contract
 * and design: gpuid.h).
 *
 * The child writes one struct answer to a pipe and leaves with _exit (the driver's exit
 * handlers are not run: nothing of it outlives the child). The parent reads it within
 * MS_GPUID_TIMEOUT_MS, kills a child that is late, and always reaps it. The driver's functions
 * are typed here by hand (ipc/ does not include cuda.h): CUresult is an int, CUdevice an int,
 * CUuuid 16 bytes.
 */
#include "ipc/gpuid.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

struct answer {
    int rc; /* MS_OK or an error of gpuid.h */
    int ordinal;
    uint64_t total;
    char uuid[MS_IPC_UUID_MAX];
    char why[200];
};

typedef int (*init_fn)(unsigned);
typedef int (*count_fn)(int *);
typedef int (*get_fn)(int *, int);
typedef int (*uuid_fn)(unsigned char *, int);
typedef int (*total_fn)(size_t *, int);

/* In the child: fill a. */
static void ask(int ordinal, const char *want_hex, struct answer *a)
{
    const char *lib = getenv("MSCHED_REAL_LIBCUDA");
    if (!lib || !*lib)
        lib = "libcuda.so.1";
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        a->rc = MS_E_GPU;
        snprintf(a->why, sizeof(a->why), "no CUDA driver (%s)", lib);
        return;
    }
    init_fn init;
    count_fn count;
    get_fn get;
    uuid_fn uuid;
    total_fn total;
    *(void **)&init = dlsym(h, "cuInit");
    *(void **)&count = dlsym(h, "cuDeviceGetCount");
    *(void **)&get = dlsym(h, "cuDeviceGet");
    *(void **)&uuid = dlsym(h, "cuDeviceGetUuid_v2");
    if (!uuid)
        *(void **)&uuid = dlsym(h, "cuDeviceGetUuid");
    *(void **)&total = dlsym(h, "cuDeviceTotalMem_v2");
    int n = 0;
    if (!init || !count || !get || !uuid || !total || init(0) != 0 || count(&n) != 0) {
        a->rc = MS_E_GPU;
        snprintf(a->why, sizeof(a->why), "the CUDA driver (%s) does not answer", lib);
        return;
    }
    for (int i = 0; i < n; i++) {
        if (!want_hex && i != ordinal)
            continue;
        int dev = 0;
        unsigned char b[16];
        size_t bytes = 0;
        char text[MS_IPC_UUID_MAX], hex[MS_IPC_UUID_MAX];
        if (get(&dev, i) != 0 || uuid(b, dev) != 0 || total(&bytes, dev) != 0)
            continue;
        ms_ipc_uuid_format(b, text, sizeof(text));
        if (want_hex &&
            (ms_ipc_uuid_hex(text, hex, sizeof(hex)) != MS_OK || strcmp(hex, want_hex) != 0))
            continue;
        a->rc = MS_OK;
        a->ordinal = i;
        a->total = bytes;
        snprintf(a->uuid, sizeof(a->uuid), "%s", text);
        return;
    }
    a->rc = MS_E_NOTFOUND;
    if (want_hex)
        snprintf(a->why, sizeof(a->why), "no GPU with UUID %s among the driver's %d", want_hex, n);
    else
        snprintf(a->why, sizeof(a->why), "no GPU %d (the driver sees %d)", ordinal, n);
}

int ms_gpu_identify(int ordinal, const char *uuid, bool all_visible, struct ms_gpu_id *out,
                    char *why, size_t whylen)
{
    char want[MS_IPC_UUID_MAX];
    if (uuid && ms_ipc_uuid_hex(uuid, want, sizeof(want)) != MS_OK) {
        snprintf(why, whylen, "'%s' is not a GPU UUID (GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)",
                 uuid);
        return MS_E_INVAL;
    }
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) {
        snprintf(why, whylen, "pipe: %s", strerror(errno));
        return MS_E_IO;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(why, whylen, "fork: %s", strerror(errno));
        close(p[0]);
        close(p[1]);
        return MS_E_IO;
    }
    if (pid == 0) {
        close(p[0]);
        if (all_visible)
            unsetenv("CUDA_VISIBLE_DEVICES");
        struct answer a;
        memset(&a, 0, sizeof(a));
        ask(ordinal, uuid ? want : NULL, &a);
        ssize_t w = write(p[1], &a, sizeof(a));
        _exit(w == (ssize_t)sizeof(a) ? 0 : 1);
    }
    close(p[1]);
    struct answer a;
    size_t got = 0;
    uint64_t deadline = ms_ipc_now_ns() + (uint64_t)MS_GPUID_TIMEOUT_MS * 1000000ull;
    while (got < sizeof(a)) {
        uint64_t now = ms_ipc_now_ns();
        if (now >= deadline)
            break;
        struct pollfd pf = {.fd = p[0], .events = POLLIN};
        int r = poll(&pf, 1, (int)((deadline - now) / 1000000ull + 1));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        ssize_t n = read(p[0], (char *)&a + got, sizeof(a) - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(p[0]);
    if (got < sizeof(a))
        kill(pid, SIGKILL);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
    }
    if (got < sizeof(a)) {
        snprintf(why, whylen, "the CUDA driver query failed or took over %d s",
                 MS_GPUID_TIMEOUT_MS / 1000);
        return MS_E_IO;
    }
    a.uuid[sizeof(a.uuid) - 1] = '\0';
    a.why[sizeof(a.why) - 1] = '\0';
    if (a.rc != MS_OK) {
        snprintf(why, whylen, "%s", a.why);
        return a.rc == MS_E_NOTFOUND || a.rc == MS_E_GPU ? a.rc : MS_E_IO;
    }
    out->ordinal = a.ordinal;
    out->total = a.total;
    snprintf(out->uuid, sizeof(out->uuid), "%s", a.uuid);
    return MS_OK;
}

uint64_t ms_gpu_default_budget(uint64_t total)
{
    if (total == 0)
        return 16 * MS_GIB;
    uint64_t b = total / 10 * 9 / MS_GRAN * MS_GRAN;
    return b < MS_GRAN ? MS_GRAN : b;
}
