/*
 * cmd_config.c - `msched config get [KEY]` and `msched config set KEY VALUE`: read and change
 * the running daemon's options (the table in ipc/conf.c; `mschedd --help-options` lists them).
 *
 * Design
 *   CONFIG_GET with an empty key returns every option; with a key, that one. CONFIG_SET answers
 *   with the option's new canonical value (a size is printed back as "12GiB" however it was
 *   typed) or an ERROR naming the problem (unknown key, bad value, out of range, not changeable
 *   while running). Output is "key = value" lines: the configuration file's syntax, so
 *   `msched config get > mschedd.conf` writes a valid file.
 *
 *   `set --save` also writes the option to the configuration file (ipc/conf.c ms_conf_save:
 *   the line that sets it is replaced, or one is appended; the file is replaced by rename), so
 *   the change outlives a restart: the daemon's canonical value when it took the change; the
 *   value as given when the option is fixed while the daemon runs, or no daemon runs (then
 *   the file is what changes, for the next start). The file is --config FILE, else
 *   $MSCHED_CONFIG, else /etc/msched/msched.conf (the one the systemd unit gives mschedd).
 *
 * Exit status: 0; 1 when no daemon answers or it refused (with --save: when the file could not
 * be written, or the daemon refused a value it could have taken); 2 for a bad command line.
 */
#include "cli/cli.h"

#include "ipc/conf.h"
#include "ipc/ipc.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

int ms_cmd_config(int argc, char **argv);
void ms_cmd_config_help(FILE *f);

void ms_cmd_config_help(FILE *f)
{
    fprintf(f, "usage: msched config [--gpu N|UUID] [--socket PATH] get [KEY]\n"
               "       msched config [--gpu N|UUID] [--socket PATH] set [--save [--config FILE]] "
               "KEY VALUE\n"
               "\n"
               "Reads or changes the running daemon's options, e.g.\n"
               "  msched config set slice 50ms\n"
               "  msched config set policy prio\n"
               "  msched config set budget 12GiB\n"
               "Keys: budget, slice, slice_max, switch_frac, policy (rr, prio, adaptive),\n"
               "evict (opt, lru, whole), cost, stop_timeout, order_timeout, horizon, early_run,\n"
               "idle_hold, share (on, off), prepare_host (on, off), log_level, check, idle_exit;\n"
               "others are shown but fixed while the daemon runs. A VALUE that starts with '-'\n"
               "follows '--'.\n"
               "\n"
               "  --save           also write it to the configuration file (the daemon's\n"
               "                   canonical value; a fixed option or no daemon: the file only,\n"
               "                   for the next start)\n"
               "  --config FILE    the file --save writes (default: $MSCHED_CONFIG, else\n"
               "                   " MS_CONF_DEFAULT_PATH ")\n"
               "  --gpu N|UUID     which GPU's daemon: index N as the daemons number GPUs\n"
               "                   (gpuN.sock, default 0) or the GPU's UUID (GPU-...)\n"
               "  --socket PATH    the daemon's socket (default: $MSCHED_SOCKET, else the\n"
               "                   per-user runtime directory)\n");
}

enum { OPT_GPU = 256, OPT_SOCKET, OPT_SAVE, OPT_CONFIG };

static const struct option longopts[] = {
    {"gpu", required_argument, NULL, OPT_GPU}, {"socket", required_argument, NULL, OPT_SOCKET},
    {"save", no_argument, NULL, OPT_SAVE},     {"config", required_argument, NULL, OPT_CONFIG},
    {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0},
};

/* Write kv to the configuration file; 0, or 1 after saying why not. */
static int save_to(const char *file, const struct ms_kv *kv)
{
    char why[400];
    if (ms_conf_save(file, kv->key, kv->value, why, sizeof(why)) != MS_OK) {
        ms_cli_error("not saved: %s", why);
        return 1;
    }
    return 0;
}

