/*
 * cmd_run.c - `msched run [options] -- program [args...]`: run a program under msched.
 *
 * Design
 *   The program is exec'd (msched does not stay in between) with libmsched first on the
 *   library path: every dlopen("libcuda.so.1"), cudart's included, then loads the shim, which
 *   loads the real driver by absolute path (docs/shim.md). --preload uses LD_PRELOAD instead
 *   (for programs that load the driver by absolute path). Options become the environment
 *   variables the shim reads once at start (docs/shim.md lists them). libmsched is looked for
 *   next to the msched binary: <bindir>/../lib/msched/.
 *
 *   The daemon is started on demand: when no mschedd answers on the socket (MSCHED_SOCKET, or
 *   the default path for GPU 0), `run` starts <bindir>/mschedd with idle_exit 60s (it leaves by
 *   itself a minute after its last client) and waits until it listens. Its budget is 90 % of
 *   GPU 0's memory as the CUDA driver reports it (cuDeviceTotalMem, no context created), or
 *   the daemon's default when no driver answers. --no-daemon (or MSCHED_DAEMON=off) skips
 *   that and the shim runs alone (under --budget, or only observing). A daemon that cannot be
 *   started is reported in one line and the program runs alone.
 *
 * Errors: a bad option or a missing program is a usage error (2); a missing libmsched or a
 * program that cannot be executed is a runtime error (1, or 127 when exec fails, like a shell).
 */
#include "cli/cli.h"

#include "core/proto.h"
#include "core/timeline.h"
#include "ipc/ipc.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#define IDLE_EXIT "60s" /* an on-demand daemon's idle_exit */

static void run_help(FILE *f)
{
    fprintf(f,
            "usage: msched run [options] -- program [args...]\n"
            "\n"
            "Runs program with libmsched, the CUDA driver shim, in front of the real driver.\n"
            "\n"
            "options:\n"
            "  --priority rt|be|N  scheduling priority, 0-10 (rt = real-time = 10, be = 0)\n"
            "  --weight N          share of GPU time relative to other tasks, 0-1000 (default 1)\n"
            "  --budget SIZE       device memory this process may keep resident (e.g. 16GiB);\n"
            "                      beyond it the shim evicts and repopulates its own memory\n"
            "  --engine vmm|unified|demand|off\n"
            "                      vmm: explicit migration (default); unified: managed memory,\n"
            "                      prefetched in and out; demand: managed memory prefetched\n"
            "                      out, faulted in (the demand-paging baseline); off: observe\n"
            "  --trace FILE        record the program's command stream (msched sim --trace)\n"
            "  --no-daemon         do not join (or start) mschedd: the program runs alone\n"
            "  --verbose           the shim reports what it does on stderr\n"
            "  --preload           load the shim with LD_PRELOAD instead of the library path\n");
}

/* The directory of the msched binary (mschedd is looked for there). */
static int bin_dir(char *out, size_t cap)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0)
        return -1;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash)
        return -1;
    *slash = '\0';
    int w = snprintf(out, cap, "%s", exe);
    return w > 0 && (size_t)w < cap ? 0 : -1;
}

/* GPU 0's memory in bytes from the CUDA driver (0 when there is none). */
static uint64_t device_total(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return 0;
    int (*init)(unsigned) = NULL;
    int (*get)(int *, int) = NULL;
    int (*total)(size_t *, int) = NULL;
    *(void **)&init = dlsym(h, "cuInit");
    *(void **)&get = dlsym(h, "cuDeviceGet");
    *(void **)&total = dlsym(h, "cuDeviceTotalMem_v2");
    size_t bytes = 0;
    int dev = 0;
    if (!init || !get || !total || init(0) != 0 || get(&dev, 0) != 0 || total(&bytes, dev) != 0)
        bytes = 0;
    dlclose(h);
    return bytes;
}

/*
 * Make sure a daemon answers on the socket, starting one if none does. mschedd (without
 * --foreground) returns once its child listens, or fails saying why on stderr.
 */
