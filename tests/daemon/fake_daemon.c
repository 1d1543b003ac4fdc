/*
 * fake_daemon.c - a stand-in for mschedd in the shim's tests: it serves one libmsched client
 * with everything it asks for, and can lose its DEMANDs on request. No GPU, no scheduling.
 *
 * Design
 *   One connection on the socket path given. HELLO gets WELCOME (task 1, the --budget given, a
 *   one-hour slice). A DEMAND gets a POPULATE of exactly the runs it names as its next working
 *   set, with a credit that covers any size; once that POPULATE is complete the client gets
 *   RUN if it was not running yet. Nothing is ever evicted and STOP is never sent, so the
 *   client runs from its first RUN to its BYE. REGION, IDLE and POPULATED progress are
 *   accounted for; anything else is ignored.
 *
 *   The fake remembers which chunks it populated (region id, chunk index). With --lose N, the
 *   first N DEMANDs that arrive while the client runs and name a chunk not populated yet are
 *   dropped: nothing answers them, the way a daemon that lost a demand would behave. Losses
 *   begin only after one DEMAND has been answered while running: a DEMAND that crossed the RUN
 *   on the wire was sent by a client that did not know it ran (and sends a fresh one on RUN),
 *   while one sent after that answer arrived (it came after the RUN, the socket keeps order)
 *   was sent by a client that knew. Nor is a DEMAND lost while a POPULATE is outstanding: its
 *   end clears the client's pending DEMAND, and the client would send the same DEMAND afresh
 *   (a resend, not a repeat after a silence). So every lost DEMAND is one the client must
 *   repeat. A shim that never asks twice then waits forever; one that repeats an unanswered
 *   DEMAND gets its POPULATE the second time.
 *
 *   When the client says BYE or closes, one line goes to stdout:
 *       fake_daemon: demands=D lost=L populates=P runs=R
 *   and the fake exits 0. A watchdog (--timeout, default 30 s) ends a stuck run with exit
 *   status 2 after printing the same line, so a test never hangs on it.
 *
 *   With --squat it plays a hostile listener instead (tests/cli/daemon_trust.sh): it serves
 *   any number of connections one after the other, answers HELLO with WELCOME and every other
 *   request with ERROR (which a client waiting for its RUN takes as a live daemon), never
 *   sends RUN, and prints one line per connection and per HELLO (with the pid and name the
 *   client gave away):
 *       fake_daemon: connection
 *       fake_daemon: HELLO from pid P name N
 *   until its watchdog (--timeout) ends it with status 0.
 *
 * Exit status: 0 served until the client left; 1 usage, socket or protocol failure; 2 watchdog.
 */
#include "core/proto.h"
#include "ipc/ipc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* The chunks populated so far: (region << 32 | chunk), unsorted, no duplicates needed. */
struct popset {
    uint64_t *v;
    size_t n, cap;
};

static struct {
    unsigned demands, lost, populates, runs;
} stats;

static void summary(void)
{
    printf("fake_daemon: demands=%u lost=%u populates=%u runs=%u\n", stats.demands, stats.lost,
           stats.populates, stats.runs);
    fflush(stdout);
}

static bool pop_has(const struct popset *s, uint64_t key)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->v[i] == key)
            return true;
    return false;
}

static int pop_add(struct popset *s, uint64_t key)
{
    if (pop_has(s, key))
        return 0;
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 256;
        uint64_t *v = realloc(s->v, cap * sizeof(*v));
        if (!v)
            return -1;
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = key;
    return 0;
}

static uint64_t key_of(uint32_t region, uint32_t chunk)
{
    return (uint64_t)region << 32 | chunk;
}

/* Whether the runs name a chunk not populated yet. */
static bool names_new(const struct popset *s, const struct ms_run *r, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t c = r[i].first; c < r[i].first + r[i].count; c++)
            if (!pop_has(s, key_of(r[i].region, c)))
                return true;
    return false;
}

static int send_msg(struct ms_conn *c, struct ms_msg *m)
{
    int rc = ms_conn_send(c, m);
    if (rc != MS_OK) {
        fprintf(stderr, "fake_daemon: send: %s\n", ms_strerror(rc));
        return -1;
    }
    return 0;
}

#define HOUR_NS (3600ull * 1000000000ull)

/* RUN for an hour (STOP never comes); true when it went out. */
static bool send_run(struct ms_conn *c, uint32_t epoch)
{
    struct ms_msg r;
    ms_msg_init(&r, MS_MSG_RUN);
    r.run.epoch = epoch;
    r.run.slice_ns = HOUR_NS;
    if (send_msg(c, &r))
        return false;
    stats.runs++;
    return true;
}

