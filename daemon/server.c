/*
 * server.c - mschedd's event loop: sockets, sessions, signals, pidfds, and the scheduler's
 * actions (design: daemon.h; behaviour: docs/daemon.md).
 *
 * Design notes
 *   Each loop iteration waits in epoll_wait for at most the time to the scheduler's next
 *   deadline (and never more than a second), handles the ready descriptors, ticks the scheduler
 *   if its deadline passed, then carries out every action the scheduler queued (sends, drops).
 *   Messages from one session are handled in arrival order; the scheduler's actions in the order
 *   it queued them, so every shim sees its messages in the order the scheduler decided them.
 *
 *   A session freed while later events of the same epoll batch still point at it would be a
 *   use-after-free, so closing only marks a session dead and moves it to a graveyard that is
 *   emptied at the end of the iteration.
 *
 *   Hostile clients: a malformed frame gets an ERROR and the session is closed (a task session
 *   through the scheduler, which keeps its memory charged as a ghost until the process exits);
 *   a client whose queued output exceeds session_out_max is dropped the same way; a closing
 *   session that does not read its last messages is closed after a grace second. The input
 *   side never buffers more than one maximal frame (ipc/conn.c). A task session that closes
 *   while its process still runs (its pidfd not readable) becomes a ghost too: the process
 *   still holds its memory. That is also how every process ends whose shim closes its session
 *   from its library destructor, so it is logged at info level; only a ghost whose process
 *   still runs GHOST_WARN_NS later gets a warning.
 */
#include "daemon/daemon.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/file.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define CLOSE_GRACE_NS 1000000000ull
#define CONTROL_IDLE_NS (120 * 1000000000ull) /* a control client silent this long is closed */
#define MSGS_PER_PASS 64                      /* one session's messages per loop pass */
#define GHOST_WARN_NS (2 * 1000000000ull)     /* a closed task's process still runs after this */

static struct ms_session *graveyard;

uint64_t ms_daemon_now_ns(void)
{
    return ms_ipc_now_ns();
}

static int pidfd_open_compat(pid_t pid)
{
#ifdef SYS_pidfd_open
    return (int)syscall(SYS_pidfd_open, pid, 0);
#else
    (void)pid;
    errno = ENOSYS;
    return -1;
#endif
}

int ms_daemon_ep_set(struct ms_daemon *d, int op, int fd, struct ms_ev *ev, uint32_t events)
{
    struct epoll_event e;
    memset(&e, 0, sizeof(e));
    e.events = events;
    e.data.ptr = ev;
    return epoll_ctl(d->epfd, op, fd, &e);
}

void ms_daemon_ep_del(struct ms_daemon *d, int fd)
{
    epoll_ctl(d->epfd, EPOLL_CTL_DEL, fd, NULL);
}

static const char *peer(const struct ms_session *s, char *buf, size_t len)
{
    if (s->task != MS_TASK_NONE)
        snprintf(buf, len, "session %llu (pid %d, task %u)", (unsigned long long)s->id, (int)s->pid,
                 s->task);
    else
        snprintf(buf, len, "session %llu (pid %d)", (unsigned long long)s->id, (int)s->pid);
    return buf;
}

/* ---- sessions ------------------------------------------------------------------------------- */

static void update_out(struct ms_daemon *d, struct ms_session *s)
{
    bool pending = ms_conn_out_pending(&s->conn);
    if (pending == s->want_out || s->conn.fd < 0)
        return;
    uint32_t events = (s->closing ? 0 : EPOLLIN) | (pending ? EPOLLOUT : 0);
    if (ms_daemon_ep_set(d, EPOLL_CTL_MOD, s->conn.fd, &s->ev, events) == 0)
        s->want_out = pending;
}

static void task_dropped(struct ms_daemon *d, struct ms_session *s, uint32_t task);

/* The process behind a pidfd has not exited (its pidfd is not readable yet). */
static bool still_running(int pidfd)
{
    struct pollfd p = {.fd = pidfd, .events = POLLIN};
    return poll(&p, 1, 0) == 0;
}

/*
 * Close now. died: the peer's task is gone with it (its memory is released at once), unless
 * its process still runs (a shim that gave up on a silent daemon, a client that closed its
 * socket): then it still holds what it mapped, so the task is dropped as a ghost, charged until
 * the process exits.
 */