static void ensure_daemon(bool verbose)
{
    char sock[MS_IPC_PATH_MAX], dir[PATH_MAX], exe[PATH_MAX + 16];
    if (ms_ipc_socket_path(0, sock, sizeof(sock)) != MS_OK)
        return;
    int fd = -1;
    if (ms_ipc_connect(sock, 500, &fd) == MS_OK) {
        close(fd);
        return;
    }
    if (bin_dir(dir, sizeof(dir)) != 0)
        return;
    snprintf(exe, sizeof(exe), "%s/mschedd", dir);
    if (access(exe, X_OK) != 0) {
        ms_cli_error("no daemon on %s and no mschedd at %s: the program runs alone", sock, exe);
        return;
    }
    char budget[32] = "";
    uint64_t total = device_total();
    if (total >= 10 * MS_GRAN)
        snprintf(budget, sizeof(budget), "%llu",
                 (unsigned long long)(total / 10 * 9 / MS_GRAN * MS_GRAN));
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        if (budget[0])
            execl(exe, "mschedd", "--socket", sock, "--idle-exit", IDLE_EXIT, "--budget", budget,
                  (char *)NULL);
        else
            execl(exe, "mschedd", "--socket", sock, "--idle-exit", IDLE_EXIT, (char *)NULL);
        _exit(127);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        /* Lost a race with another `msched run` starting it? Then it answers now. */
        if (ms_ipc_connect(sock, 500, &fd) == MS_OK) {
            close(fd);
            return;
        }
        ms_cli_error("could not start mschedd (%s); the program runs alone",
                     pid < 0 ? strerror(errno) : "see above");
        return;
    }
    if (verbose)
        fprintf(stderr,
                "msched: started mschedd on %s, budget %s (it exits %s after its last client)\n",
                sock, budget[0] ? budget : "its default", IDLE_EXIT);
}

/* <bindir>/../lib/msched, where libmsched is. */
static int lib_dir(char *out, size_t cap)
{
    char dir[PATH_MAX];
    if (bin_dir(dir, sizeof(dir)) != 0)
        return -1;
    int w = snprintf(out, cap, "%s/../lib/msched", dir);
    return w > 0 && (size_t)w < cap ? 0 : -1;
}

static int setenv_or_fail(const char *k, const char *v)
{
    if (setenv(k, v, 1) != 0) {
        ms_cli_error("cannot set %s: %s", k, strerror(errno));
        return -1;
    }
    return 0;
}

