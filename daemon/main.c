/*
 * main.c - mschedd's command line: options, configuration file, daemonizing, then the loop.
 *
 * Options come from three places, later ones winning: built-in defaults, the configuration
 * file (--config), and command-line flags. Every option of the table in ipc/conf.c is also a
 * flag (--slice-max 2s is the option slice_max); a few flags are extra (--foreground, -v,
 * --check, --set KEY=VALUE).
 *
 * The GPU is named by its UUID (ipc/gpuid.h): --uuid, or the UUID of GPU --gpu N (numbered
 * with every GPU visible), asked of the CUDA driver in a short-lived child before anything
 * else. The socket is then gpu-<uuid>.sock (unless --socket or $MSCHED_SOCKET say otherwise),
 * its lock gpu-<uuid>.sock.lock, and gpuN.sock a link to it (beside a socket of that name,
 * however its path was given) made once the daemon listens and removed as it stops (only while it
 * still leads to this daemon's socket). Without a driver the socket is gpuN.sock as named by the
 * index. The budget, unless set, is 90 % of the GPU's memory, or 16 GiB when no driver answers
 * (ms_gpu_default_budget): the same rule however the daemon is started.
 *
 * Without --foreground the daemon forks into the background. The parent waits on a pipe until
 * the child is listening (or failed), so `mschedd && msched status` always finds it, and
 * failures such as "another daemon is running" are printed by the parent and reflected in its
 * exit status. Exit status: 0, 1 for a runtime failure, 2 for a bad command line.
 *
 * Under a service manager (daemon/sdnotify.c): a socket passed by socket activation is used,
 * and its path becomes the socket option; READY=1 is sent once the daemon serves. The command
 * line and the file's name are kept so that SIGHUP can rebuild the configuration the same way
 * (reload_conf: defaults, the file as it is now, the flags).
 */
#include "daemon/daemon.h"

#include "ipc/gpuid.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define EXIT_RUNTIME 1
#define EXIT_USAGE 2

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: mschedd [options]\n"
        "The msched daemon for one GPU: time-slices the GPU between the processes that run\n"
        "under msched and plans the memory each context switch moves.\n"
        "\n"
        "  -f, --foreground        stay in the foreground (logs go to stderr)\n"
        "  -c, --config FILE       read options from FILE (key = value lines)\n"
        "      --gpu N             GPU index, every GPU visible (default 0): the daemon\n"
        "                          serves the GPU with that index's UUID\n"
        "      --uuid GPU-...      the GPU by its UUID (as nvidia-smi -L prints it)\n"
        "      --socket PATH       socket path (default: $MSCHED_SOCKET, else\n"
        "                          gpu-UUID.sock in $MSCHED_SOCKET_DIR, else in\n"
        "                          $XDG_RUNTIME_DIR/msched, else in /tmp/msched-UID;\n"
        "                          gpuN.sock is a link to it)\n"
        "      --budget SIZE       device memory all tasks may hold (default: 90 %% of\n"
        "                          the GPU's memory; 16GiB when no driver answers)\n"
        "      --slice DURATION    base time slice (100ms)\n"
        "      --policy P          rr, prio or adaptive\n"
        "      --evict E           opt, lru or whole\n"
        "      --log-file FILE     log to FILE (background default: the socket path + .log)\n"
        "      --log-level L       error, warn (default), info or debug\n"
        "      --metrics-listen [HOST:]PORT  serve Prometheus metrics at GET /metrics\n"
        "                          (a port alone: 127.0.0.1)\n"
        "  -v, -vv                 log level info, debug\n"
        "      --set KEY=VALUE     set any option; every option is also a flag --KEY VALUE\n"
        "      --check             verify the scheduler's invariants after every event-loop pass\n"
        "      --help-options      list every option with its default\n"
        "  -h, --help              this text\n"
        "      --version\n");
}

static int parse_args(int argc, char **argv, struct ms_conf *c, bool *foreground,
                      const char **config, int pass);

