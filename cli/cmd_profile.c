/*
 * cmd_profile.c - `msched profile [--out FILE] [--raw FILE] -- program [args...]`: run a program
 * under the access profiler and learn its kernels' templates; `msched profile --show [--text]
 * [FILE]`: print the template store.
 *
 * Design
 *   The program runs in a child with libmsched in front of the driver (ms_cli_use_shim, as
 *   `msched run` does), with the memory engine and the daemon off (observe mode: nothing moves
 *   while profiling) and MSCHED_PROFILE naming the raw profile: --raw FILE, else a temporary
 *   file ($TMPDIR or /tmp) removed afterwards. This process waits for it and returns its exit
 *   status (128 + N when signal N ended it), or 1 when the program ran well but learning failed.
 *   The sampling and what the raw profile holds: docs/shim.md, "The access profiler".
 *
 *   Learning is one function, learn(), between the raw profile and the store: the existing store
 *   is parsed, the raw profile learned into it (core/template.h), and the store is written
 *   whole, atomically (a temporary file in its directory, then rename), at
 *   $XDG_CACHE_HOME/msched/templates, else ~/.cache/msched/templates, or --out FILE.
 *
 * Errors: a bad command line is a usage error (2); a program that cannot be started, a missing
 * libmsched, or a raw profile that is missing or empty is a runtime error (1); exec failing in
 * the child is 127, like a shell.
 */
#include "cli/cli.h"
#include "core/template.h"
#include "ipc/shimopt.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static void profile_help(FILE *f)
{
    fprintf(f, "usage: msched profile [options] -- program [args...]\n"
               "       msched profile --show [--text] [FILE]\n"
               "       msched profile --evaluate RAW [--out FILE]\n"
               "       msched profile --learn RAW [--out FILE]\n"
               "\n"
               "Runs program under libmsched's access profiler (memory engine and daemon off) and\n"
               "learns templates from what its kernels touched: per kernel and pointer argument,\n"
               "the bytes it reaches as a rule over the launch's integer arguments, so that under\n"
               "`msched run` only those bytes are brought to the device (docs/templates.md). The\n"
               "store accumulates: profiling again refits over old and new launches.\n"
               "Sampled launches (the first MSCHED_PROFILE_FIRST of each kernel, default 4, then\n"
               "one in MSCHED_PROFILE_EVERY, default 32) run alone; for each, the 64 KiB granules\n"
               "its accesses fell in are recorded per pointer argument (docs/shim.md). Needs the\n"
               "Compute Sanitizer library (MSCHED_SANITIZER=PATH when it is not found). Exits\n"
               "with the program's status.\n"
               "\n"
               "options:\n"
               "  --out FILE    the template store (default $XDG_CACHE_HOME/msched/templates,\n"
               "                else ~/.cache/msched/templates)\n"
               "  --raw FILE    keep the raw profile in FILE (default: a temporary file, removed)\n"
               "  --preload     load the shim with LD_PRELOAD instead of the library path\n"
               "  --show [FILE] print the template store in words (default: the one above), exit\n"
               "  --text        with --show: print the store's text (docs/templates.md) instead\n"
               "  --evaluate RAW  the store's accuracy on a raw profile (--raw of another run):\n"
               "                bytes touched against what the templates and allocation\n"
               "                granularity predict (false negatives, false positives), exit\n"
               "  --learn RAW   learn a kept raw profile into the store (as after a run), exit:\n"
               "                several runs' profiles make one store, or the same profiles\n"
               "                are learned again after the analyzer changed\n");
}

static const char *env_get(const char *name)
{
    return getenv(name);
}

/* mkdir -p of path's directory (mode 0700 for what it creates). */
static int make_parent(const char *path)
{
    char dir[PATH_MAX];
    if (snprintf(dir, sizeof dir, "%s", path) >= (int)sizeof dir)
        return MS_E_INVAL;
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir)
        return MS_OK;
    *slash = '\0';
    for (char *p = dir + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(dir, 0700) != 0 && errno != EEXIST)
            return MS_E_IO;
        *p = '/';
    }
    return mkdir(dir, 0700) != 0 && errno != EEXIST ? MS_E_IO : MS_OK;
}

int ms_cli_write_atomic(const char *path, const void *buf, size_t len)
{
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof tmp)
        return MS_E_INVAL;
    if (make_parent(path) != MS_OK)
        return MS_E_IO;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return MS_E_IO;
    const char *p = buf;
    size_t off = 0;
    while (off < len) {
        ssize_t w = write(fd, p + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    bool ok = off == len && fsync(fd) == 0;
    ok = close(fd) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        int saved = errno; /* the caller says why */
        unlink(tmp);
        errno = saved;
        return MS_E_IO;
    }
    return MS_OK;
}

#define MAX_PROFILE_BYTES (1ull << 32) /* a raw profile or a store larger than 4 GiB is refused */

