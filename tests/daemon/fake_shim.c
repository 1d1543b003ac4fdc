/*
 * fake_shim.c - a stand-in for libmsched in the daemon's tests: it speaks the protocol the way
 * a shim does, obeys the daemon's orders, and can misbehave on request. No GPU, no CUDA.
 *
 * Design
 *   It registers as a task (HELLO), declares regions of 2 MiB chunks (REGION), says it has
 *   work with a working set (DEMAND), then serves orders until its job is done (--slices N:
 *   N slices; --work MS: MS milliseconds holding the GPU; then BYE): RUN
 *   (holds the GPU), STOP (replies STOPPED), EVICT (releases the chunks, one EVICTED per run),
 *   POPULATE and CREDIT (maps the runs its cumulative credit covers, POPULATED as runs
 *   complete), PREPARE (a hint: checked, logged, nothing to do). It keeps its own account of the
 * chunks it holds and checks the daemon's orders against it: an order naming an unknown region or
 * chunk, a credit that shrinks, or memory held beyond the budget is a daemon bug and ends the run
 * with exit status 4.
 *
 *   Misbehaviour, for the robustness tests:
 *     --die-at EV[:N]   _exit(3) at once on the Nth message of type EV (run, stop, evict,
 *                       populate, credit): a crash mid-migration;
 *     --hang-at EV[:N]  stop answering anything from then on; the process stays, holding
 *                       its memory, until it is killed (or the watchdog fires);
 *     --close-at EV[:N] close the connection and keep running, holding its memory, until it
 *                       is killed (or the watchdog fires): a shim that gave up on the daemon;
 *     --garbage MODE    prehello (random bytes instead of HELLO), badframe (a frame whose
 *                       length field lies), oversize (a header announcing 2 MiB), version (a
 *                       frame of protocol version 2), badregion (a DEMAND naming an unknown
 *                       region): the daemon must answer ERROR and close; exit 0 when it did;
 *     --flood           send STATUS_REQ forever without reading: the daemon must drop us;
 *     --flood-config    the same with CONFIG_SET (slice = 100ms).
 *   When the daemon goes away it prints "daemon gone; continuing alone" and exits 0, like a
 *   shim that falls back to running alone.
 *
 *   A watchdog (--timeout, default 20 s) ends a stuck run with exit status 2, so a test can
 *   never hang on it. --log FILE appends one line per event for the shell tests to inspect.
 *
 * Exit status: 0 done (slices served, or the daemon went away, or garbage refused as
 * expected); 1 usage or connection failure; 2 watchdog; 3 --die-at; 4 protocol check failed.
 */
#include "core/proto.h"
#include "core/timeline.h"
#include "ipc/conf.h"
#include "ipc/ipc.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define CH (2ull * 1024 * 1024)
#define MAXREG 32
#define MAXCH 512

struct reg {
    uint32_t rid;
    uint32_t nchunks;
    uint8_t res[MAXCH];
};

static struct {
    const char *name, *logpath, *die_ev, *hang_ev, *close_ev, *garbage;
    int die_n, hang_n, close_n;
    int32_t prio;
    uint32_t weight;
    uint64_t limit;
    int nregs, nchunks, ws_regs, slices, timeout_s, work_ms;
    bool flood, flood_config, partial;
} opt = {.name = "fake",
         .prio = MS_PRIO_BE,
         .nregs = 1,
         .nchunks = 4,
         .ws_regs = -1,
         .timeout_s = 20,
         .partial = true};

static struct ms_conn conn;
static struct reg regs[MAXREG];
static uint64_t resident, peak, budget;
static uint32_t task;
static int runs, stops, errors_seen, prepares;
static uint32_t run_epoch;
static bool running, hung;
static uint64_t t0, run_since, gpu_ns;
static int counts[MS_MSG_TYPE_END];
/* the POPULATE in progress */
static bool pop_active;
static uint32_t pop_epoch, pop_n, pop_done;
static struct ms_run *pop_runs;
static uint64_t pop_credit, pop_used;