void ms_daemon_session_close(struct ms_daemon *d, struct ms_session *s, bool died)
{
    if (s->ev.kind != MS_EV_SESSION)
        return; /* already dead */
    char who[96];
    ms_log_debug("%s closed", peer(s, who, sizeof(who)));
    if (s->task != MS_TASK_NONE && died) {
        uint32_t task = s->task;
        if (s->pidfd >= 0 && still_running(s->pidfd) &&
            ms_sched_task_drop(&d->sched, ms_daemon_now_ns(), task, MS_E_IO,
                               "closed its connection while its process runs") == MS_OK) {
            ms_log_info("task %u (pid %d) closed its connection but still runs", task, (int)s->pid);
            task_dropped(d, s, task); /* takes s->pidfd over */
            /* A process on its way out (its shim closes the session from its destructor, before
             * the kernel has taken its memory) exits within moments; one that does not is
             * worth a warning (ghost_check). */
            for (struct ms_ghost *g = d->ghosts; g; g = g->next)
                if (g->task == task && !g->warn_at)
                    g->warn_at = ms_daemon_now_ns() + GHOST_WARN_NS;
        } else {
            ms_log_info("task %u (pid %d) is gone; its memory is released", task, (int)s->pid);
            ms_sched_task_gone(&d->sched, ms_daemon_now_ns(), task);
        }
    }
    s->task = MS_TASK_NONE;
    if (s->conn.fd >= 0)
        ms_daemon_ep_del(d, s->conn.fd);
    if (s->pidfd >= 0) {
        ms_daemon_ep_del(d, s->pidfd);
        close(s->pidfd);
        s->pidfd = -1;
    }
    d->st.bytes_in += s->conn.bytes_in;
    d->st.bytes_out += s->conn.bytes_out;
    ms_conn_fini(&s->conn);
    if (s->prev)
        s->prev->next = s->next;
    else
        d->sessions = s->next;
    if (s->next)
        s->next->prev = s->prev;
    d->nsessions--;
    s->ev.kind = 0; /* dead: later events of this batch are ignored */
    s->next = graveyard;
    graveyard = s;
}

/* Close once the queued output is written (or after a grace period). */
static void session_finish(struct ms_daemon *d, struct ms_session *s)
{
    if (s->ev.kind != MS_EV_SESSION)
        return;
    s->closing = true;
    if (!ms_conn_out_pending(&s->conn)) {
        ms_daemon_session_close(d, s, false);
        return;
    }
    s->close_by = ms_daemon_now_ns() + CLOSE_GRACE_NS;
    /* Stop reading; write what is queued (hang-ups are reported regardless). */
    if (ms_daemon_ep_set(d, EPOLL_CTL_MOD, s->conn.fd, &s->ev, EPOLLOUT) == 0)
        s->want_out = true;
}

struct ms_session *ms_daemon_session_of_task(struct ms_daemon *d, uint32_t task)
{
    for (struct ms_session *s = d->sessions; s; s = s->next)
        if (s->task == task)
            return s;
    return NULL;
}

/* Queue m on s. Returns 0, MS_E_NOSPACE (the client does not read), or another error. */
static int session_send(struct ms_daemon *d, struct ms_session *s, struct ms_msg *m)
{
    if (s->ev.kind != MS_EV_SESSION || s->conn.fd < 0)
        return MS_OK;
    int rc = ms_conn_send(&s->conn, m);
    if (rc == MS_OK) {
        d->st.msgs_out++;
        if (ms_log_enabled(MS_LOG_DEBUG)) {
            char who[96];
            ms_log_debug("-> %s: %s", peer(s, who, sizeof(who)), ms_msg_type_name(m->type));
        }
    }
    update_out(d, s);
    return rc;
}

/* Queue a reply; a client that does not read its replies is dropped like any slow client. */
void ms_daemon_reply(struct ms_daemon *d, struct ms_session *s, struct ms_msg *m)
{
    if (session_send(d, s, m) != MS_E_NOSPACE)
        return;
    char who[96];
    d->st.slow_dropped++;
    ms_log_warn("%s does not read its replies; dropping it", peer(s, who, sizeof(who)));
    ms_daemon_session_close(d, s, true);
}

void ms_daemon_reply_error(struct ms_daemon *d, struct ms_session *s, uint32_t seq, int code,
                           const char *text)
{
    struct ms_msg m;
    ms_msg_init(&m, MS_MSG_ERROR);
    m.seq = seq;
    m.error.code = code < 0 ? code : MS_E_INVAL;
    snprintf(m.error.text, sizeof(m.error.text), "%s", text);
    ms_daemon_reply(d, s, &m);
}

/* The peer broke the protocol: ERROR, then close (a task through the scheduler). */
static void protocol_error(struct ms_daemon *d, struct ms_session *s, int code, const char *why)
{
    char who[96];
    d->st.protocol_errors++;
    ms_log_warn("%s: %s (%s); closing it", peer(s, who, sizeof(who)), why, ms_strerror(code));
    if (s->task != MS_TASK_NONE &&
        ms_sched_task_drop(&d->sched, ms_daemon_now_ns(), s->task, code, why) == MS_OK) {
        s->closing = true; /* read nothing more; the DROP action closes it */
        return;
    }
    ms_daemon_reply_error(d, s, 0, code, why);
    session_finish(d, s);
}

