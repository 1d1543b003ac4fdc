/*
 * cmd_top.c - `msched top`: a live view of a GPU's daemon, refreshed every second: tasks and
 * their states, resident and total bytes, bytes moved per second, switch times, throughput.
 *
 * Design
 *   One connection is kept open and asked for STATUS once per interval; two consecutive samples
 *   give the rates. The screen is the text ipc/status_text.c renders (the same as `msched
 *   status`, plus rates), drawn with ncurses when the build defines MS_HAVE_NCURSES (and links
 *   -lncurses), else with ANSI escapes. If the daemon goes away the screen says so and keeps
 *   trying to reconnect. q (or Ctrl-C) quits.
 *   A stdout that is not a terminal, --once or --json gives plain frames instead, so pipes,
 *   files and scripts work: text separated by a blank line, or one JSON object per line
 *   (cli/status_json.c). Their number is --count, else one when no --interval was given (a
 *   plain `msched top | head` prints one frame and exits), else unlimited: a stream a
 *   collector can read until it stops it. A plain stream ends when the daemon cannot be
 *   reached; it does not wait for it to come back.
 *
 * Exit status: 0; 1 when plain frames find no daemon (or lose it); 2 for a bad command line.
 */
#include "cli/cli.h"
#include "cli/status_json.h"

#include "ipc/conf.h"
#include "ipc/ipc.h"
#include "ipc/status_text.h"

#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef MS_HAVE_NCURSES
#include <ncurses.h>
#endif

int ms_cmd_top(int argc, char **argv);
void ms_cmd_top_help(FILE *f);

#define TEXT_CAP 65536

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    interrupted = 1;
}

void ms_cmd_top_help(FILE *f)
{
    fprintf(f, "usage: msched top [--gpu N|UUID] [--socket PATH] [--interval DUR] [--count N]\n"
               "                  [--once] [--json]\n"
               "\n"
               "A live view of the daemon: tasks, states, resident and total bytes, bytes moved\n"
               "per second, switch times and throughput. q or Ctrl-C quits.\n"
               "When stdout is not a terminal (or with --once or --json), top prints plain\n"
               "frames instead, one every interval: --count of them, or one when neither\n"
               "--count nor --interval is given, or until interrupted when only --interval is.\n"
               "\n"
               "  --gpu N|UUID     which GPU's daemon: index N as the daemons number GPUs\n"
               "                   (gpuN.sock, default 0) or the GPU's UUID (GPU-...)\n"
               "  --socket PATH    the daemon's socket (default: $MSCHED_SOCKET, else the\n"
               "                   per-user runtime directory)\n"
               "  --interval DUR   refresh period, 100ms to 60s (default 1s)\n"
               "  --count N        exit after N frames\n"
               "  --once           print one plain frame and exit (--count 1)\n"
               "  --json           frames as JSON, one object per line, with rates from the\n"
               "                   second frame on (schema: docs/status.schema.json)\n");
}

struct viewer {
    char sock[MS_IPC_PATH_MAX + 1];
    struct ms_conn conn;
    bool connected;
    struct ms_msg prev, cur;
    bool have_prev, have_cur;
    uint64_t prev_t, cur_t;
    char err[256];
};

/* One sample into v->cur (the old one moves to prev). Returns 0 or an error (v->err says). */
static int sample(struct viewer *v, int timeout_ms)
{
    if (!v->connected) {
        int fd;
        int rc = ms_ipc_connect(v->sock, timeout_ms, &fd);
        if (rc) {
            snprintf(v->err, sizeof(v->err), "no daemon on %s (%s)", v->sock,
                     rc == MS_E_NOTFOUND ? "not running" : strerror(errno));
            return rc;
        }
        ms_conn_init(&v->conn, fd, 0);
        v->connected = true;
    }
    struct ms_msg req, reply;
    ms_msg_init(&req, MS_MSG_STATUS_REQ);
    int rc = ms_conn_request(&v->conn, timeout_ms, &req, &reply);
    if (rc || reply.type != MS_MSG_STATUS) {
        snprintf(v->err, sizeof(v->err), "lost the daemon on %s: %.100s", v->sock,
                 rc                           ? ms_strerror(rc)
                 : reply.type == MS_MSG_ERROR ? reply.error.text
                                              : "bad reply");
        if (!rc)
            ms_msg_free(&reply);
        ms_conn_fini(&v->conn);
        v->connected = false;
        ms_msg_free(&v->prev);
        v->have_prev = false;
        return rc ? rc : MS_E_PARSE;
    }
    ms_msg_free(&v->prev);
    v->prev = v->cur;
    v->prev_t = v->cur_t;
    v->have_prev = v->have_cur;
    v->cur = reply;
    v->cur_t = ms_ipc_now_ns();
    v->have_cur = true;
    v->err[0] = '\0';
    return MS_OK;
}