static void logf_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void logf_(const char *fmt, ...)
{
    if (!opt.logpath)
        return;
    FILE *f = fopen(opt.logpath, "a");
    if (!f)
        return;
    fprintf(f, "%.3f %s[%d] ", (double)(ms_ipc_now_ns() - t0) / 1e9, opt.name, (int)getpid());
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fputc('\n', f);
    fclose(f);
}

static void finish(int code, const char *why)
{
    printf("fake_shim %s: %s (task %u, slices %d, resident %llu, peak %llu, prepares %d)\n",
           opt.name, why, task, runs, (unsigned long long)resident, (unsigned long long)peak,
           prepares);
    fflush(stdout);
    logf_("exit %d: %s", code, why);
    exit(code);
}

static void watchdog(int sig)
{
    (void)sig;
    static const char msg[] = "fake_shim: watchdog expired\n";
    ssize_t w = write(2, msg, sizeof(msg) - 1);
    (void)w;
    _exit(2);
}

static void send_msg(struct ms_msg *m);

/* GPU time used so far, the running slice included. */
static uint64_t used_ns(void)
{
    return gpu_ns + (running ? ms_ipc_now_ns() - run_since : 0);
}

static void say_bye_and_exit(const char *why)
{
    struct ms_msg bye;
    ms_msg_init(&bye, MS_MSG_BYE);
    send_msg(&bye);
    while (ms_conn_out_pending(&conn) && ms_conn_flush(&conn) == 1)
        ms_conn_wait(&conn, 100);
    finish(0, why);
}

/* The job is done when it has had its slices or its GPU time. */
static void check_done(void)
{
    if (hung)
        return;
    if (opt.work_ms > 0 && used_ns() >= (uint64_t)opt.work_ms * 1000000ull)
        say_bye_and_exit("done");
}

static void send_msg(struct ms_msg *m)
{
    int rc = ms_conn_send(&conn, m);
    if (rc == MS_E_IO)
        finish(0, "daemon gone; continuing alone");
    if (rc)
        finish(4, "cannot encode a message");
}

static struct reg *reg_of(uint32_t rid)
{
    for (int i = 0; i < opt.nregs; i++)
        if (regs[i].rid == rid)
            return &regs[i];
    return NULL;
}

static void check_run(const struct ms_run *r, const char *what)
{
    struct reg *g = reg_of(r->region);
    if (!g || (uint64_t)r->first + r->count > g->nchunks) {
        char why[128];
        snprintf(why, sizeof(why), "%s names chunks %u:%u+%u that do not exist", what, r->region,
                 r->first, r->count);
        finish(4, why);
    }
}

static void pop_progress(void)
{
    if (!pop_active)
        return;
    uint32_t done = pop_done;
    while (done < pop_n) {
        struct ms_run *r = &pop_runs[done];
        uint64_t need = (uint64_t)r->count * CH;
        if (pop_used + need > pop_credit)
            break;
        struct reg *g = reg_of(r->region);
        for (uint32_t c = r->first; c < r->first + r->count; c++) {
            if (!g->res[c]) {
                g->res[c] = 1;
                resident += CH;
            }
        }
        pop_used += need;
        done++;
        if (opt.partial)
            break;
    }
    if (resident > peak)
        peak = resident;
    if (budget && resident > budget)
        finish(4, "holds more than the budget");
    if (opt.limit && resident > opt.limit)
        finish(4, "holds more than its limit");
    if (done == pop_done)
        return;
    pop_done = done;
    struct ms_msg m;
    ms_msg_init(&m, MS_MSG_POPULATED);
    m.progress.epoch = pop_epoch;
    m.progress.runs_done = done;
    m.progress.bytes = pop_used;
    if (done == pop_n)
        pop_active = false;
    send_msg(&m);
    logf_("populated %u/%u runs, resident %llu", done, pop_n, (unsigned long long)resident);
    if (pop_active && opt.partial)
        pop_progress();
}

