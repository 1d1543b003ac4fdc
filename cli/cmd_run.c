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
 *   The daemon is started on demand: the program's device 0 (in this environment, so under its
 *   CUDA_VISIBLE_DEVICES) is asked for its UUID (ipc/gpuid.h, in a child: nothing of the
 *   driver stays in this process); when no mschedd answers on that UUID's socket (or
 *   MSCHED_SOCKET; gpu0.sock when no driver answers), `run` starts <bindir>/mschedd for that
 *   UUID with idle_exit 60s (it leaves by itself a minute after its last client) and waits
 *   until it listens. Its budget is the daemon's default (90 % of the GPU's memory), the same
 *   as by hand. The daemon is started before the library path changes, so it never loads
 *   libmsched as its driver. --no-daemon (or MSCHED_DAEMON=off) skips that and the shim runs
 *   alone (under --budget, or only observing). A daemon that cannot be started is reported in
 *   one line and the program runs alone.
 *
 * Errors: a bad option or a missing program is a usage error (2); a missing libmsched or a
 * program that cannot be executed is a runtime error (1, or 127 when exec fails, like a shell).
 */
#include "cli/cli.h"

#include "core/proto.h"
#include "core/timeline.h"
#include "ipc/gpuid.h"
#include "ipc/ipc.h"
#include "ipc/shimopt.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define IDLE_EXIT "60s" /* an on-demand daemon's idle_exit */

static void run_help(FILE *f)
{
    fprintf(f, "usage: msched run [options] -- program [args...]\n"
               "\n"
               "Runs program with libmsched, the CUDA driver shim, in front of the real driver.\n"
               "\n"
               "options:\n");
    ms_shimopt_help(f);
    fprintf(f, "\nalso:\n"
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

/*
 * Make sure a daemon answers on the socket of the GPU the program will use, starting one if
 * none does. mschedd (without --foreground) returns once its child listens, or fails saying
 * why on stderr.
 */
static void ensure_daemon(bool verbose)
{
    char sock[MS_IPC_PATH_MAX], dir[PATH_MAX], exe[PATH_MAX + 16], why[300];
    /* Device 0 as the program will number it (this environment: CUDA_VISIBLE_DEVICES). */
    struct ms_gpu_id id;
    bool known = ms_gpu_identify(0, NULL, false, &id, why, sizeof(why)) == MS_OK;
    if (known ? ms_ipc_uuid_socket_path(id.uuid, sock, sizeof(sock)) != MS_OK
              : ms_ipc_socket_path(0, sock, sizeof(sock)) != MS_OK)
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
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        /* The daemon's budget is its own default (90 % of the GPU's memory): the same rule
         * as for a daemon started by hand. */
        if (known)
            execl(exe, "mschedd", "--socket", sock, "--uuid", id.uuid, "--idle-exit", IDLE_EXIT,
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
                "msched: started mschedd on %s for %s (it exits %s after its last client)\n", sock,
                known ? id.uuid : "GPU 0 (no CUDA driver answered)", IDLE_EXIT);
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

int ms_cli_use_shim(bool preload, bool apply)
{
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
    if (!apply)
        return 0;
    const char *var = preload ? "LD_PRELOAD" : "LD_LIBRARY_PATH";
    const char *first = preload ? lib : dir;
    const char *old = getenv(var);
    char *val = malloc(strlen(first) + (old ? strlen(old) : 0) + 2);
    if (!val)
        return MS_EXIT_RUNTIME;
    sprintf(val, "%s%s%s", first, old && *old ? ":" : "", old ? old : "");
    int e = setenv_or_fail(var, val);
    free(val);
    return e ? MS_EXIT_RUNTIME : 0;
}

static int run_main(int argc, char **argv)
{
    /* The shim's options, as text, by the table's id (ipc/shimopt.h): checked here with the
     * shim's own parser, so a value the shim would ignore is a usage error instead. */
    const char *given[MS_OPT_COUNT] = {0};
    bool preload = false;
    int i = 1;
    for (; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) {
            i++;
            break;
        }
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            run_help(stdout);
            return 0;
        }
        if (ms_cli_opt(argc, argv, &i, "--preload", NULL) == 1) {
            preload = true;
            continue;
        }
        if (argv[i][0] != '-')
            break; /* the program, without "--" */
        const char *eq = strchr(argv[i], '=');
        char flag[64];
        snprintf(flag, sizeof flag, "%.*s", (int)(eq ? (size_t)(eq - argv[i]) : strlen(argv[i])),
                 argv[i]);
        int id = ms_shimopt_by_flag(flag);
        if (id < 0) {
            ms_cli_error("unknown option '%s' for run (try 'msched help run')", argv[i]);
            return MS_EXIT_USAGE;
        }
        const struct ms_shimopt_def *d = &ms_shimopt_defs[id];
        const char *v = d->set_to;
        if (d->metavar && ms_cli_opt(argc, argv, &i, d->flag, &v) < 0)
            return MS_EXIT_USAGE;
        if (!d->metavar && ms_cli_opt(argc, argv, &i, d->flag, NULL) != 1) {
            ms_cli_error("option %s takes no value", d->flag);
            return MS_EXIT_USAGE;
        }
        uint64_t n;
        if (ms_shimopt_parse((enum ms_shimopt)id, v, &n, NULL, 0) != MS_OK) {
            char exp[96];
            ms_shimopt_expect((enum ms_shimopt)id, exp, sizeof exp);
            ms_cli_error("bad %s '%s': use %s", d->flag, v, exp);
            return MS_EXIT_USAGE;
        }
        given[id] = v;
    }
    if (i >= argc) {
        ms_cli_error("run: no program given (usage: msched run [options] -- program [args])");
        return MS_EXIT_USAGE;
    }
    /* A template store named here must be readable now (the shim would only say so once it
     * runs, and go on at allocation granularity). */
    const char *tm = given[MS_OPT_TEMPLATES];
    if (tm && strcmp(tm, "off") != 0 && access(tm, R_OK) != 0) {
        ms_cli_error("--templates %s: %s (msched profile writes one; off: none)", tm,
                     strerror(errno));
        return MS_EXIT_USAGE;
    }
    bool verbose = given[MS_OPT_VERBOSE] != NULL;
    int e = ms_cli_use_shim(preload, false);
    if (e)
        return e;
    for (int k = 0; k < MS_OPT_COUNT; k++)
        if (given[k] && setenv_or_fail(ms_shimopt_defs[k].env, given[k]))
            return MS_EXIT_RUNTIME;
    const char *dm = getenv("MSCHED_DAEMON");
    const char *engine = getenv("MSCHED_ENGINE");
    if (!(dm && strcmp(dm, "off") == 0) && !(engine && strcmp(engine, "off") == 0))
        ensure_daemon(verbose);
    /* After the daemon started: it must not load libmsched as its driver. */
    if ((e = ms_cli_use_shim(preload, true)) != 0)
        return e;
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