/* ---- messages ------------------------------------------------------------------------------- */

/* Tasks with a session. Dropped tasks (ghosts) do not count: their process may live on for
 * long after its session closed, and must not keep new programs out. */
static size_t live_tasks(const struct ms_daemon *d)
{
    size_t n = 0;
    for (const struct ms_session *s = d->sessions; s; s = s->next)
        n += s->task != MS_TASK_NONE;
    return n;
}

/* A non-admin's HELLO within the user limits; else why into text. */
static bool hello_allowed(const struct ms_daemon *d, const struct ms_session *s,
                          const struct ms_msg_hello *h, char *text, size_t len)
{
    if (s->admin)
        return true;
    char who[96];
    ms_daemon_admins(d, who, sizeof(who));
    if (h->prio > (int32_t)d->conf.max_user_priority) {
        snprintf(text, len,
                 "priority %d is above max_user_priority %u; only an admin (%s) may ask for it",
                 h->prio, d->conf.max_user_priority, who);
        return false;
    }
    if (h->weight > d->conf.max_user_weight) {
        snprintf(text, len,
                 "weight %u is above max_user_weight %u; only an admin (%s) may ask for it",
                 h->weight, d->conf.max_user_weight, who);
        return false;
    }
    return true;
}

static void do_hello(struct ms_daemon *d, struct ms_session *s, const struct ms_msg *m)
{
    uint32_t task;
    char text[300];
    if (!hello_allowed(d, s, &m->hello, text, sizeof(text))) {
        ms_log_warn("session %llu (pid %d, uid %u): %s", (unsigned long long)s->id, (int)s->pid,
                    (unsigned)s->uid, text);
        ms_daemon_reply_error(d, s, m->seq, MS_E_STATE, text);
        session_finish(d, s);
        return;
    }
    int rc =
        live_tasks(d) >= d->conf.max_tasks
            ? MS_E_NOSPACE
            : ms_sched_hello(&d->sched, ms_daemon_now_ns(), &m->hello, (uint32_t)s->pid, &task);
    if (rc) {
        if (rc == MS_E_NOSPACE)
            snprintf(text, sizeof(text), "too many tasks (max_tasks = %u)", d->conf.max_tasks);
        else
            snprintf(text, sizeof(text), "cannot register: %s", ms_strerror(rc));
        ms_log_warn("session %llu (pid %d): %s", (unsigned long long)s->id, (int)s->pid, text);
        ms_daemon_reply_error(d, s, m->seq, rc, text);
        session_finish(d, s);
        return;
    }
    s->task = task;
    ms_log_info("task %u: pid %d '%s' priority %d weight %u limit %llu", task, (int)s->pid,
                m->hello.name, m->hello.prio, m->hello.weight,
                (unsigned long long)m->hello.mem_limit);
    if (s->pid > 0) {
        s->pidfd = pidfd_open_compat(s->pid);
        if (s->pidfd >= 0 &&
            ms_daemon_ep_set(d, EPOLL_CTL_ADD, s->pidfd, &s->pidev, EPOLLIN) != 0) {
            close(s->pidfd);
            s->pidfd = -1;
        }
        if (s->pidfd < 0)
            ms_log_debug("task %u: no pidfd (%s); relying on the socket", task, strerror(errno));
    }
}

static void handle(struct ms_daemon *d, struct ms_session *s, const struct ms_msg *m)
{
    d->st.msgs_in++;
    if (ms_log_enabled(MS_LOG_DEBUG)) {
        char who[96];
        ms_log_debug("<- %s: %s", peer(s, who, sizeof(who)), ms_msg_type_name(m->type));
    }
    switch (m->type) {
    case MS_MSG_HELLO:
        if (s->task != MS_TASK_NONE)
            protocol_error(d, s, MS_E_STATE, "HELLO twice");
        else
            do_hello(d, s, m);
        return;
    case MS_MSG_STATUS_REQ: ms_daemon_do_status(d, s, m); return;
    case MS_MSG_METRICS_REQ: ms_daemon_do_metrics(d, s, m); return;
    case MS_MSG_CONFIG_GET: ms_daemon_do_config_get(d, s, m); return;
    case MS_MSG_CONFIG_SET: ms_daemon_do_config_set(d, s, m); return;
    case MS_MSG_BYE:
        if (s->task == MS_TASK_NONE) {
            session_finish(d, s);
            return;
        }
        break;
    default: break;
    }
    if (s->task == MS_TASK_NONE) {
        char why[96];
        snprintf(why, sizeof(why), "%s before HELLO", ms_msg_type_name(m->type));
        protocol_error(d, s, MS_E_PARSE, why);
        return;
    }
    /* The session's task is live (daemon.h), so any error is the peer's violation. */
    int rc = ms_sched_message(&d->sched, ms_daemon_now_ns(), s->task, m);
    if (rc) {
        d->st.protocol_errors++;
        s->closing = true; /* the scheduler queued ERROR and DROP */
    }
}