/* --squat: one connection after the other until the deadline (above). */
static int squat(int lfd, uint64_t deadline)
{
    while (ms_ipc_now_ns() < deadline) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                perror("fake_daemon: accept");
                return 1;
            }
            usleep(10000);
            continue;
        }
        printf("fake_daemon: connection\n");
        fflush(stdout);
        struct ms_conn c;
        ms_conn_init(&c, fd, 0);
        while (ms_ipc_now_ns() < deadline && !c.eof) {
            if (ms_conn_flush(&c) < 0 || ms_conn_wait(&c, 100) < 0 || ms_conn_fill(&c) < 0)
                break;
            struct ms_msg m, r;
            int got;
            while ((got = ms_conn_next(&c, &m)) == 1) {
                if (m.type == MS_MSG_HELLO) {
                    printf("fake_daemon: HELLO from pid %u name %s\n", m.hello.pid, m.hello.name);
                    fflush(stdout);
                    ms_msg_init(&r, MS_MSG_WELCOME);
                    r.welcome.version = MS_PROTO_VERSION;
                    r.welcome.task = 1;
                    r.welcome.budget = 1ull << 30;
                    r.welcome.slice_ns = HOUR_NS;
                } else {
                    ms_msg_init(&r, MS_MSG_ERROR);
                    r.error.code = MS_E_BUSY;
                    snprintf(r.error.text, sizeof(r.error.text), "busy");
                }
                r.seq = m.seq;
                ms_msg_free(&m);
                if (send_msg(&c, &r))
                    break;
            }
            if (got < 0)
                break;
        }
        ms_conn_fini(&c);
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *path = NULL;
    unsigned lose = 0, timeout_s = 30;
    uint64_t budget = 1ull << 30;
    bool squatter = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--lose") == 0 && i + 1 < argc)
            lose = (unsigned)strtoul(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--timeout") == 0 && i + 1 < argc)
            timeout_s = (unsigned)strtoul(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--budget-mib") == 0 && i + 1 < argc)
            budget = strtoull(argv[++i], NULL, 10) << 20;
        else if (strcmp(argv[i], "--squat") == 0)
            squatter = true;
        else if (argv[i][0] != '-' && !path)
            path = argv[i];
        else {
            fprintf(stderr, "usage: fake_daemon SOCKET [--lose N] [--budget-mib M] "
                            "[--timeout S] [--squat]\n");
            return 1;
        }
    }
    if (!path || budget == 0) {
        fprintf(stderr, "usage: fake_daemon SOCKET [--lose N] [--budget-mib M] [--timeout S]\n");
        return 1;
    }
    int lfd;
    int rc = ms_ipc_listen(path, &lfd);
    if (rc != MS_OK) {
        fprintf(stderr, "fake_daemon: cannot listen on %s: %s\n", path, ms_strerror(rc));
        return 1;
    }
    uint64_t deadline = ms_ipc_now_ns() + (uint64_t)timeout_s * 1000000000ull;
    if (squatter)
        return squat(lfd, deadline);
    int fd = -1;
    while (fd < 0) {
        fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0)
            break;
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            perror("fake_daemon: accept");
            return 1;
        }
        if (ms_ipc_now_ns() > deadline) {
            summary();
            return 2;
        }
        usleep(10000);
    }
    close(lfd);

    struct ms_conn c;
    ms_conn_init(&c, fd, 0);
    struct popset done = {0};
    bool running = false, run_after_pop = false, pop_active = false;
    bool armed = false; /* a DEMAND got its POPULATE while running: losses may begin */
    uint32_t epoch = 0, pop_epoch = 0, pop_nruns = 0;
    struct ms_run *pop_runs = NULL;
    int status = 0;
    for (;;) {
        if (ms_ipc_now_ns() > deadline) {
            status = 2;
            break;
        }
        if (ms_conn_flush(&c) < 0 || ms_conn_wait(&c, 100) < 0 || ms_conn_fill(&c) < 0) {
            status = c.eof ? 0 : 1;
            break;
        }
        struct ms_msg m;
        int got;
        bool bye = false;
        while ((got = ms_conn_next(&c, &m)) == 1) {
            struct ms_msg r;
            switch (m.type) {
            case MS_MSG_HELLO:
                ms_msg_init(&r, MS_MSG_WELCOME);
                r.welcome.version = MS_PROTO_VERSION;
                r.welcome.task = 1;
                r.welcome.budget = budget;
                r.welcome.slice_ns = HOUR_NS;
                r.seq = m.seq;
                if (send_msg(&c, &r))
                    status = 1;
                break;
            case MS_MSG_DEMAND:
                stats.demands++;
                if (running && armed && !pop_active && stats.lost < lose &&
                    names_new(&done, m.demand.next, m.demand.nnext)) {
                    stats.lost++; /* nothing answers it */
                    break;
                }
                if (m.demand.nnext == 0) {
                    if (!running && !pop_active)
                        running = send_run(&c, ++epoch);
                    break;
                }
                /* A POPULATE of the runs named (a new one replaces one in progress). */
                free(pop_runs);
                pop_runs = malloc(m.demand.nnext * sizeof(*pop_runs));
                if (!pop_runs) {
                    status = 1;
                    break;
                }
                memcpy(pop_runs, m.demand.next, m.demand.nnext * sizeof(*pop_runs));
                pop_nruns = m.demand.nnext;
                ms_msg_init(&r, MS_MSG_POPULATE);
                r.order.epoch = pop_epoch = ++epoch;
                r.order.credit = 1ull << 62;
                r.order.runs = pop_runs;
                r.order.nruns = pop_nruns;
                if (send_msg(&c, &r)) {
                    status = 1;
                    break;
                }
                stats.populates++;
                armed = armed || running;
                pop_active = true;
                run_after_pop = !running;
                break;
            case MS_MSG_POPULATED:
                if (!pop_active || m.progress.epoch != pop_epoch ||
                    m.progress.runs_done < pop_nruns)
                    break;
                pop_active = false;
                for (uint32_t i = 0; i < pop_nruns; i++)
                    for (uint32_t k = 0; k < pop_runs[i].count; k++)
                        if (pop_add(&done, key_of(pop_runs[i].region, pop_runs[i].first + k)))
                            status = 1;
                if (run_after_pop) {
                    run_after_pop = false;
                    running = send_run(&c, ++epoch);
                }
                break;
            case MS_MSG_BYE: bye = true; break;
            default: break; /* REGION, IDLE, STOPPED, ... */
            }
            ms_msg_free(&m);
            if (status)
                break;
        }
        if (got < 0) {
            fprintf(stderr, "fake_daemon: bad frame: %s\n", ms_strerror(got));
            status = 1;
        }
        if (status || bye || c.eof)
            break;
    }
    summary();
    ms_conn_fini(&c);
    free(pop_runs);
    free(done.v);
    unlink(path);
    return status;
}