int ms_cmd_config(int argc, char **argv)
{
    char sock[MS_IPC_PATH_MAX + 1];
    if (ms_ipc_socket_path(0, sock, sizeof(sock)) != MS_OK) {
        ms_cli_error("socket path too long");
        return MS_EXIT_USAGE;
    }
    const char *words[3] = {NULL, NULL, NULL};
    int nwords = 0;
    bool save = false;
    const char *file = getenv("MSCHED_CONFIG");
    if (!file || !file[0])
        file = MS_CONF_DEFAULT_PATH;
    ms_cli_getopt_reset();
    int c;
    while ((c = ms_cli_getopt(argc, argv, ":h", longopts, "config")) != -1) {
        switch (c) {
        case OPT_GPU:
            if (ms_cli_gpu_socket(optarg, sock, sizeof(sock)))
                return MS_EXIT_USAGE;
            break;
        case OPT_SOCKET:
            if (ms_cli_socket(optarg, sock, sizeof(sock)))
                return MS_EXIT_USAGE;
            break;
        case OPT_SAVE: save = true; break;
        case OPT_CONFIG: file = optarg; break;
        case 'h': ms_cmd_config_help(stdout); return 0;
        default: return MS_EXIT_USAGE;
        }
    }
    for (int i = optind; i < argc; i++) {
        if (nwords >= 3) {
            ms_cli_error("config: too many arguments (try 'msched help config')");
            return MS_EXIT_USAGE;
        }
        words[nwords++] = argv[i];
    }
    struct ms_msg req;
    if (nwords >= 1 && strcmp(words[0], "get") == 0 && nwords <= 2) {
        ms_msg_init(&req, MS_MSG_CONFIG_GET);
        if (nwords == 2 && snprintf(req.config.kv.key, sizeof(req.config.kv.key), "%s", words[1]) >=
                               (int)sizeof(req.config.kv.key)) {
            ms_cli_error("config: key too long");
            return MS_EXIT_USAGE;
        }
    } else if (nwords == 3 && strcmp(words[0], "set") == 0) {
        ms_msg_init(&req, MS_MSG_CONFIG_SET);
        if (snprintf(req.config.kv.key, sizeof(req.config.kv.key), "%s", words[1]) >=
                (int)sizeof(req.config.kv.key) ||
            snprintf(req.config.kv.value, sizeof(req.config.kv.value), "%s", words[2]) >=
                (int)sizeof(req.config.kv.value)) {
            ms_cli_error("config: key or value too long");
            return MS_EXIT_USAGE;
        }
    } else {
        ms_cli_error("config: expected 'get [KEY]' or 'set KEY VALUE' (try 'msched help config')");
        return MS_EXIT_USAGE;
    }
    if (save && req.type != MS_MSG_CONFIG_SET) {
        ms_cli_error("config: --save goes with 'set KEY VALUE'");
        return MS_EXIT_USAGE;
    }
    if (ms_msg_validate(&req, NULL, 0) != MS_OK) {
        ms_cli_error("config: the key or value has characters the protocol does not carry");
        return MS_EXIT_USAGE;
    }
    struct ms_msg reply;
    errno = 0;
    int rc = ms_ipc_request(sock, 3000, &req, &reply);
    const struct ms_conf_opt *opt = save ? ms_conf_find(req.config.kv.key) : NULL;
    if (rc == MS_E_NOTFOUND && opt) {
        if (save_to(file, &req.config.kv))
            return MS_EXIT_RUNTIME;
        printf("no daemon is running on %s; saved to %s for its next start\n", sock, file);
        return 0;
    }
    if (rc == MS_E_NOTFOUND) {
        ms_cli_error("no daemon is running on %s", sock);
        return MS_EXIT_RUNTIME;
    }
    if (rc == MS_E_STATE) /* an untrusted socket: ms_ipc_connect said why in one line */
        return MS_EXIT_RUNTIME;
    if (rc) {
        ms_cli_error("%s: %s%s%s", sock, ms_strerror(rc), errno ? ": " : "",
                     errno ? strerror(errno) : "");
        return MS_EXIT_RUNTIME;
    }
    if (reply.type == MS_MSG_ERROR && opt && !opt->runtime) {
        ms_msg_free(&reply);
        if (save_to(file, &req.config.kv))
            return MS_EXIT_RUNTIME;
        printf("%s is fixed while the daemon runs; saved to %s for its next start\n",
               req.config.kv.key, file);
        return 0;
    }
    if (reply.type == MS_MSG_ERROR) {
        ms_cli_error("%s", reply.error.text);
        ms_msg_free(&reply);
        return MS_EXIT_RUNTIME;
    }
    if (reply.type != MS_MSG_CONFIG) {
        ms_cli_error("unexpected %s reply", ms_msg_type_name(reply.type));
        ms_msg_free(&reply);
        return MS_EXIT_RUNTIME;
    }
    if (save && reply.config.npairs == 1 && save_to(file, &reply.config.pairs[0])) {
        ms_msg_free(&reply);
        return MS_EXIT_RUNTIME; /* the daemon took it; the file says why it could not */
    }
    for (uint32_t i = 0; i < reply.config.npairs; i++) {
        const char *v = reply.config.pairs[i].value;
        bool quote = v[0] == '\0' || strchr(v, ' ') || strchr(v, '#');
        printf("%s = %s%s%s\n", reply.config.pairs[i].key, quote ? "\"" : "", v, quote ? "\"" : "");
    }
    ms_msg_free(&reply);
    return 0;
}

const struct ms_cli_cmd ms_cli_config = {
    .name = "config",
    .summary = "read or change the running daemon's options",
    .run = ms_cmd_config,
    .help = ms_cmd_config_help,
};