static void render(struct viewer *v, int width, char *text, size_t cap)
{
    text[0] = '\0';
    if (v->err[0] || !v->have_cur) {
        snprintf(text, cap, "msched top: %s\n", v->err[0] ? v->err : "waiting for the daemon");
        return;
    }
    double dt = v->have_prev ? (double)(v->cur_t - v->prev_t) / 1e9 : 0.0;
    ms_status_render(&v->cur.status, v->have_prev ? &v->prev.status : NULL, dt, width, text, cap);
}

static void viewer_fini(struct viewer *v)
{
    if (v->connected)
        ms_conn_fini(&v->conn);
    ms_msg_free(&v->prev);
    ms_msg_free(&v->cur);
}

#ifdef MS_HAVE_NCURSES
static void loop_curses(struct viewer *v, int interval_ms, long count, char *text)
{
    initscr();
    cbreak();
    noecho();
    curs_set(0);
    keypad(stdscr, TRUE);
    timeout(interval_ms);
    for (long frame = 0; !interrupted && (count <= 0 || frame < count); frame++) {
        sample(v, interval_ms);
        render(v, COLS, text, TEXT_CAP);
        erase();
        int row = 0;
        for (char *p = text; *p && row < LINES - 1; row++) {
            char *nl = strchr(p, '\n');
            size_t n = nl ? (size_t)(nl - p) : strlen(p);
            mvaddnstr(row, 0, p, (int)n);
            p += n + (nl ? 1 : 0);
        }
        attron(A_REVERSE);
        mvaddstr(LINES - 1, 0, " q: quit ");
        attroff(A_REVERSE);
        refresh();
        int ch = getch();
        if (ch == 'q' || ch == 'Q')
            break;
    }
    endwin();
}
#endif

static void loop_ansi(struct viewer *v, int interval_ms, long count, char *text)
{
    for (long frame = 0; !interrupted && (count <= 0 || frame < count); frame++) {
        sample(v, interval_ms);
        render(v, 0, text, TEXT_CAP);
        fputs("\033[H\033[2J", stdout);
        fputs(text, stdout);
        fputs("\n(q + Enter or Ctrl-C quits)\n", stdout);
        fflush(stdout);
        struct pollfd p = {.fd = 0, .events = POLLIN};
        if (poll(&p, 1, interval_ms) > 0) {
            char buf[64];
            ssize_t n = read(0, buf, sizeof(buf));
            if (n > 0 && memchr(buf, 'q', (size_t)n))
                break;
        }
    }
}

/*
 * Frames to a pipe or file: `count` of them (0: until interrupted), `interval_ms` apart, plain
 * text separated by a blank line, or JSON lines. Returns the exit status: 1 when the daemon
 * cannot be reached (or is lost) or stdout fails.
 */
static int loop_plain(struct viewer *v, int interval_ms, long count, bool json, char *text)
{
    for (long frame = 1; !interrupted && (count <= 0 || frame <= count); frame++) {
        if (frame > 1) {
            struct timespec ts = {interval_ms / 1000, (long)(interval_ms % 1000) * 1000000L};
            while (nanosleep(&ts, &ts) != 0 && errno == EINTR && !interrupted)
                ;
            if (interrupted)
                break;
        }
        if (sample(v, 3000) != MS_OK) {
            ms_cli_error("%s", v->err);
            return MS_EXIT_RUNTIME;
        }
        int rc = 0;
        if (json) {
            struct ms_json_frame fr = {
                .frame = (uint64_t)frame,
                .prev = v->have_prev ? &v->prev.status : NULL,
                .interval_s = v->have_prev ? (double)(v->cur_t - v->prev_t) / 1e9 : 0.0,
            };
            rc = ms_status_json(&v->cur.status, &fr, stdout);
        } else {
            render(v, 0, text, TEXT_CAP);
            if (frame > 1)
                fputc('\n', stdout);
            fputs(text, stdout);
        }
        if (rc || fflush(stdout) != 0 || ferror(stdout)) {
            ms_cli_error("cannot write a frame: %s", strerror(errno ? errno : EIO));
            return MS_EXIT_RUNTIME;
        }
    }
    return 0;
}