/* The command line and the file, kept for SIGHUP (reload_conf). */
static int saved_argc;
static char **saved_argv;
static const char *saved_config;

/* The configuration as defaults, the file and the flags give it now. */
static int reload_conf(struct ms_conf *out, char *why, size_t whylen)
{
    struct ms_conf c;
    ms_conf_default(&c);
    if (saved_config) {
        int rc = ms_conf_load(&c, saved_config, why, whylen);
        if (rc)
            return rc;
    }
    bool fg = false;
    const char *cfg = NULL;
    if (parse_args(saved_argc, saved_argv, &c, &fg, &cfg, 1) != 0) {
        snprintf(why, whylen, "the command line no longer applies");
        return MS_E_INVAL;
    }
    int rc = ms_conf_check(&c, why, whylen);
    if (!rc)
        *out = c;
    return rc;
}

static void list_options(void)
{
    struct ms_conf c;
    ms_conf_default(&c);
    size_t n;
    const struct ms_conf_opt *o = ms_conf_opts(&n);
    printf("%-16s %-10s %-8s %s\n", "option", "default", "runtime", "description");
    for (size_t i = 0; i < n; i++) {
        char v[300];
        ms_conf_get(&c, o[i].name, v, sizeof(v));
        printf("%-16s %-10s %-8s %s\n", o[i].name, v[0] ? v : "\"\"", o[i].runtime ? "yes" : "no",
               o[i].help);
    }
}

static int set_opt(struct ms_conf *c, const char *key, const char *value)
{
    char k[64], why[300];
    snprintf(k, sizeof(k), "%s", key);
    for (char *p = k; *p; p++)
        if (*p == '-')
            *p = '_';
    if (ms_conf_set(c, k, value, false, why, sizeof(why)) != MS_OK) {
        fprintf(stderr, "mschedd: %s\n", why);
        return EXIT_USAGE;
    }
    return 0;
}

/* Parse the command line into c (after the file). Returns 0, EXIT_USAGE, or -1 for "exit 0". */
static int parse_args(int argc, char **argv, struct ms_conf *c, bool *foreground,
                      const char **config, int pass)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = NULL;
        char name[64];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            if (pass == 0)
                usage(stdout);
            return -1;
        }
        if (strcmp(a, "--version") == 0) {
            if (pass == 0)
                printf("mschedd 0.1.0 (protocol %d)\n", MS_PROTO_VERSION);
            return -1;
        }
        if (strcmp(a, "--help-options") == 0) {
            if (pass == 0)
                list_options();
            return -1;
        }
        if (strcmp(a, "-f") == 0 || strcmp(a, "--foreground") == 0) {
            *foreground = true;
            continue;
        }
        if (strcmp(a, "-v") == 0 || strcmp(a, "-vv") == 0) {
            if (pass == 1)
                c->log_level = a[2] ? MS_LOG_DEBUG : MS_MAX(c->log_level, (uint32_t)MS_LOG_INFO);
            continue;
        }
        if (strcmp(a, "--check") == 0) {
            if (pass == 1)
                c->check = true;
            continue;
        }
        if (strcmp(a, "-c") == 0) {
            if (++i >= argc) {
                fprintf(stderr, "mschedd: -c needs a file\n");
                return EXIT_USAGE;
            }
            *config = argv[i];
            continue;
        }
        if (strncmp(a, "--", 2) != 0 || a[2] == '\0') {
            fprintf(stderr, "mschedd: unexpected argument '%s' (see --help)\n", a);
            return EXIT_USAGE;
        }
        const char *eq = strchr(a + 2, '=');
        size_t nlen = eq ? (size_t)(eq - (a + 2)) : strlen(a + 2);
        if (nlen >= sizeof(name)) {
            fprintf(stderr, "mschedd: unknown option '%s'\n", a);
            return EXIT_USAGE;
        }
        memcpy(name, a + 2, nlen);
        name[nlen] = '\0';
        char optkey[sizeof(name)];
        memcpy(optkey, name, nlen + 1);
        for (char *p = optkey; *p; p++)
            if (*p == '-')
                *p = '_';
        if (strcmp(name, "config") != 0 && strcmp(name, "set") != 0 && !ms_conf_find(optkey)) {
            /* Before asking for its value: "--bogus" is unknown, not missing a value. */
            fprintf(stderr, "mschedd: unknown option '--%s' (see --help)\n", name);
            return EXIT_USAGE;
        }
        if (eq) {
            val = eq + 1;
        } else {
            if (i + 1 >= argc) {
                fprintf(stderr, "mschedd: --%s needs a value\n", name);
                return EXIT_USAGE;
            }
            val = argv[++i];
        }
        if (strcmp(name, "config") == 0) {
            *config = val;
            continue;
        }
        if (pass == 0)
            continue; /* options are applied in the second pass, after the file */
        if (strcmp(name, "set") == 0) {
            const char *e2 = strchr(val, '=');
            if (!e2 || e2 == val) {
                fprintf(stderr, "mschedd: --set needs KEY=VALUE\n");
                return EXIT_USAGE;
            }
            char key[64];
            snprintf(key, sizeof(key), "%.*s", (int)(e2 - val), val);
            int rc = set_opt(c, key, e2 + 1);
            if (rc)
                return rc;
            continue;
        }
        for (char *p = name; *p; p++)
            if (*p == '-')
                *p = '_';
        if (!ms_conf_find(name)) {
            fprintf(stderr, "mschedd: unknown option '--%s' (see --help)\n", name);
            return EXIT_USAGE;
        }
        int rc = set_opt(c, name, val);
        if (rc)
            return rc;
    }
    return 0;
}

