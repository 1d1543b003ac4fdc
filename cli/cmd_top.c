/*
 * cmd_top.c - `msched top`: a live view of a GPU's daemon, refreshed every second: tasks and
 * their states, resident and total bytes, bytes moved per second, switch times, throughput.
 *
 * Design
 *   One connection is kept open and asked for STATUS once per interval; two consecutive samples
 *   give the rates. The screen is the text ipc/status_text.c renders (the same as `msched
 *   status`, plus rates), drawn with ncurses when the build defines MS_HAVE_NCURSES (and links
 *   -lncurses), else with ANSI escapes. `--once`, or a stdout that is not a terminal, prints
 *   one plain frame and exits, so `msched top | head` and scripts work. If the daemon goes
 *   away the screen says so and keeps trying to reconnect. q (or Ctrl-C) quits.
 *
 * Exit status: 0; 1 when --once finds no daemon; 2 for a bad command line.
 */
#include "cli/cli.h"

#include "ipc/conf.h"
#include "ipc/ipc.h"
#include "ipc/status_text.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
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
    fprintf(f, "usage: msched top [--gpu N] [--socket PATH] [--interval DUR] [--once]\n"
               "                  [--count N]\n"
               "\n"
               "A live view of the daemon: tasks, states, resident and total bytes, bytes moved\n"
               "per second, switch times and throughput. q or Ctrl-C quits.\n"
               "\n"
               "  --interval DUR   refresh period (default 1s)\n"
               "  --once           print one plain frame and exit (also when stdout is not a\n"
               "                   terminal)\n"
               "  --count N        exit after N frames\n");
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

int ms_cmd_top(int argc, char **argv)
{
    struct viewer v;
    memset(&v, 0, sizeof(v));
    v.conn.fd = -1;
    int interval_ms = 1000;
    long count = 0;
    bool once = false;
    if (ms_ipc_socket_path(0, v.sock, sizeof(v.sock)) != MS_OK) {
        ms_cli_error("socket path too long");
        return MS_EXIT_USAGE;
    }
    for (int i = 1; i < argc; i++) {
        const char *val;
        int m;
        if ((m = ms_cli_opt(argc, argv, &i, "--gpu", &val)) != 0) {
            uint64_t g;
            if (m < 0)
                return MS_EXIT_USAGE;
            if (ms_cli_parse_u64(val, &g) != MS_OK || g > 255 ||
                ms_ipc_socket_path((unsigned)g, v.sock, sizeof(v.sock)) != MS_OK) {
                ms_cli_error("--gpu: '%s' is not a GPU index", val);
                return MS_EXIT_USAGE;
            }
        } else if ((m = ms_cli_opt(argc, argv, &i, "--socket", &val)) != 0) {
            if (m < 0)
                return MS_EXIT_USAGE;
            if (strlen(val) >= MS_IPC_PATH_MAX) {
                ms_cli_error("--socket: path too long");
                return MS_EXIT_USAGE;
            }
            snprintf(v.sock, sizeof(v.sock), "%s", val);
        } else if ((m = ms_cli_opt(argc, argv, &i, "--interval", &val)) != 0) {
            uint64_t ns;
            if (m < 0)
                return MS_EXIT_USAGE;
            if (ms_parse_duration(val, &ns) != MS_OK || ns < 100000000ull || ns > 60000000000ull) {
                ms_cli_error("--interval: '%s' is not a duration between 100ms and 60s", val);
                return MS_EXIT_USAGE;
            }
            interval_ms = (int)(ns / 1000000ull);
        } else if ((m = ms_cli_opt(argc, argv, &i, "--count", &val)) != 0) {
            uint64_t n;
            if (m < 0)
                return MS_EXIT_USAGE;
            if (ms_cli_parse_u64(val, &n) != MS_OK || n < 1 || n > 1000000) {
                ms_cli_error("--count: '%s' is not a number of frames", val);
                return MS_EXIT_USAGE;
            }
            count = (long)n;
        } else if (strcmp(argv[i], "--once") == 0) {
            once = true;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            ms_cmd_top_help(stdout);
            return 0;
        } else {
            ms_cli_error("top: unknown option '%s' (try 'msched help top')", argv[i]);
            return MS_EXIT_USAGE;
        }
    }
    char *text = malloc(TEXT_CAP);
    if (!text) {
        ms_cli_error("out of memory");
        return MS_EXIT_RUNTIME;
    }
    int rc = 0;
    if (once || !isatty(1)) {
        /* One plain frame, totals only. */
        if (sample(&v, 3000) != MS_OK) {
            ms_cli_error("%s", v.err);
            rc = MS_EXIT_RUNTIME;
        } else {
            render(&v, 0, text, TEXT_CAP);
            fputs(text, stdout);
        }
    } else {
        struct sigaction sa;
        memset(&sa, 0, sizeof(sa));
        sa.sa_handler = on_sigint;
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
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