/* Misbehaviour triggers; returns true when the message must be ignored (hung). */
static bool trigger(const struct ms_msg *m)
{
    if (hung)
        return true;
    counts[m->type]++;
    const char *ev = ms_msg_type_name(m->type);
    if (opt.die_ev && strcasecmp(opt.die_ev, ev) == 0 && counts[m->type] == opt.die_n) {
        logf_("dying at %s #%d", ev, opt.die_n);
        printf("fake_shim %s: dying at %s #%d\n", opt.name, ev, opt.die_n);
        fflush(stdout);
        _exit(3);
    }
    if (opt.close_ev && strcasecmp(opt.close_ev, ev) == 0 && counts[m->type] == opt.close_n) {
        logf_("closing at %s #%d", ev, opt.close_n);
        printf("fake_shim %s: closing at %s #%d\n", opt.name, ev, opt.close_n);
        fflush(stdout);
        close(conn.fd);
        for (;;)
            pause(); /* holding its memory; the watchdog or a kill ends it */
    }
    if (opt.hang_ev && strcasecmp(opt.hang_ev, ev) == 0 && counts[m->type] == opt.hang_n) {
        logf_("hanging at %s #%d", ev, opt.hang_n);
        hung = true;
        return true;
    }
    return false;
}

static void handle(struct ms_msg *m)
{
    if (trigger(m))
        return; /* hung: a hung process answers nothing */
    logf_("got %s", ms_msg_type_name(m->type));
    switch (m->type) {
    case MS_MSG_RUN:
        if (running)
            finish(4, "RUN while running");
        running = true;
        run_epoch = m->run.epoch;
        run_since = ms_ipc_now_ns();
        runs++;
        break;
    case MS_MSG_PREPARE:
        /* A hint about this RUN's end: only while running, and never more than we hold. */
        if (!running || m->prepare.epoch != run_epoch || m->prepare.bytes > resident)
            finish(4, "PREPARE outside its RUN or beyond what is resident");
        prepares++;
        logf_("prepare %llu", (unsigned long long)m->prepare.bytes);
        break;
    case MS_MSG_STOP: {
        if (!running)
            finish(4, "STOP while not running");
        running = false;
        stops++;
        gpu_ns += ms_ipc_now_ns() - run_since;
        struct ms_msg r;
        ms_msg_init(&r, MS_MSG_STOPPED);
        r.stopped.epoch = m->stop.epoch;
        r.stopped.gpu_ns = gpu_ns;
        send_msg(&r);
        if (opt.slices > 0 && runs >= opt.slices)
            say_bye_and_exit("done");
        check_done();
        break;
    }
    case MS_MSG_EVICT: {
        uint64_t freed = 0;
        for (uint32_t k = 0; k < m->order.nruns; k++) {
            check_run(&m->order.runs[k], "EVICT");
            struct reg *g = reg_of(m->order.runs[k].region);
            for (uint32_t c = m->order.runs[k].first;
                 c < m->order.runs[k].first + m->order.runs[k].count; c++) {
                if (g->res[c]) {
                    g->res[c] = 0;
                    resident -= CH;
                    freed += CH;
                }
            }
            if (opt.partial || k + 1 == m->order.nruns) {
                struct ms_msg r;
                ms_msg_init(&r, MS_MSG_EVICTED);
                r.progress.epoch = m->order.epoch;
                r.progress.runs_done = k + 1;
                r.progress.bytes = freed;
                send_msg(&r);
            }
        }
        logf_("evicted %u runs, resident %llu", m->order.nruns, (unsigned long long)resident);
        break;
    }
    case MS_MSG_POPULATE:
        if (pop_active)
            finish(4, "POPULATE while another is in progress");
        for (uint32_t k = 0; k < m->order.nruns; k++)
            check_run(&m->order.runs[k], "POPULATE");
        free(pop_runs);
        pop_runs = malloc(m->order.nruns * sizeof(*pop_runs));
        if (!pop_runs)
            finish(1, "out of memory");
        memcpy(pop_runs, m->order.runs, m->order.nruns * sizeof(*pop_runs));
        pop_active = true;
        pop_epoch = m->order.epoch;
        pop_n = m->order.nruns;
        pop_done = 0;
        pop_credit = m->order.credit;
        pop_used = 0;
        pop_progress();
        break;
    case MS_MSG_CREDIT:
        if (!pop_active || m->credit.epoch != pop_epoch || m->credit.credit < pop_credit)
            finish(4, "CREDIT without a matching POPULATE, or shrinking");
        pop_credit = m->credit.credit;
        pop_progress();
        break;
    case MS_MSG_ERROR:
        printf("fake_shim %s: daemon says: %s\n", opt.name, m->error.text);
        fflush(stdout);
        logf_("error %d: %s", m->error.code, m->error.text);
        errors_seen++;
        if (opt.garbage)
            break; /* expected; the daemon closes next */
        finish(4, "unexpected ERROR");
        break;
    case MS_MSG_BYE: finish(0, "daemon said goodbye; continuing alone"); break;
    case MS_MSG_WELCOME: finish(4, "a second WELCOME"); break;
    default: finish(4, "unexpected message");
    }
}