int ms_cli_load_templates(struct ms_tmpl_store *s, const char *path, bool missing_ok)
{
    size_t len = 0;
    int err = 0;
    char *text = ms_cli_read_file(path, MAX_PROFILE_BYTES, &len, &err);
    if (!text) {
        if (err == ENOENT && missing_ok)
            return MS_OK;
        ms_cli_error("cannot read the template store %s: %s", path, strerror(err));
        return MS_EXIT_RUNTIME;
    }
    char why[160] = "";
    int e = ms_tmpl_store_parse(s, text, len, why, sizeof why);
    free(text);
    if (e != MS_OK) {
        ms_cli_error("the template store %s is not valid (%s: %s); move it away, and msched "
                     "profile starts a new one",
                     path, ms_strerror(e), why[0] ? why : "no detail");
        return MS_EXIT_RUNTIME;
    }
    return MS_OK;
}

/*
 * Learn the raw profile into the store: the store's current text (if any) is merged first, the
 * profile's launches are learned on top (ms_tmpl_learn_trace refits each argument over old and
 * new observations), and the whole store is written back atomically. A raw profile that is
 * missing or empty, or a store or profile that does not parse, changes nothing. after_run: the
 * profile was the run's just now (a missing one says the profiler may not have started).
 */
static int learn(const char *raw_path, const char *store, bool after_run)
{
    size_t len = 0;
    int err = 0;
    char *raw = ms_cli_read_file(raw_path, MAX_PROFILE_BYTES, &len, &err);
    if (!raw && !after_run) {
        ms_cli_error("profile: cannot read the raw profile %s: %s", raw_path, strerror(err));
        return MS_EXIT_RUNTIME;
    }
    if (!raw) {
        ms_cli_error("profile: no raw profile at %s (%s); was the profiler available? (run with "
                     "MSCHED_VERBOSE=1)",
                     raw_path, strerror(err));
        return MS_EXIT_RUNTIME;
    }
    if (len == 0) {
        free(raw);
        ms_cli_error("profile: the raw profile %s is empty%s", raw_path,
                     after_run ? " (the profiler did not start: see the program's stderr)" : "");
        return MS_EXIT_RUNTIME;
    }
    struct ms_tmpl_store *s = NULL;
    int rc = MS_EXIT_RUNTIME;
    char *text = NULL;
    size_t tlen = 0;
    if (ms_tmpl_store_new(&s) != MS_OK) {
        ms_cli_error("profile: out of memory");
        goto out;
    }
    if (ms_cli_load_templates(s, store, true) != MS_OK)
        goto out;
    size_t before = ms_tmpl_store_count(s);
    char why[160] = "";
    int e = ms_tmpl_learn_trace(s, raw, len, why, sizeof why);
    if (e != MS_OK) {
        ms_cli_error("profile: cannot learn from %s (%s: %s); %s is left as it was", raw_path,
                     ms_strerror(e), why[0] ? why : "no detail", store);
        goto out;
    }
    if (ms_tmpl_store_format(s, &text, &tlen) != MS_OK) {
        ms_cli_error("profile: out of memory");
        goto out;
    }
    if (ms_cli_write_atomic(store, text, tlen) != MS_OK) {
        ms_cli_error("profile: cannot write the template store %s: %s", store, strerror(errno));
        goto out;
    }
    size_t after = ms_tmpl_store_count(s);
    fprintf(stderr,
            "msched: profile: %zu kernels in %s (%zu new); 'msched profile --show' says "
            "what was learned\n",
            after, store, after - before);
    rc = 0;
out:
    ms_free(text);
    ms_tmpl_store_free(s);
    free(raw);
    return rc;
}

static double pct(uint64_t part, uint64_t whole)
{
    return whole ? 100.0 * (double)part / (double)whole : 0.0;
}

static uint64_t over(const struct ms_tmpl_acc_kernel *k)
{
    return k->tmpl_pred - (k->touched - k->tmpl_miss);
}

static int by_miss(const void *x, const void *y)
{
    const struct ms_tmpl_acc_kernel *a = x, *b = y;
    return a->tmpl_miss < b->tmpl_miss ? 1 : a->tmpl_miss > b->tmpl_miss ? -1 : 0;
}

static int by_over(const void *x, const void *y)
{
    uint64_t a = over(x), b = over(y);
    return a < b ? 1 : a > b ? -1 : 0;
}

#define EVAL_TOP 5        /* kernels listed per ranking */
#define EVAL_NAME_COLS 90 /* a kernel name longer than this is cut, "..." at its end */