enum { OPT_GPU = 256, OPT_SOCKET, OPT_INTERVAL, OPT_COUNT, OPT_ONCE, OPT_JSON };

static const struct option longopts[] = {
    {"gpu", required_argument, NULL, OPT_GPU},
    {"socket", required_argument, NULL, OPT_SOCKET},
    {"interval", required_argument, NULL, OPT_INTERVAL},
    {"count", required_argument, NULL, OPT_COUNT},
    {"once", no_argument, NULL, OPT_ONCE},
    {"json", no_argument, NULL, OPT_JSON},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

int ms_cmd_top(int argc, char **argv)
{
    struct viewer v;
    memset(&v, 0, sizeof(v));
    v.conn.fd = -1;
    int interval_ms = 1000;
    long count = 0;
    bool once = false, json = false, have_interval = false;
    if (ms_ipc_socket_path(0, v.sock, sizeof(v.sock)) != MS_OK) {
        ms_cli_error("socket path too long");
        return MS_EXIT_USAGE;
    }
    ms_cli_getopt_reset();
    int c;
    while ((c = ms_cli_getopt(argc, argv, ":h", longopts, "top")) != -1) {
        uint64_t n;
        switch (c) {
        case OPT_GPU:
            if (ms_cli_gpu_socket(optarg, v.sock, sizeof(v.sock)))
                return MS_EXIT_USAGE;
            break;
        case OPT_SOCKET:
            if (ms_cli_socket(optarg, v.sock, sizeof(v.sock)))
                return MS_EXIT_USAGE;
            break;
        case OPT_INTERVAL:
            if (ms_parse_duration(optarg, &n) != MS_OK || n < 100000000ull || n > 60000000000ull) {
                ms_cli_error("--interval: '%s' is not a duration between 100ms and 60s", optarg);
                return MS_EXIT_USAGE;
            }
            interval_ms = (int)(n / 1000000ull);
            have_interval = true;
            break;
        case OPT_COUNT:
            if (ms_cli_parse_u64(optarg, &n) != MS_OK || n < 1 || n > 1000000) {
                ms_cli_error("--count: '%s' is not a number of frames", optarg);
                return MS_EXIT_USAGE;
            }
            count = (long)n;
            break;
        case OPT_ONCE: once = true; break;
        case OPT_JSON: json = true; break;
        case 'h': ms_cmd_top_help(stdout); return 0;
        default: return MS_EXIT_USAGE;
        }
    }
    if (optind < argc) {
        ms_cli_error("top: unexpected argument '%s' (try 'msched help top')", argv[optind]);
        return MS_EXIT_USAGE;
    }
    char *text = malloc(TEXT_CAP);
    if (!text) {
        ms_cli_error("out of memory");
        return MS_EXIT_RUNTIME;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    int rc = 0;
    if (once || json || !isatty(1)) {
        if (once)
            count = 1;
        else if (count == 0 && !have_interval)
            count = 1;
        rc = loop_plain(&v, interval_ms, count, json, text);
    } else {
#ifdef MS_HAVE_NCURSES
        const char *term = getenv("TERM");
        if (term && *term && strcmp(term, "dumb") != 0)
            loop_curses(&v, interval_ms, count, text);
        else
            loop_ansi(&v, interval_ms, count, text);
#else
        loop_ansi(&v, interval_ms, count, text);
#endif
    }
    free(text);
    viewer_fini(&v);
    return rc;
}

const struct ms_cli_cmd ms_cli_top = {
    .name = "top",
    .summary = "live view of the daemon: tasks, memory, bytes moved, switch times",
    .run = ms_cmd_top,
    .help = ms_cmd_top_help,
};