/* Read until one message arrives (or the daemon goes). */
static void next_msg(struct ms_msg *m)
{
    for (;;) {
        int rc = ms_conn_next(&conn, m);
        if (rc == 1)
            return;
        if (rc < 0)
            finish(4, "the daemon sent a malformed frame");
        if (conn.eof && hung) {
            logf_("hung; the daemon closed the connection");
            for (;;)
                pause(); /* a hung process does not notice; the test kills it */
        }
        if (conn.eof) {
            if (opt.garbage)
                finish(errors_seen ? 0 : 4,
                       errors_seen ? "refused with ERROR and closed" : "closed without an ERROR");
            finish(0, "daemon gone; continuing alone");
        }
        if (ms_conn_out_pending(&conn) && ms_conn_flush(&conn) < 0)
            finish(0, "daemon gone; continuing alone");
        int wait_ms = 1000;
        if (running && opt.work_ms > 0) {
            uint64_t need = (uint64_t)opt.work_ms * 1000000ull, used = used_ns();
            wait_ms = used >= need ? 0 : (int)MS_MIN(1000ull, (need - used) / 1000000ull + 1);
        }
        if (ms_conn_wait(&conn, wait_ms) > 0 && ms_conn_fill(&conn) < 0)
            finish(0, "daemon gone; continuing alone");
        if (running)
            check_done();
    }
}

static void send_raw(const void *p, size_t n)
{
    if (ms_buf_append(&conn.out, p, n) != MS_OK)
        finish(1, "out of memory");
    while (ms_conn_flush(&conn) == 1)
        ms_conn_wait(&conn, 100);
}

static void flood(void)
{
    struct ms_msg m;
    for (long i = 0;; i++) {
        ms_msg_init(&m, opt.flood_config ? MS_MSG_CONFIG_SET : MS_MSG_STATUS_REQ);
        if (opt.flood_config) {
            snprintf(m.config.kv.key, sizeof(m.config.kv.key), "slice");
            snprintf(m.config.kv.value, sizeof(m.config.kv.value), "100ms");
        }
        m.seq = 0;
        uint8_t frame[128];
        struct ms_buf b = {.data = frame, .len = 0, .cap = sizeof(frame)};
        ms_msg_encode(&m, &b); /* fits: never grows */
        ssize_t n = write(conn.fd, frame, b.len);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
            /* Never read; but notice a close: a zero-byte peek says EOF. */
            char c;
            ssize_t r = recv(conn.fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
            if (r == 0)
                finish(0, "dropped by the daemon (flood)");
            continue;
        }
        if (n < 0)
            finish(0, "dropped by the daemon (flood)");
        (void)i;
    }
}

static void usage(void)
{
    fprintf(stderr,
            "usage: fake_shim [--socket PATH] [--name N] [--prio be|rt|N] [--weight N]\n"
            "                 [--limit SIZE] [--regions N] [--chunks N] [--ws-regions N]\n"
            "                 [--slices N] [--work MS] [--die-at EV[:N]] [--hang-at EV[:N]]\n"
            "                 [--close-at EV[:N]]\n"
            "                 [--garbage prehello|badframe|oversize|version|badregion] [--flood]\n"
            "                 [--flood-config]\n"
            "                 [--whole-replies] [--log FILE] [--timeout S]\n");
    exit(1);
}