/* The EVAL_TOP kernels of kv (sorted here, in place) by cmp, with a nonzero key. */
static void print_top(struct ms_tmpl_acc_kernel *kv, size_t nk, const char *title,
                      int (*cmp)(const void *, const void *), bool miss)
{
    qsort(kv, nk, sizeof *kv, cmp);
    bool any = false;
    for (size_t i = 0; i < nk && i < EVAL_TOP; i++) {
        uint64_t key = miss ? kv[i].tmpl_miss : over(&kv[i]);
        if (key == 0)
            break;
        if (!any)
            printf("  %s:\n", title);
        any = true;
        int cut = (int)strlen(kv[i].name) > EVAL_NAME_COLS;
        printf("    %.*s%s: %llu launches%s, %.1f MiB touched, %.1f MiB %s\n", EVAL_NAME_COLS,
               kv[i].name, cut ? "..." : "", (unsigned long long)kv[i].launches,
               kv[i].tmpl ? "" : " (no template: whole allocations)",
               (double)kv[i].touched / (double)MS_MIB, (double)key / (double)MS_MIB,
               miss ? "missed" : "predicted and not touched");
    }
}

/* --evaluate RAW: the store's accuracy on a raw profile against allocation granularity, and
 * the kernels that miss most and over-predict most. */
static int evaluate(const char *raw_path, const char *store)
{
    struct ms_tmpl_store *s = NULL;
    if (ms_tmpl_store_new(&s) != MS_OK) {
        ms_cli_error("profile: out of memory");
        return MS_EXIT_RUNTIME;
    }
    int rc = ms_cli_load_templates(s, store, false);
    size_t len = 0;
    int err = 0;
    char *raw = rc == MS_OK ? ms_cli_read_file(raw_path, MAX_PROFILE_BYTES, &len, &err) : NULL;
    if (rc == MS_OK && !raw) {
        ms_cli_error("profile: cannot read the raw profile %s: %s", raw_path, strerror(err));
        rc = MS_EXIT_RUNTIME;
    }
    struct ms_tmpl_acc a;
    struct ms_tmpl_acc_kernel *kv = NULL;
    size_t nk = 0;
    char why[160] = "";
    int e =
        rc == MS_OK ? ms_tmpl_accuracy_kernels(s, raw, len, &a, &kv, &nk, why, sizeof why) : MS_OK;
    if (rc == MS_OK && e != MS_OK) {
        ms_cli_error("profile: cannot evaluate on %s (%s: %s)", raw_path, ms_strerror(e),
                     why[0] ? why : "no detail");
        rc = MS_EXIT_RUNTIME;
    }
    if (rc == MS_OK) {
        uint64_t hit_a = a.touched - a.alloc_miss, hit_t = a.touched - a.tmpl_miss;
        printf("accuracy of %s on %s\n", store, raw_path);
        printf("  %llu profiled launches (%llu opaque, not evaluated), %.1f MiB touched\n",
               (unsigned long long)a.launches, (unsigned long long)a.opaque,
               (double)a.touched / (double)MS_MIB);
        printf("  allocation granularity: %.1f MiB predicted, false negatives %.2f %%, false "
               "positives %.2f %%\n",
               (double)a.alloc_pred / (double)MS_MIB, pct(a.alloc_miss, a.touched),
               pct(a.alloc_pred - hit_a, a.alloc_pred));
        printf("  templates (%llu of %llu launches had one): %.1f MiB predicted, false negatives "
               "%.2f %%, false positives %.2f %%\n",
               (unsigned long long)a.tmpl_launches, (unsigned long long)a.launches,
               (double)a.tmpl_pred / (double)MS_MIB, pct(a.tmpl_miss, a.touched),
               pct(a.tmpl_pred - hit_t, a.tmpl_pred));
        print_top(kv, nk, "most missed with templates", by_miss, true);
        print_top(kv, nk, "most over-predicted with templates", by_over, false);
    }
    ms_tmpl_acc_kernels_free(kv, nk);
    free(raw);
    ms_tmpl_store_free(s);
    return rc;
}

/* --show: the store in words (ms_tmpl_store_describe); --show --text: the store's text. */
static int show(const char *path, bool as_text)
{
    struct ms_tmpl_store *s = NULL;
    if (ms_tmpl_store_new(&s) != MS_OK) {
        ms_cli_error("profile: out of memory");
        return MS_EXIT_RUNTIME;
    }
    int rc = ms_cli_load_templates(s, path, false);
    char *text = NULL;
    size_t len = 0;
    if (rc == MS_OK) {
        int e =
            as_text ? ms_tmpl_store_format(s, &text, &len) : ms_tmpl_store_describe(s, &text, &len);
        if (e != MS_OK) {
            ms_cli_error("profile: out of memory");
            rc = MS_EXIT_RUNTIME;
        } else {
            if (!as_text)
                printf("# %s: %zu kernels\n", path, ms_tmpl_store_count(s));
            fwrite(text, 1, len, stdout);
        }
    }
    ms_free(text);
    ms_tmpl_store_free(s);
    return rc;
}