static int run_main(int argc, char **argv)
{
    const char *prio = NULL, *weight = NULL, *budget = NULL, *engine = NULL, *trace = NULL;
    bool verbose = false, preload = false, no_daemon = false;
    int i = 1;
    for (; i < argc; i++) {
        const char *v = NULL;
        int m;
        if (strcmp(argv[i], "--") == 0) {
            i++;
            break;
        }
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            run_help(stdout);
            return 0;
        }
        if ((m = ms_cli_opt(argc, argv, &i, "--priority", &v)) != 0) {
            if (m < 0)
                return MS_EXIT_USAGE;
            prio = v;
        } else if ((m = ms_cli_opt(argc, argv, &i, "--weight", &v)) != 0) {
            if (m < 0)
                return MS_EXIT_USAGE;
            weight = v;
        } else if ((m = ms_cli_opt(argc, argv, &i, "--budget", &v)) != 0) {
            if (m < 0)
                return MS_EXIT_USAGE;
            budget = v;
        } else if ((m = ms_cli_opt(argc, argv, &i, "--engine", &v)) != 0) {
            if (m < 0)
                return MS_EXIT_USAGE;
            engine = v;
        } else if ((m = ms_cli_opt(argc, argv, &i, "--trace", &v)) != 0) {
            if (m < 0)
                return MS_EXIT_USAGE;
            trace = v;
        } else if (ms_cli_opt(argc, argv, &i, "--verbose", NULL) == 1) {
            verbose = true;
        } else if (ms_cli_opt(argc, argv, &i, "--preload", NULL) == 1) {
            preload = true;
        } else if (ms_cli_opt(argc, argv, &i, "--no-daemon", NULL) == 1) {
            no_daemon = true;
        } else if (argv[i][0] == '-') {
            ms_cli_error("unknown option '%s' for run (try 'msched help run')", argv[i]);
            return MS_EXIT_USAGE;
        } else {
            break; /* the program, without "--" */
        }
    }
    if (i >= argc) {
        ms_cli_error("run: no program given (usage: msched run [options] -- program [args])");
        return MS_EXIT_USAGE;
    }
    uint64_t n;
    /* The ranges the shim accepts (shim/client.c), so a bad value is an error here rather than
     * a message and a default there. */
    if (prio && strcmp(prio, "rt") != 0 && strcmp(prio, "be") != 0 &&
        (ms_cli_parse_u64(prio, &n) != 0 || n > MS_PRIO_RT)) {
        ms_cli_error("bad --priority '%s': use rt, be or a whole number from %d to %d", prio,
                     MS_PRIO_BE, MS_PRIO_RT);
        return MS_EXIT_USAGE;
    }
    if (weight && (ms_cli_parse_u64(weight, &n) != 0 || n > MS_PROTO_WEIGHT_MAX)) {
        ms_cli_error("bad --weight '%s': use a whole number from 0 to %d (0 means 1)", weight,
                     MS_PROTO_WEIGHT_MAX);
        return MS_EXIT_USAGE;
    }
    char bytes[32];
    if (budget) {
        if (ms_cli_parse_size(budget, &n) != 0 || n < MS_GRAN) {
            ms_cli_error("bad --budget '%s': use a size of at least 2MiB, e.g. 16GiB", budget);
            return MS_EXIT_USAGE;
        }
        snprintf(bytes, sizeof(bytes), "%llu", (unsigned long long)n);
    }
    if (engine && strcmp(engine, "vmm") != 0 && strcmp(engine, "unified") != 0 &&
        strcmp(engine, "demand") != 0 && strcmp(engine, "off") != 0) {
        ms_cli_error("bad --engine '%s': use vmm, unified, demand or off", engine);
        return MS_EXIT_USAGE;
    }

    char dir[PATH_MAX], lib[PATH_MAX + 32];
    struct stat st;
    if (lib_dir(dir, sizeof(dir)) != 0) {
        ms_cli_error("cannot locate the msched binary's directory");
        return MS_EXIT_RUNTIME;
    }
    snprintf(lib, sizeof(lib), "%s/%s", dir, preload ? "libmsched.so" : "libcuda.so.1");
    if (stat(lib, &st) != 0) {
        ms_cli_error("cannot find libmsched at %s (was it built? 'make' builds it when the CUDA "
                     "toolkit is present)",
                     lib);
        return MS_EXIT_RUNTIME;
    }
    if (preload) {
        const char *old = getenv("LD_PRELOAD");
        char *val = malloc(strlen(lib) + (old ? strlen(old) : 0) + 2);
        if (!val)
            return MS_EXIT_RUNTIME;
        sprintf(val, "%s%s%s", lib, old && *old ? ":" : "", old ? old : "");
        int e = setenv_or_fail("LD_PRELOAD", val);
        free(val);
        if (e)
            return MS_EXIT_RUNTIME;
    } else {
        const char *old = getenv("LD_LIBRARY_PATH");
        char *val = malloc(strlen(dir) + (old ? strlen(old) : 0) + 2);
        if (!val)
            return MS_EXIT_RUNTIME;
        sprintf(val, "%s%s%s", dir, old && *old ? ":" : "", old ? old : "");
        int e = setenv_or_fail("LD_LIBRARY_PATH", val);
        free(val);
        if (e)
            return MS_EXIT_RUNTIME;
    }
    if ((prio && setenv_or_fail("MSCHED_PRIORITY", prio)) ||
        (weight && setenv_or_fail("MSCHED_WEIGHT", weight)) ||
        (budget && setenv_or_fail("MSCHED_BUDGET", bytes)) ||
        (engine && setenv_or_fail("MSCHED_ENGINE", engine)) ||
        (trace && setenv_or_fail("MSCHED_TRACE", trace)) ||
        (verbose && setenv_or_fail("MSCHED_VERBOSE", "1")) ||
        (no_daemon && setenv_or_fail("MSCHED_DAEMON", "off")))
        return MS_EXIT_RUNTIME;
    const char *dm = getenv("MSCHED_DAEMON");
    if (!(dm && strcmp(dm, "off") == 0) && !(engine && strcmp(engine, "off") == 0))
        ensure_daemon(verbose);
    fflush(NULL);
    execvp(argv[i], &argv[i]);
    ms_cli_error("cannot run '%s': %s", argv[i], strerror(errno));
    return 127;
}

const struct ms_cli_cmd ms_cmd_run = {
    .name = "run",
    .summary = "run a program under msched: msched run [options] -- program [args]",
    .run = run_main,
    .help = run_help,
};