static void on_session_in(struct ms_daemon *d, struct ms_session *s)
{
    s->more = false;
    int rc = ms_conn_fill(&s->conn);
    if (rc < 0) {
        ms_daemon_session_close(d, s, true);
        return;
    }
    if (s->closing) {
        s->conn.in.len = 0; /* a closing session's input is ignored */
        if (s->conn.eof)
            ms_daemon_session_close(d, s, s->task != MS_TASK_NONE);
        return;
    }
    for (int handled = 0;; handled++) {
        if (handled == MSGS_PER_PASS) {
            s->more = true; /* the rest next pass: the other clients go first */
            return;
        }
        struct ms_msg m;
        rc = ms_conn_next(&s->conn, &m);
        if (rc == 0)
            break;
        if (rc == 1) {
            s->spoke = true;
            s->last_in = ms_daemon_now_ns();
        }
        if (rc < 0) {
            protocol_error(d, s, rc,
                           rc == MS_E_VERSION ? "speaks another protocol version (this daemon: 1)"
                                              : "sent a malformed frame");
            return;
        }
        handle(d, s, &m);
        ms_msg_free(&m);
        if (s->ev.kind != MS_EV_SESSION || s->closing)
            return;
    }
    if (s->conn.eof) {
        if (s->conn.in.len > 0)
            ms_log_debug("session %llu closed mid-frame", (unsigned long long)s->id);
        ms_daemon_session_close(d, s, true);
    }
}

static void on_session_out(struct ms_daemon *d, struct ms_session *s)
{
    int rc = ms_conn_flush(&s->conn);
    if (rc < 0) {
        ms_daemon_session_close(d, s, true);
        return;
    }
    if (rc == 0 && s->closing && s->task == MS_TASK_NONE) {
        ms_daemon_session_close(d, s, false);
        return;
    }
    update_out(d, s);
}

/*
 * SIGHUP: the configuration file and the command line again (d->reload). Options that may
 * change at run time take their new values at once, as CONFIG_SET would set them; the others
 * keep theirs, with a warning naming each that differs (a restart applies it). A file that
 * does not parse changes nothing.
 */
static void reload_config(struct ms_daemon *d)
{
    if (!d->reload)
        return;
    ms_sd_notify_reloading();
    struct ms_conf c;
    char why[400];
    if (d->reload(&c, why, sizeof(why)) != MS_OK) {
        ms_log_warn("SIGHUP: configuration not reloaded, the running one stays: %s", why);
        ms_sd_notify("READY=1\nSTATUS=configuration not reloaded (see the log)");
        return;
    }
    size_t n, changed = 0, fixed = 0;
    const struct ms_conf_opt *o = ms_conf_opts(&n);
    for (size_t i = 0; i < n; i++) {
        char now[MS_PROTO_VALUE_MAX + 1], want[MS_PROTO_VALUE_MAX + 1];
        if (ms_conf_get(&d->conf, o[i].name, now, sizeof(now)) != MS_OK ||
            ms_conf_get(&c, o[i].name, want, sizeof(want)) != MS_OK || strcmp(now, want) == 0)
            continue;
        if (!o[i].runtime) {
            /* "" for socket and log_file: the default the daemon resolved at start */
            if (o[i].type == MS_CT_STRING && !want[0] &&
                (strcmp(o[i].name, "socket") == 0 || strcmp(o[i].name, "log_file") == 0))
                continue;
            ms_log_warn("SIGHUP: %s = %s takes effect at a restart (keeping %s)", o[i].name, want,
                        now);
            fixed++;
            continue;
        }
        if (ms_conf_set(&d->conf, o[i].name, want, true, why, sizeof(why)) != MS_OK) {
            ms_log_warn("SIGHUP: %s", why);
            continue;
        }
        ms_daemon_apply_option(d, o[i].name);
        ms_log_info("configuration: %s = %s (reloaded)", o[i].name, want);
        changed++;
    }
    ms_log_info("SIGHUP: configuration reloaded: %zu option(s) changed, %zu wait for a restart",
                changed, fixed);
    ms_sd_notify("READY=1\nSTATUS=configuration reloaded");
}

static void on_signal(struct ms_daemon *d)
{
    struct signalfd_siginfo si;
    while (read(d->signal_fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
        if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT) {
            ms_log_info("signal %u: shutting down", si.ssi_signo);
            ms_sd_notify("STOPPING=1");
            d->stop = true;
        } else if (si.ssi_signo == SIGHUP) {
            ms_log_reopen();
            ms_log_info("SIGHUP: log reopened");
            reload_config(d);
        }
    }
}

/* ---- ghosts --------------------------------------------------------------------------------- */

