/*
 * cmd_status.c - `msched status`: one screen about the daemon of a GPU: budget, resident memory,
 * switches, and a table of tasks; `--prometheus` prints the metrics in the Prometheus text
 * format instead (the daemon renders them: the same text a scraper would get), `--json` the
 * same reply as one JSON object (cli/status_json.c; schema docs/status.schema.json).
 *
 * Design
 *   One request, one reply, over the daemon's socket (ipc/ipc.h: ms_ipc_request), then
 *   ipc/status_text.c renders the reply; `msched top` uses the same renderer. The CLI talks to
 *   the daemon only through the public protocol.
 *
 * Exit status: 0; 1 when no daemon answers (the message names the socket) or it sent an error;
 * 2 for a bad command line.
 */
#include "cli/cli.h"
#include "cli/status_json.h"

#include "ipc/conf.h"
#include "ipc/ipc.h"
#include "ipc/status_text.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

int ms_cmd_status(int argc, char **argv);
void ms_cmd_status_help(FILE *f);

#define DEFAULT_TIMEOUT_MS 3000

void ms_cmd_status_help(FILE *f)
{
    fprintf(f, "usage: msched status [--gpu N|UUID] [--socket PATH] [--prometheus | --json]\n"
               "                     [--timeout DUR]\n"
               "\n"
               "Shows the daemon of a GPU: memory budget, resident bytes, context switches, and\n"
               "one row per task (state, priority, resident and total bytes, bytes moved, slices,\n"
               "GPU time).\n"
               "\n"
               "  --gpu N|UUID     which GPU's daemon: index N as the daemons number GPUs\n"
               "                   (gpuN.sock, default 0) or the GPU's UUID (GPU-...)\n"
               "  --socket PATH    the daemon's socket (default: $MSCHED_SOCKET, else the\n"
               "                   per-user runtime directory)\n"
               "  --prometheus     print the metrics in the Prometheus text format\n"
               "  --json           print one JSON object (schema: docs/status.schema.json)\n"
               "  --timeout DUR    give up after DUR (default 3s)\n");
}

/* Ask the daemon; prints the error and returns an exit status on failure. */
static int ask(const char *sock, int timeout_ms, const struct ms_msg *req, struct ms_msg *reply)
{
    int rc = ms_ipc_request(sock, timeout_ms, req, reply);
    if (rc == MS_E_NOTFOUND) {
        ms_cli_error("no daemon is running on %s (start one with 'mschedd')", sock);
        return MS_EXIT_RUNTIME;
    }
    if (rc == MS_E_STATE) /* an untrusted socket: ms_ipc_connect said why in one line */
        return MS_EXIT_RUNTIME;
    if (rc) {
        ms_cli_error("%s: %s%s%s", sock, ms_strerror(rc), errno ? ": " : "",
                     errno ? strerror(errno) : "");
        return MS_EXIT_RUNTIME;
    }
    if (reply->type == MS_MSG_ERROR) {
        ms_cli_error("the daemon refused: %s", reply->error.text);
        ms_msg_free(reply);
        return MS_EXIT_RUNTIME;
    }
    return 0;
}

enum { OPT_GPU = 256, OPT_SOCKET, OPT_TIMEOUT, OPT_PROM, OPT_JSON };

static const struct option longopts[] = {
    {"gpu", required_argument, NULL, OPT_GPU},
    {"socket", required_argument, NULL, OPT_SOCKET},
    {"timeout", required_argument, NULL, OPT_TIMEOUT},
    {"prometheus", no_argument, NULL, OPT_PROM},
    {"json", no_argument, NULL, OPT_JSON},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

int ms_cmd_status(int argc, char **argv)
{
    char sock[MS_IPC_PATH_MAX + 1];
    int timeout_ms = DEFAULT_TIMEOUT_MS;
    bool prom = false, json = false;
    if (ms_ipc_socket_path(0, sock, sizeof(sock)) != MS_OK) {
        ms_cli_error("socket path too long");
        return MS_EXIT_USAGE;
    }
    ms_cli_getopt_reset();
    int c;
    while ((c = ms_cli_getopt(argc, argv, ":h", longopts, "status")) != -1) {
        uint64_t ns;
        switch (c) {
        case OPT_GPU:
            if (ms_cli_gpu_socket(optarg, sock, sizeof(sock)))
                return MS_EXIT_USAGE;
            break;
        case OPT_SOCKET:
            if (ms_cli_socket(optarg, sock, sizeof(sock)))
                return MS_EXIT_USAGE;
            break;
        case OPT_TIMEOUT:
            if (ms_parse_duration(optarg, &ns) != MS_OK || ns < 1000000ull ||
                ns > 3600000000000ull) {
                ms_cli_error("--timeout: '%s' is not a duration between 1ms and 1h", optarg);
                return MS_EXIT_USAGE;
            }
            timeout_ms = (int)(ns / 1000000ull);
            break;
        case OPT_PROM: prom = true; break;
        case OPT_JSON: json = true; break;
        case 'h': ms_cmd_status_help(stdout); return 0;
        default: return MS_EXIT_USAGE;
        }
    }
    if (optind < argc) {
        ms_cli_error("status: unexpected argument '%s' (try 'msched help status')", argv[optind]);
        return MS_EXIT_USAGE;
    }
    if (prom && json) {
        ms_cli_error("status: --prometheus and --json exclude each other");
        return MS_EXIT_USAGE;
    }
    struct ms_msg req, reply;
    ms_msg_init(&req, prom ? MS_MSG_METRICS_REQ : MS_MSG_STATUS_REQ);
    errno = 0;
    int rc = ask(sock, timeout_ms, &req, &reply);
    if (rc)
        return rc;
    if (prom) {
        if (reply.type != MS_MSG_METRICS) {
            ms_cli_error("unexpected %s reply", ms_msg_type_name(reply.type));
            ms_msg_free(&reply);
            return MS_EXIT_RUNTIME;
        }
        fwrite(reply.metrics.text, 1, reply.metrics.len, stdout);
        ms_msg_free(&reply);
        return 0;
    }
    if (reply.type != MS_MSG_STATUS) {
        ms_cli_error("unexpected %s reply", ms_msg_type_name(reply.type));
        ms_msg_free(&reply);
        return MS_EXIT_RUNTIME;
    }
    if (json) {
        int jrc = ms_status_json(&reply.status, NULL, stdout);
        ms_msg_free(&reply);
        if (jrc || fflush(stdout) != 0) {
            ms_cli_error("cannot write the status: %s", strerror(errno ? errno : EIO));
            return MS_EXIT_RUNTIME;
        }
        return 0;
    }
    size_t cap = 1024 + (size_t)reply.status.ntasks * 512;
    char *text = malloc(cap);
    if (!text) {
        ms_msg_free(&reply);
        ms_cli_error("out of memory");
        return MS_EXIT_RUNTIME;
    }
    ms_status_render(&reply.status, NULL, 0, 0, text, cap);
    fputs(text, stdout);
    free(text);
    ms_msg_free(&reply);
    return 0;
}

const struct ms_cli_cmd ms_cli_status = {
    .name = "status",
    .summary = "show the daemon's memory budget, switches and tasks (--prometheus: metrics)",
    .run = ms_cmd_status,
    .help = ms_cmd_status_help,
};