static int profile_main(int argc, char **argv)
{
    const char *out = NULL, *raw = NULL, *eval = NULL, *learn_raw = NULL;
    bool preload = false, want_show = false, as_text = false;
    int i = 1;
    for (; i < argc; i++) {
        int m;
        if (strcmp(argv[i], "--") == 0) {
            i++;
            break;
        }
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            profile_help(stdout);
            return 0;
        }
        if (strcmp(argv[i], "--show") == 0) {
            want_show = true; /* its FILE, if any, is the one operand left (below) */
            continue;
        }
        if (strncmp(argv[i], "--show=", 7) == 0) {
            want_show = true;
            out = argv[i] + 7;
            continue;
        }
        if ((m = ms_cli_opt(argc, argv, &i, "--out", &out)) != 0 ||
            (m = ms_cli_opt(argc, argv, &i, "--raw", &raw)) != 0 ||
            (m = ms_cli_opt(argc, argv, &i, "--evaluate", &eval)) != 0 ||
            (m = ms_cli_opt(argc, argv, &i, "--learn", &learn_raw)) != 0) {
            if (m < 0)
                return MS_EXIT_USAGE;
            continue;
        }
        if (ms_cli_opt(argc, argv, &i, "--text", NULL) == 1) {
            as_text = true;
            continue;
        }
        if (ms_cli_opt(argc, argv, &i, "--preload", NULL) == 1) {
            preload = true;
            continue;
        }
        if (argv[i][0] != '-')
            break; /* the program, without "--" */
        ms_cli_error("unknown option '%s' for profile (try 'msched help profile')", argv[i]);
        return MS_EXIT_USAGE;
    }
    if (want_show && i < argc) {
        if (out || i + 1 < argc) {
            ms_cli_error("profile: --show takes one FILE and no program");
            return MS_EXIT_USAGE;
        }
        out = argv[i++];
    }
    char store[PATH_MAX];
    if (out) {
        snprintf(store, sizeof store, "%s", out);
    } else if (ms_shimopt_templates_default(env_get, store, sizeof store) != MS_OK) {
        ms_cli_error("profile: set XDG_CACHE_HOME or HOME, or give --out FILE");
        return MS_EXIT_USAGE;
    }
    if (eval || learn_raw) {
        if (i < argc || want_show || (eval && learn_raw)) {
            ms_cli_error("profile: --evaluate and --learn take no program, no --show and not "
                         "each other");
            return MS_EXIT_USAGE;
        }
        return eval ? evaluate(eval, store) : learn(learn_raw, store, false);
    }
    if (want_show) {
        if (i < argc) {
            ms_cli_error("profile: --show takes no program");
            return MS_EXIT_USAGE;
        }
        return show(store, as_text);
    }
    if (i >= argc) {
        ms_cli_error("profile: no program given (usage: msched profile [options] -- program "
                     "[args])");
        return MS_EXIT_USAGE;
    }
    int e = ms_cli_use_shim(preload, false);
    if (e)
        return e;
    char tmp[PATH_MAX];
    if (!raw) {
        const char *dir = getenv("TMPDIR");
        snprintf(tmp, sizeof tmp, "%s/msched-profile-XXXXXX", dir && *dir ? dir : "/tmp");
        int fd = mkstemp(tmp);
        if (fd < 0) {
            ms_cli_error("profile: cannot create a temporary file %s: %s", tmp, strerror(errno));
            return MS_EXIT_RUNTIME;
        }
        close(fd);
    } else {
        unlink(raw); /* a stale one must not pass for this run's */
    }
    const char *raw_path = raw ? raw : tmp;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        if (setenv("MSCHED_PROFILE", raw_path, 1) != 0 || setenv("MSCHED_ENGINE", "off", 1) != 0 ||
            setenv("MSCHED_DAEMON", "off", 1) != 0 || ms_cli_use_shim(preload, true) != 0)
            _exit(MS_EXIT_RUNTIME);
        execvp(argv[i], &argv[i]);
        ms_cli_error("cannot run '%s': %s", argv[i], strerror(errno));
        _exit(127);
    }
    if (pid < 0) {
        ms_cli_error("profile: cannot fork: %s", strerror(errno));
        if (!raw)
            unlink(tmp);
        return MS_EXIT_RUNTIME;
    }
    /* The terminal's ^C goes to the program; this process waits for it either way. */
    signal(SIGINT, SIG_IGN);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    int status = WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : 1;
    int l = status == 127 ? 0 : learn(raw_path, store, true);
    if (!raw)
        unlink(tmp);
    return status ? status : l;
}

const struct ms_cli_cmd ms_cmd_profile = {
    .name = "profile",
    .summary = "learn what a program's kernels touch: msched profile [--out F] -- program [args]",
    .run = profile_main,
    .help = profile_help,
};