static void ghost_gone(struct ms_daemon *d, struct ms_ghost *g)
{
    ms_log_info("dropped task %u (pid %d) exited; its memory is released", g->task, (int)g->pid);
    ms_sched_task_gone(&d->sched, ms_daemon_now_ns(), g->task);
    ms_daemon_ep_del(d, g->pidfd);
    close(g->pidfd);
    struct ms_ghost **pp = &d->ghosts;
    while (*pp != g)
        pp = &(*pp)->next;
    *pp = g->next;
    free(g);
}

/* Warn once about a task that closed its connection GHOST_WARN_NS ago and still runs. */
static void ghost_check(struct ms_daemon *d, uint64_t now)
{
    for (struct ms_ghost *g = d->ghosts; g; g = g->next)
        if (g->warn_at && now >= g->warn_at) {
            g->warn_at = 0;
            ms_log_warn("task %u (pid %d) closed its connection %.0f s ago and still runs; its "
                        "memory stays charged until it exits",
                        g->task, (int)g->pid, (double)GHOST_WARN_NS / 1e9);
        }
}

/* The scheduler dropped s's task. Its memory stays charged until its process exits. */
static void task_dropped(struct ms_daemon *d, struct ms_session *s, uint32_t task)
{
    if (ms_sched_task_state(&d->sched, task) != MS_TS_DROPPED)
        return; /* BYE: nothing is left */
    if (ms_sched_task_resident(&d->sched, task) == 0) {
        /* Nothing charged: a ghost would only take a slot (a process that says HELLO and
         * closes, again and again, must not fill the task table). */
        ms_sched_task_gone(&d->sched, ms_daemon_now_ns(), task);
        return;
    }
    for (struct ms_ghost *g = d->ghosts; g; g = g->next)
        if (g->task == task)
            return; /* already a ghost (its session closed while the process runs) */
    struct ms_ghost *g = s && s->pidfd >= 0 ? calloc(1, sizeof(*g)) : NULL;
    if (g) {
        g->ev.kind = MS_EV_GHOST;
        g->task = task;
        g->pidfd = s->pidfd;
        g->pid = s->pid;
        if (ms_daemon_ep_set(d, EPOLL_CTL_MOD, g->pidfd, &g->ev, EPOLLIN) == 0) {
            s->pidfd = -1;
            g->next = d->ghosts;
            d->ghosts = g;
            ms_log_info("task %u: its memory stays charged until pid %d exits", task, (int)g->pid);
            return;
        }
        free(g);
    }
    ms_log_warn("task %u: cannot watch its process; releasing its memory now", task);
    ms_sched_task_gone(&d->sched, ms_daemon_now_ns(), task);
}

/* ---- the scheduler's actions ---------------------------------------------------------------- */

/* A switch this long is logged with its parts (where a latency tail comes from). */
#define MS_SLOW_SWITCH_NS (100 * 1000 * 1000ull)

static void note_switch(struct ms_daemon *d)
{
    const __typeof__(d->sched.last_switch) *w = &d->sched.last_switch;
    if (w->seq == d->st.switch_seen)
        return;
    d->st.switch_seen = w->seq;
    ms_metrics_observe_switch(&d->st, w->ns, w->in + w->out);
    if (w->ns < MS_SLOW_SWITCH_NS)
        return;
    d->st.slow_switches++;
    char stop[64];
    if (w->from == MS_TASK_NONE)
        snprintf(stop, sizeof(stop), "nothing to stop");
    else
        snprintf(stop, sizeof(stop), "%.1f ms waiting for task %u to stop",
                 (double)w->stop_ns / 1e6, w->from);
    char evict[64] = "";
    if (w->evict_task != MS_TASK_NONE)
        snprintf(evict, sizeof(evict), "; longest eviction: task %u's, %.1f ms", w->evict_task,
                 (double)w->evict_ns / 1e6);
    /* The bytes and the model's time for them tell a link-bound switch from a stall; the
     * longest eviction against the population says whether a victim or the incoming task
     * held it up. */
    ms_log_unlimited(
        MS_LOG_INFO,
        "slow switch %llu: task %u ran after %.1f ms (%s); moved %.2f GiB out, %.2f GiB "
        "in, %llu plan(s), predicted %.1f ms%s; population %.1f ms",
        (unsigned long long)w->seq, w->to, (double)w->ns / 1e6, stop,
        (double)w->out / (double)MS_GIB, (double)w->in / (double)MS_GIB,
        (unsigned long long)w->plans, (double)w->predicted_ns / 1e6, evict,
        (double)w->pop_ns / 1e6);
}