/* Fork; the parent waits for the child's word and exits with it. Returns the pipe's fd. */
static int daemonize(void)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) {
        perror("mschedd: pipe");
        exit(EXIT_RUNTIME);
    }
    pid_t pid = fork();
    if (pid < 0) {
        perror("mschedd: fork");
        exit(EXIT_RUNTIME);
    }
    if (pid > 0) {
        close(p[1]);
        char msg[600];
        ssize_t n, got = 0;
        while ((n = read(p[0], msg + got, sizeof(msg) - 1 - (size_t)got)) > 0)
            got += n;
        msg[got > 0 ? got : 0] = '\0';
        if (got > 0 && msg[0] == '0')
            exit(0);
        if (got > 1)
            fprintf(stderr, "mschedd: %s\n", msg + 1);
        else
            fprintf(stderr, "mschedd: the daemon failed to start\n");
        int st;
        waitpid(pid, &st, 0);
        exit(EXIT_RUNTIME);
    }
    close(p[0]);
    setsid();
    if (chdir("/") != 0) {
        /* nothing depends on the working directory */
    }
    int null = open("/dev/null", O_RDWR);
    if (null >= 0) {
        dup2(null, 0);
        dup2(null, 1);
        if (null > 2)
            close(null);
    }
    return p[1];
}

/*
 * Which GPU, by the driver (gpuid.h): its UUID into c->uuid and its index into c->gpu; the
 * socket named by the UUID into c->socket, and the index name to link to it into link (""
 * for none); the budget when budget_auto. note gets a line for the log. Returns 0 or an exit
 * status.
 */