static void parse_ev(const char *s, const char **ev, int *n)
{
    static char buf[2][32];
    static int k;
    char *b = buf[k++ & 1];
    snprintf(b, 32, "%s", s);
    char *colon = strchr(b, ':');
    *n = 1;
    if (colon) {
        *colon = '\0';
        *n = atoi(colon + 1);
    }
    *ev = b;
}

int main(int argc, char **argv)
{
    char sock[MS_IPC_PATH_MAX + 1] = "";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define ARG(name) (strcmp(a, name) == 0 && v && (i++, 1))
        if (ARG("--socket"))
            snprintf(sock, sizeof(sock), "%s", v);
        else if (ARG("--name"))
            opt.name = v;
        else if (ARG("--prio"))
            opt.prio = strcmp(v, "rt") == 0 ? MS_PRIO_RT : strcmp(v, "be") == 0 ? 0 : atoi(v);
        else if (ARG("--weight"))
            opt.weight = (uint32_t)atoi(v);
        else if (ARG("--limit")) {
            if (ms_parse_size(v, &opt.limit) != MS_OK)
                usage();
        } else if (ARG("--regions"))
            opt.nregs = atoi(v);
        else if (ARG("--chunks"))
            opt.nchunks = atoi(v);
        else if (ARG("--ws-regions"))
            opt.ws_regs = atoi(v);
        else if (ARG("--slices"))
            opt.slices = atoi(v);
        else if (ARG("--work"))
            opt.work_ms = atoi(v);
        else if (ARG("--die-at"))
            parse_ev(v, &opt.die_ev, &opt.die_n);
        else if (ARG("--hang-at"))
            parse_ev(v, &opt.hang_ev, &opt.hang_n);
        else if (ARG("--close-at"))
            parse_ev(v, &opt.close_ev, &opt.close_n);
        else if (ARG("--garbage"))
            opt.garbage = v;
        else if (ARG("--log"))
            opt.logpath = v;
        else if (ARG("--timeout"))
            opt.timeout_s = atoi(v);
        else if (strcmp(a, "--flood") == 0)
            opt.flood = true;
        else if (strcmp(a, "--flood-config") == 0)
            opt.flood = opt.flood_config = true;
        else if (strcmp(a, "--whole-replies") == 0)
            opt.partial = false;
        else
            usage();
#undef ARG
    }
    if (opt.nregs < 1 || opt.nregs > MAXREG || opt.nchunks < 1 || opt.nchunks > MAXCH)
        usage();
    if (opt.ws_regs < 0 || opt.ws_regs > opt.nregs)
        opt.ws_regs = opt.nregs;
    signal(SIGALRM, watchdog);
    signal(SIGPIPE, SIG_IGN);
    alarm((unsigned)opt.timeout_s);
    t0 = ms_ipc_now_ns();
    if (!sock[0] && ms_ipc_socket_path(0, sock, sizeof(sock)) != MS_OK)
        finish(1, "socket path too long");

    int fd = -1, rc;
    for (int tries = 0;; tries++) {
        rc = ms_ipc_connect(sock, 2000, &fd);
        if (rc != MS_E_NOTFOUND || tries >= 40)
            break;
        struct timespec ts = {0, 50000000};
        nanosleep(&ts, NULL); /* the daemon may still be starting */
    }
    if (rc) {
        fprintf(stderr, "fake_shim %s: cannot connect to %s: %s\n", opt.name, sock,
                ms_strerror(rc));
        return 1;
    }
    ms_conn_init(&conn, fd, 0);
    logf_("connected");

    if (opt.flood)
        flood();
    if (opt.garbage && strcmp(opt.garbage, "prehello") == 0) {
        uint8_t junk[256];
        uint64_t x = (uint64_t)getpid() * 0x9e3779b97f4a7c15ull;
        for (size_t i = 0; i < sizeof(junk); i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            junk[i] = (uint8_t)x;
        }
        junk[0] = 'G'; /* never "MSCH" */
        send_raw(junk, sizeof(junk));
        struct ms_msg m;
        for (;;) {
            next_msg(&m);
            handle(&m);
            ms_msg_free(&m);
        }
    }

    struct ms_msg m;
    ms_msg_init(&m, MS_MSG_HELLO);
    m.hello.version = MS_PROTO_VERSION;
    m.hello.pid = (uint32_t)getpid();
    m.hello.prio = opt.prio;
    m.hello.weight = opt.weight;
    m.hello.mem_limit = opt.limit;
    snprintf(m.hello.name, sizeof(m.hello.name), "%s", opt.name);
    send_msg(&m);
    next_msg(&m);
    if (m.type != MS_MSG_WELCOME) {
        if (m.type == MS_MSG_ERROR)
            printf("fake_shim %s: daemon says: %s\n", opt.name, m.error.text);
        finish(4, "no WELCOME");
    }
    task = m.welcome.task;
    budget = m.welcome.budget;
    ms_msg_free(&m);
    logf_("welcome task %u budget %llu", task, (unsigned long long)budget);

    if (opt.garbage) {
        if (strcmp(opt.garbage, "badframe") == 0) {
            /* An IDLE whose length says 4 bytes, followed by 4 bytes: non-empty IDLE. */
            uint8_t f[20] = {'M', 'S', 'C', 'H', MS_PROTO_VERSION, 0, MS_MSG_IDLE, 0, 4, 0, 0, 0,
                             9,   0,   0,   0};
            send_raw(f, sizeof(f));
        } else if (strcmp(opt.garbage, "oversize") == 0) {
            uint8_t f[16] = {'M', 'S', 'C',  'H', MS_PROTO_VERSION, 0, MS_MSG_DEMAND, 0,
                             0,   0,   0x20, 0};
            send_raw(f, sizeof(f));
        } else if (strcmp(opt.garbage, "version") == 0) {
            uint8_t f[16] = {'M', 'S', 'C', 'H', MS_PROTO_VERSION + 1, 0, MS_MSG_IDLE, 0};
            send_raw(f, sizeof(f));
        } else if (strcmp(opt.garbage, "badregion") == 0) {
            struct ms_run r = {.region = 999, .first = 0, .count = 1};
            ms_msg_init(&m, MS_MSG_DEMAND);
            m.demand.next = &r;
            m.demand.nnext = 1;
            send_msg(&m);
        } else {
            usage();
        }
        for (;;) {
            next_msg(&m);
            handle(&m);
            ms_msg_free(&m);
        }
    }

    for (int i = 0; i < opt.nregs; i++) {
        regs[i].rid = (uint32_t)(i + 1) * 7;
        regs[i].nchunks = (uint32_t)opt.nchunks;
        ms_msg_init(&m, MS_MSG_REGION);
        m.region.op = MS_REGION_ADD;
        m.region.kind = 0;
        m.region.region = regs[i].rid;
        m.region.base = 0x100000000ull * (uint64_t)(i + 1);
        m.region.size = (uint64_t)opt.nchunks * CH;
        m.region.chunk_bytes = CH;
        send_msg(&m);
    }
    struct ms_run runs_ws[MAXREG];
    for (int i = 0; i < opt.ws_regs; i++)
        runs_ws[i] =
            (struct ms_run){.region = regs[i].rid, .first = 0, .count = (uint32_t)opt.nchunks};
    ms_msg_init(&m, MS_MSG_DEMAND);
    m.demand.next = runs_ws;
    m.demand.nnext = (uint32_t)opt.ws_regs;
    m.demand.recent = runs_ws;
    m.demand.nrecent = (uint32_t)opt.ws_regs;
    send_msg(&m);
    logf_("demanded %d regions of %d chunks", opt.ws_regs, opt.nchunks);

    for (;;) {
        next_msg(&m);
        handle(&m);
        ms_msg_free(&m);
    }
}