static void run_actions(struct ms_daemon *d)
{
    struct ms_action a;
    note_switch(d);
    while (ms_sched_next_action(&d->sched, &a)) {
        struct ms_session *s = ms_daemon_session_of_task(d, a.task);
        if (a.kind == MS_ACT_SEND) {
            if (s) {
                int rc = session_send(d, s, &a.msg);
                if (rc == MS_E_NOSPACE) {
                    d->st.slow_dropped++;
                    ms_sched_task_drop(&d->sched, ms_daemon_now_ns(), a.task, MS_E_NOSPACE,
                                       "does not read its messages");
                    s->closing = true;
                } else if (rc && rc != MS_OK) {
                    ms_daemon_session_close(d, s, true);
                }
            }
        } else if (a.kind == MS_ACT_DROP) {
            if (a.err && a.err != MS_E_IO) /* MS_E_IO: a closed socket (session_close) */
                ms_log_warn("task %u dropped: %s", a.task, a.why);
            else
                ms_log_info("task %u %s", a.task, a.why);
            task_dropped(d, s, a.task);
            if (s) {
                s->task = MS_TASK_NONE;
                session_finish(d, s);
            }
        } else if (a.kind == MS_ACT_NOTE && a.task == MS_TASK_NONE) {
            ms_log_info("%s", a.why); /* about no task: the mode (sharing), normal operation */
        } else if (a.kind == MS_ACT_NOTE) {
            ms_log_warn("task %u (pid %u): %s", a.task, s ? (unsigned)s->pid : 0u, a.why);
        }
        ms_msg_free(&a.msg);
    }
}

/* ---- setup and the loop --------------------------------------------------------------------- */