static int identify(struct ms_conf *c, bool budget_auto, char *link, size_t linklen, char *note,
                    size_t notelen)
{
    const char *env = getenv("MSCHED_SOCKET");
    bool by_uuid = !c->socket[0] && !(env && *env);
    link[0] = note[0] = '\0';
    if (!by_uuid && !budget_auto && !c->uuid[0])
        return 0;
    struct ms_gpu_id id;
    char why[300];
    int rc = ms_gpu_identify((int)c->gpu, c->uuid[0] ? c->uuid : NULL, true, &id, why, sizeof(why));
    if (rc == MS_E_INVAL) {
        fprintf(stderr, "mschedd: %s\n", why);
        return EXIT_USAGE;
    }
    if (rc == MS_E_NOTFOUND) {
        fprintf(stderr, "mschedd: %s\n", why);
        return EXIT_RUNTIME;
    }
    if (rc == MS_OK) {
        snprintf(c->uuid, sizeof(c->uuid), "%s", id.uuid);
        c->gpu = (uint32_t)id.ordinal;
    } else if (c->uuid[0]) {
        char hex[MS_IPC_UUID_MAX];
        if (ms_ipc_uuid_hex(c->uuid, hex, sizeof(hex)) != MS_OK) {
            fprintf(stderr, "mschedd: '%s' is not a GPU UUID\n", c->uuid);
            return EXIT_USAGE;
        }
    }
    if (budget_auto) {
        c->budget = ms_gpu_default_budget(rc == MS_OK ? id.total : 0);
        char b[32], t[32];
        ms_format_size(c->budget, b, sizeof(b));
        if (rc == MS_OK) {
            ms_format_size(id.total, t, sizeof(t));
            snprintf(note, notelen, "budget %s: 90 %% of the GPU's %s", b, t);
        } else {
            snprintf(note, notelen, "budget %s: the GPU's memory is unknown (%s)", b, why);
        }
    } else if (rc != MS_OK && by_uuid) {
        snprintf(note, notelen, "the GPU is named by its index: %s", why);
    }
    if (by_uuid && c->uuid[0] &&
        ms_ipc_uuid_socket_path(c->uuid, c->socket, sizeof(c->socket)) != MS_OK) {
        fprintf(stderr, "mschedd: socket path too long (at most %d bytes)\n", MS_IPC_PATH_MAX - 1);
        return EXIT_USAGE;
    }
    /* The index name, beside a socket named by the UUID however the path was given. */
    const char *sock = c->socket[0] ? c->socket : env;
    const char *base = sock ? strrchr(sock, '/') : NULL;
    char hex[MS_IPC_UUID_MAX], want[MS_IPC_UUID_MAX + 16];
    if (rc == MS_OK && base && ms_ipc_uuid_hex(c->uuid, hex, sizeof(hex)) == MS_OK) {
        snprintf(want, sizeof(want), "gpu-%s.sock", hex);
        if (strcmp(base + 1, want) == 0 &&
            snprintf(link, linklen, "%.*s/gpu%u.sock", (int)(base - sock), sock, c->gpu) >=
                (int)linklen)
            link[0] = '\0';
    }
    return 0;
}

static void tell_parent(int fd, const char *msg)
{
    if (fd < 0)
        return;
    ssize_t w = write(fd, msg, strlen(msg));
    (void)w;
    close(fd);
}

