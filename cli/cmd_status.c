/*
 * cmd_status.c - `msched status`: one screen about the daemon of a GPU: budget, resident memory,
 * switches, and a table of tasks; `--prometheus` prints the metrics in the Prometheus text
 * format instead (the daemon renders them: the same text a scraper would get).
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

#include "ipc/conf.h"
#include "ipc/ipc.h"
#include "ipc/status_text.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int ms_cmd_status(int argc, char **argv);
void ms_cmd_status_help(FILE *f);

#define DEFAULT_TIMEOUT_MS 3000

void ms_cmd_status_help(FILE *f)
{
    fprintf(f, "usage: msched status [--gpu N] [--socket PATH] [--prometheus] [--timeout DUR]\n"
               "\n"
               "Shows the daemon of a GPU: memory budget, resident bytes, context switches, and\n"
               "one row per task (state, priority, resident and total bytes, bytes moved, slices,\n"
               "GPU time).\n"
               "\n"
               "  --gpu N          which GPU's daemon (default 0)\n"
               "  --socket PATH    the daemon's socket (default: $MSCHED_SOCKET, else the\n"
               "                   per-user runtime directory)\n"
               "  --prometheus     print the metrics in the Prometheus text format\n"
               "  --timeout DUR    give up after DUR (default 3s)\n");
}

/*
 * The options every daemon command shares. Returns 1 when argv[*i] was one of them, 0 when
 * not, -1 after printing an error.
 */
static int common_opt(int argc, char **argv, int *i, char *sock, size_t socklen, int *timeout_ms)
{
    const char *v;
    int m;
    if ((m = ms_cli_opt(argc, argv, i, "--gpu", &v)) != 0) {
        uint64_t g;
        if (m < 0)
            return -1;
        if (ms_cli_parse_u64(v, &g) != MS_OK || g > 255) {
            ms_cli_error("--gpu: '%s' is not a GPU index", v);
            return -1;
        }
        if (ms_ipc_socket_path((unsigned)g, sock, socklen) != MS_OK) {
            ms_cli_error("socket path too long");
            return -1;
        }
        return 1;
    }
    if ((m = ms_cli_opt(argc, argv, i, "--socket", &v)) != 0) {
        if (m < 0)
            return -1;
        if (strlen(v) >= socklen || strlen(v) >= MS_IPC_PATH_MAX) {
            ms_cli_error("--socket: path too long");
            return -1;
        }
        snprintf(sock, socklen, "%s", v);
        return 1;
    }
    if ((m = ms_cli_opt(argc, argv, i, "--timeout", &v)) != 0) {
        uint64_t ns;
        if (m < 0)
            return -1;
        if (ms_parse_duration(v, &ns) != MS_OK || ns < 1000000ull || ns > 3600000000000ull) {
            ms_cli_error("--timeout: '%s' is not a duration between 1ms and 1h", v);
            return -1;
        }
        *timeout_ms = (int)(ns / 1000000ull);
        return 1;
    }
    return 0;
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

int ms_cmd_status(int argc, char **argv)
{
    char sock[MS_IPC_PATH_MAX + 1];
    int timeout_ms = DEFAULT_TIMEOUT_MS;
    bool prom = false;
    if (ms_ipc_socket_path(0, sock, sizeof(sock)) != MS_OK) {
        ms_cli_error("socket path too long");
        return MS_EXIT_USAGE;
    }
    for (int i = 1; i < argc; i++) {
        int m = common_opt(argc, argv, &i, sock, sizeof(sock), &timeout_ms);
        if (m < 0)
            return MS_EXIT_USAGE;
        if (m > 0)
            continue;
        if (strcmp(argv[i], "--prometheus") == 0) {
            prom = true;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            ms_cmd_status_help(stdout);
            return 0;
        } else {
            ms_cli_error("status: unknown option '%s' (try 'msched help status')", argv[i]);
            return MS_EXIT_USAGE;
        }
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
    size_t cap = 256 + (size_t)reply.status.ntasks * 512;
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