static int take_lock(struct ms_daemon *d, char *why, size_t whylen)
{
    snprintf(d->lock_path, sizeof(d->lock_path), "%s.lock", d->sock_path);
    d->lock_fd = open(d->lock_path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (d->lock_fd < 0) {
        snprintf(why, whylen, "cannot open %s: %s", d->lock_path, strerror(errno));
        return MS_E_IO;
    }
    if (flock(d->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        char pid[32] = "";
        ssize_t n = pread(d->lock_fd, pid, sizeof(pid) - 1, 0);
        pid[n > 0 ? n : 0] = '\0';
        pid[strcspn(pid, "\n")] = '\0';
        snprintf(why, whylen,
                 "another mschedd (pid %s) is already running for GPU %u on %s; stop it "
                 "first or use another --socket",
                 pid[0] ? pid : "?", d->conf.gpu, d->sock_path);
        close(d->lock_fd);
        d->lock_fd = -1;
        return MS_E_BUSY;
    }
    char pid[32];
    int n = snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
    if (ftruncate(d->lock_fd, 0) != 0 || pwrite(d->lock_fd, pid, (size_t)n, 0) != n)
        ms_log_warn("cannot write %s: %s", d->lock_path, strerror(errno));
    return MS_OK;
}

/* A group name or number into *out (-1 for ""). */
static int resolve_group(const char *name, long *out, char *why, size_t whylen)
{
    *out = -1;
    if (!name[0])
        return MS_OK;
    char *end;
    errno = 0;
    unsigned long v = strtoul(name, &end, 10);
    if (*end == '\0' && errno == 0 && v < (gid_t)-1) {
        *out = (long)v;
        return MS_OK;
    }
    struct group gr, *res = NULL;
    char buf[4096];
    if (getgrnam_r(name, &gr, buf, sizeof(buf), &res) != 0 || !res) {
        snprintf(why, whylen, "no group '%s'", name);
        return MS_E_INVAL;
    }
    *out = (long)res->gr_gid;
    return MS_OK;
}

int ms_daemon_init(struct ms_daemon *d, char *why, size_t whylen)
{
    struct ms_conf conf = d->conf;
    int inherit_fd1 = d->inherit_fd1;
    int (*reload)(struct ms_conf *, char *, size_t) = d->reload;
    memset(d, 0, sizeof(*d));
    d->conf = conf;
    d->inherit_fd1 = inherit_fd1;
    d->reload = reload;
    d->epfd = d->listen_fd = d->signal_fd = d->lock_fd = d->http_fd = -1;
    d->socket_gid = d->admin_gid = -1;
    d->listen_ev.kind = MS_EV_LISTEN;
    d->signal_ev.kind = MS_EV_SIGNAL;
    int rc = ms_conf_check(&d->conf, why, whylen);
    if (rc)
        return rc;
    if (d->conf.socket[0])
        rc = snprintf(d->sock_path, sizeof(d->sock_path), "%s", d->conf.socket) >= MS_IPC_PATH_MAX
                 ? MS_E_NOSPACE
                 : MS_OK;
    else
        rc = ms_ipc_socket_path(d->conf.gpu, d->sock_path, sizeof(d->sock_path));
    if (rc) {
        snprintf(why, whylen, "socket path too long (at most %d bytes)", MS_IPC_PATH_MAX - 1);
        return rc;
    }
    rc = resolve_group(d->conf.socket_group, &d->socket_gid, why, whylen);
    if (!rc)
        rc = resolve_group(d->conf.admin_group, &d->admin_gid, why, whylen);
    if (rc)
        return rc;
    char inner[200];
    rc = ms_ipc_prepare_dir_group(d->sock_path, d->socket_gid, inner, sizeof(inner));
    if (rc) {
        snprintf(why, whylen, "%s", inner);
        return rc;
    }
    rc = take_lock(d, why, whylen);
    if (rc)
        return rc;
    d->start_ns = ms_daemon_now_ns();
    struct ms_sched_config sc;
    ms_conf_to_sched(&d->conf, &sc);
    /* max_tasks bounds the live tasks (do_hello); the scheduler's table also holds the ghosts
     * whose memory stays charged, as many again. */
    sc.max_tasks = MS_MIN(2 * sc.max_tasks, 65536u);
    rc = ms_sched_init(&d->sched, &sc, d->start_ns);
    if (rc) {
        snprintf(why, whylen, "bad scheduler configuration");
        return rc;
    }
    if (d->inherit_fd1 > 0) /* socket activation: the manager's socket, bound and listening */
        d->listen_fd = d->inherit_fd1 - 1;
    else
        rc = ms_ipc_listen_group(d->sock_path, d->socket_gid, &d->listen_fd);
    if (rc) {
        snprintf(why, whylen, "cannot listen on %s: %s", d->sock_path, strerror(errno));
        return rc;
    }
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    sigprocmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    d->signal_fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    d->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (d->signal_fd < 0 || d->epfd < 0 ||
        ms_daemon_ep_set(d, EPOLL_CTL_ADD, d->listen_fd, &d->listen_ev, EPOLLIN) != 0 ||
        ms_daemon_ep_set(d, EPOLL_CTL_ADD, d->signal_fd, &d->signal_ev, EPOLLIN) != 0) {
        snprintf(why, whylen, "event loop setup: %s", strerror(errno));
        return MS_E_IO;
    }
    rc = ms_httpd_init(d, why, whylen);
    if (rc)
        return rc;
    char b[32], sl[32], mx[32], pol[96];
    ms_format_size(d->conf.budget, b, sizeof(b));
    ms_format_duration(d->conf.slice_ns, sl, sizeof(sl));
    if (sc.policy == MS_SCHED_ADAPTIVE) {
        ms_format_duration(sc.slice_max_ns, mx, sizeof(mx));
        snprintf(pol, sizeof(pol), "adaptive (a switch at most %u %% of the slice, up to %s)",
                 (unsigned)sc.switch_frac_pct, mx);
    } else {
        snprintf(pol, sizeof(pol), "%s", ms_sched_policy_name(sc.policy));
    }
    ms_log_info("serving GPU %u on %s: budget %s, slice %s, policy %s, eviction %s", d->conf.gpu,
                d->sock_path, b, sl, pol, ms_evict_policy_name(sc.evict));
    return MS_OK;
}

static void free_graveyard(void)
{
    while (graveyard) {
        struct ms_session *s = graveyard;
        graveyard = s->next;
        free(s);
    }
}

static void check_invariants(struct ms_daemon *d)
{
    char why[256];
    int rc = ms_sched_check(&d->sched, why, sizeof(why));
    if (rc) {
        ms_log_error("invariant violated: %s", why);
        abort();
    }
}

/* How long a session that is not a task may stay silent. */
static uint64_t idle_limit(const struct ms_daemon *d, const struct ms_session *s)
{
    return s->spoke ? MS_MAX(CONTROL_IDLE_NS, d->conf.hello_timeout_ns) : d->conf.hello_timeout_ns;
}

int ms_daemon_run(struct ms_daemon *d)
{
    struct epoll_event evs[64];
    while (!d->stop) {
        uint64_t now = ms_daemon_now_ns();
        uint64_t dl = ms_sched_deadline(&d->sched);
        bool more = false;
        for (struct ms_session *s = d->sessions; s; s = s->next) {
            if (s->closing && s->close_by)
                dl = MS_MIN(dl, s->close_by);
            else if (s->task == MS_TASK_NONE && !s->closing)
                dl = MS_MIN(dl, s->last_in + idle_limit(d, s));
            more |= s->more;
        }
        if (d->accept_resume)
            dl = MS_MIN(dl, d->accept_resume);
        dl = MS_MIN(dl, ms_httpd_deadline(d));
        for (const struct ms_ghost *g = d->ghosts; g; g = g->next)
            if (g->warn_at)
                dl = MS_MIN(dl, g->warn_at);
        if (more)
            dl = now;
        int timeout = 1000;
        if (dl <= now)
            timeout = 0;
        else if (dl - now < 1000000000ull)
            timeout = (int)((dl - now + 999999) / 1000000);
        int n = epoll_wait(d->epfd, evs, (int)MS_ARRAY_LEN(evs), timeout);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            ms_log_error("epoll_wait: %s", strerror(errno));
            d->exit_code = 1;
            break;
        }
        for (int i = 0; i < n; i++) {
            struct ms_ev *ev = evs[i].data.ptr;
            uint32_t e = evs[i].events;
            switch (ev->kind) {
            case MS_EV_LISTEN: ms_daemon_on_listen(d); break;
            case MS_EV_SIGNAL: on_signal(d); break;
            case MS_EV_SESSION: {
                struct ms_session *s = (struct ms_session *)ev;
                if (e & (EPOLLIN | EPOLLHUP | EPOLLERR))
                    on_session_in(d, s);
                if (s->ev.kind == MS_EV_SESSION && (e & EPOLLOUT))
                    on_session_out(d, s);
                break;
            }
            case MS_EV_PIDFD: {
                struct ms_session *s =
                    (struct ms_session *)((char *)ev - offsetof(struct ms_session, pidev));
                if (s->ev.kind == MS_EV_SESSION && s->pidfd >= 0) {
                    ms_log_info("pid %d exited", (int)s->pid);
                    ms_daemon_session_close(d, s, true);
                }
                break;
            }
            case MS_EV_GHOST: ghost_gone(d, (struct ms_ghost *)ev); break;
            case MS_EV_HTTP_LISTEN: ms_httpd_on_listen(d); break;
            case MS_EV_HTTP: ms_httpd_on_conn(d, ev, e); break;
            default: break; /* a session closed earlier in this batch */
            }
            run_actions(d);
        }
        /* Input a flood left over (MSGS_PER_PASS), after everyone else had their turn. */
        for (struct ms_session *s = d->sessions; s; s = s->next)
            s->turn = s->more;
        for (;;) {
            /* From the head each time: handling one may close others (actions). */
            struct ms_session *s = d->sessions;
            while (s && !s->turn)
                s = s->next;
            if (!s)
                break;
            s->turn = false;
            on_session_in(d, s);
            run_actions(d);
        }
        now = ms_daemon_now_ns();
        if (now >= ms_sched_deadline(&d->sched))
            ms_sched_tick(&d->sched, now);
        run_actions(d);
        for (struct ms_session *s = d->sessions, *nx; s; s = nx) {
            nx = s->next;
            if (s->closing && s->close_by && now >= s->close_by) {
                ms_daemon_session_close(d, s, false);
            } else if (s->task == MS_TASK_NONE && !s->closing &&
                       now - s->last_in >= idle_limit(d, s)) {
                char who[96];
                d->st.idle_closed++;
                ms_log_info("%s %s; closing it", peer(s, who, sizeof(who)),
                            s->spoke ? "has been quiet for too long"
                                     : "said nothing within hello_timeout");
                ms_daemon_session_close(d, s, false);
            }
        }
        ms_daemon_resume_accept(d);
        ms_httpd_tick(d, now);
        ghost_check(d, now);
        ms_log_tick();
        free_graveyard();
        if (d->conf.check)
            check_invariants(d);
        if (d->sessions || !d->conf.idle_exit_ns) {
            d->idle_since = 0;
        } else if (!d->idle_since) {
            d->idle_since = now;
        } else if (now - d->idle_since >= d->conf.idle_exit_ns) {
            char b[32];
            ms_format_duration(d->conf.idle_exit_ns, b, sizeof(b));
            ms_log_info("no client for %s: exiting (idle_exit)", b);
            d->stop = true;
        }
    }
    return d->exit_code;
}

void ms_daemon_fini(struct ms_daemon *d)
{
    while (d->sessions) {
        struct ms_session *s = d->sessions;
        if (s->task != MS_TASK_NONE) {
            struct ms_msg bye;
            ms_msg_init(&bye, MS_MSG_BYE);
            ms_conn_send(&s->conn, &bye); /* best effort: shims also notice the close */
        }
        ms_daemon_session_close(d, s, false);
    }
    free_graveyard();
    ms_httpd_fini(d);
    while (d->ghosts) {
        struct ms_ghost *g = d->ghosts;
        d->ghosts = g->next;
        close(g->pidfd);
        free(g);
    }
    if (d->listen_fd >= 0) {
        close(d->listen_fd);
        if (!d->inherit_fd1) /* an inherited socket is the manager's: it stays */
            unlink(d->sock_path);
    }
    if (d->signal_fd >= 0)
        close(d->signal_fd);
    if (d->epfd >= 0)
        close(d->epfd);
    ms_sched_fini(&d->sched);
    if (d->lock_fd >= 0)
        close(d->lock_fd); /* releases the lock; the file stays (removing it would race) */
    d->listen_fd = d->signal_fd = d->epfd = d->lock_fd = -1;
}