int main(int argc, char **argv)
{
    struct ms_conf conf;
    ms_conf_default(&conf);
    conf.budget = 0; /* unset: the default rule below, once the GPU is known */
    bool foreground = false;
    const char *config = NULL;
    int rc = parse_args(argc, argv, &conf, &foreground, &config, 0);
    if (rc)
        return rc < 0 ? 0 : rc;
    if (config) {
        char why[400];
        if (ms_conf_load(&conf, config, why, sizeof(why)) != MS_OK) {
            fprintf(stderr, "mschedd: %s\n", why);
            return EXIT_USAGE;
        }
    }
    rc = parse_args(argc, argv, &conf, &foreground, &config, 1);
    if (rc)
        return rc < 0 ? 0 : rc;
    char link[MS_IPC_PATH_MAX + 8], note[400];
    rc = identify(&conf, conf.budget == 0, link, sizeof(link), note, sizeof(note));
    if (rc)
        return rc;
    char why[400];
    if (ms_conf_check(&conf, why, sizeof(why)) != MS_OK) {
        fprintf(stderr, "mschedd: %s\n", why);
        return EXIT_USAGE;
    }

    /* Socket activation: the manager's socket, and so its path, win over the configuration. */
    char act[MS_IPC_PATH_MAX];
    int act_fd = ms_sd_listen_fd(act, sizeof(act));
    if (act_fd == -2) {
        fprintf(stderr, "mschedd: the socket passed by the service manager (LISTEN_FDS) is not "
                        "a listening Unix stream socket with a path\n");
        return EXIT_RUNTIME;
    }
    if (act_fd >= 0)
        snprintf(conf.socket, sizeof(conf.socket), "%s", act);
    saved_argc = argc;
    saved_argv = argv;
    saved_config = config;

    struct ms_daemon d;
    memset(&d, 0, sizeof(d));
    d.conf = conf;
    d.inherit_fd1 = act_fd + 1;
    d.reload = reload_conf;
    /* The socket's directory comes first: the default log lives in it, and on a fresh machine
     * (a new XDG_RUNTIME_DIR, no /tmp/msched-UID) nothing else has created it. */
    char sock[MS_IPC_PATH_MAX + 8];
    if (conf.socket[0])
        rc = snprintf(sock, sizeof(sock), "%s", conf.socket) >= MS_IPC_PATH_MAX ? MS_E_NOSPACE
                                                                                : MS_OK;
    else
        rc = ms_ipc_socket_path(conf.gpu, sock, sizeof(sock));
    if (rc) {
        fprintf(stderr, "mschedd: socket path too long (at most %d bytes)\n", MS_IPC_PATH_MAX - 1);
        return EXIT_USAGE;
    }
    if (ms_ipc_prepare_dir(sock, why, sizeof(why)) != MS_OK) {
        fprintf(stderr, "mschedd: %s\n", why);
        return EXIT_RUNTIME;
    }
    if (!foreground && !conf.log_file[0])
        snprintf(d.conf.log_file, sizeof(d.conf.log_file), "%s.log", sock);
    int ready = foreground ? -1 : daemonize();
    ms_log_set_level((enum ms_log_level)d.conf.log_level);
    if (d.conf.log_file[0] && ms_log_open(d.conf.log_file) != MS_OK) {
        char msg[400];
        snprintf(msg, sizeof(msg), "1cannot open log file %s: %s", d.conf.log_file,
                 errno == ELOOP ? "it is a symbolic link (refused)" : strerror(errno));
        if (ready >= 0)
            tell_parent(ready, msg);
        else
            fprintf(stderr, "mschedd: %s\n", msg + 1);
        return EXIT_RUNTIME;
    }
    if (foreground && !d.conf.log_file[0])
        ms_log_detect_journal();
    if (!foreground && d.conf.log_file[0]) {
        int fd = open(d.conf.log_file, O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW);
        if (fd >= 0) {
            dup2(fd, 2); /* stray stderr output lands in the log too */
            close(fd);
        }
    }
    rc = ms_daemon_init(&d, why, sizeof(why));
    if (rc) {
        if (ready >= 0) {
            char msg[420];
            snprintf(msg, sizeof(msg), "1%s", why);
            tell_parent(ready, msg);
        } else {
            fprintf(stderr, "mschedd: %s\n", why);
        }
        ms_log_error("%s", why);
        ms_daemon_fini(&d);
        return EXIT_RUNTIME;
    }
    if (note[0])
        ms_log_info("%s", note);
    if (link[0]) {
        if (ms_ipc_link_socket(d.sock_path, link) == MS_OK)
            ms_log_info("GPU %u is %s: %s links to %s", d.conf.gpu, d.conf.uuid, link, d.sock_path);
        else
            ms_log_warn("cannot link %s to %s: %s", link, d.sock_path, strerror(errno));
    }
    tell_parent(ready, "0");
    char status[MS_IPC_PATH_MAX + 80];
    snprintf(status, sizeof(status), "READY=1\nSTATUS=serving GPU %u on %s%s", d.conf.gpu,
             d.sock_path, act_fd >= 0 ? " (socket activated)" : "");
    ms_sd_notify(status);
    rc = ms_daemon_run(&d);
    if (link[0])
        ms_ipc_unlink_link(d.sock_path, link);
    ms_daemon_fini(&d);
    ms_log_info("stopped");
    ms_log_close();
    return rc;
}
