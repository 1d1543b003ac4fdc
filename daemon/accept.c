/*
 * accept.c - new connections: accepting them within the daemon's bounds (design: daemon.h,
 * "Bounds"; the loop that calls it: server.c).
 *
 * Design notes
 *   At most ACCEPTS_PER_PASS connections are accepted per loop pass, each with its
 *   SO_PEERCRED taken at once (no credentials: refused). A uid at max_conns_per_uid, or all
 *   sessions at max_tasks + MAX_EXTRA_SESSIONS, first recycles the oldest quiet session that is
 *   not a task (quiet for RECYCLE_AGE_NS at least), else refuses the newcomer; out of
 *   descriptors, the same recycling gives one up, else accepting pauses (50 ms doubling to 1 s)
 *   instead of spinning, and ms_daemon_resume_accept watches the socket again when the pause
 *   ends. An admin is the daemon's uid, root, or a member of admin_group by the peer's groups
 *   at connect time (SO_PEERGROUPS).
 */
#include "daemon/daemon.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_EXTRA_SESSIONS 64             /* control sessions beyond max_tasks */
#define ACCEPTS_PER_PASS 32               /* connections accepted per loop pass */
#define RECYCLE_AGE_NS (200 * 1000000ull) /* quiet this long before it may be recycled */
#define ACCEPT_BACKOFF_MIN_NS (50 * 1000000ull)
#define ACCEPT_BACKOFF_MAX_NS (1000 * 1000000ull)

/* The oldest quiet session that is not a task, of uid (or of anyone when uid < 0): the one
 * that makes room when a limit is reached. A session quiet for less than RECYCLE_AGE_NS is
 * spared (NULL: refuse the newcomer instead), so a client that just connected gets to say
 * what it wants however fast a flood of others arrives. */
static struct ms_session *oldest_idle(struct ms_daemon *d, long uid)
{
    struct ms_session *best = NULL;
    uint64_t now = ms_daemon_now_ns();
    for (struct ms_session *s = d->sessions; s; s = s->next)
        if (s->task == MS_TASK_NONE && !s->closing && (uid < 0 || (long)s->uid == uid) &&
            now - s->last_in >= RECYCLE_AGE_NS && (!best || s->last_in < best->last_in))
            best = s;
    return best;
}

static size_t sessions_of(const struct ms_daemon *d, uid_t uid)
{
    size_t n = 0;
    for (const struct ms_session *s = d->sessions; s; s = s->next)
        n += s->uid == uid;
    return n;
}

/* Out of descriptors with nothing to recycle: stop watching the socket for a while. */
static void pause_accept(struct ms_daemon *d, int err)
{
    uint64_t b = d->accept_backoff_ns;
    b = b ? MS_MIN(2 * b, ACCEPT_BACKOFF_MAX_NS) : ACCEPT_BACKOFF_MIN_NS;
    d->accept_backoff_ns = b;
    d->accept_resume = ms_daemon_now_ns() + b;
    ms_daemon_ep_del(d, d->listen_fd);
    d->st.conns_refused++;
    ms_log_warn("cannot accept connections: %s; pausing for %llu ms (%zu sessions)", strerror(err),
                (unsigned long long)(b / 1000000ull), d->nsessions);
}

void ms_daemon_resume_accept(struct ms_daemon *d)
{
    if (!d->accept_resume || ms_daemon_now_ns() < d->accept_resume)
        return;
    d->accept_resume = 0;
    if (ms_daemon_ep_set(d, EPOLL_CTL_ADD, d->listen_fd, &d->listen_ev, EPOLLIN) != 0) {
        ms_log_error("cannot watch the listening socket again: %s", strerror(errno));
        d->exit_code = 1;
        d->stop = true;
    }
}

/* Make room for one more session of uid. Returns false when the connection must be refused. */
static bool make_room(struct ms_daemon *d, uid_t uid)
{
    size_t mine = sessions_of(d, uid);
    if (mine >= d->conf.max_conns_per_uid) {
        struct ms_session *v = oldest_idle(d, (long)uid);
        if (!v) {
            ms_log_warn("uid %u holds %zu connections (max_conns_per_uid %u): refusing one",
                        (unsigned)uid, mine, d->conf.max_conns_per_uid);
            return false;
        }
        d->st.conns_refused++;
        ms_log_info("uid %u holds %zu connections (max_conns_per_uid %u): closing its oldest "
                    "quiet one",
                    (unsigned)uid, mine, d->conf.max_conns_per_uid);
        ms_daemon_session_close(d, v, false);
    }
    if (d->nsessions >= (size_t)d->conf.max_tasks + MAX_EXTRA_SESSIONS) {
        struct ms_session *v = oldest_idle(d, -1);
        if (!v) {
            ms_log_warn("too many connections (%zu); refusing one", d->nsessions);
            return false;
        }
        d->st.conns_refused++;
        ms_log_info("too many connections (%zu); closing the oldest quiet one (uid %u)",
                    d->nsessions, (unsigned)v->uid);
        ms_daemon_session_close(d, v, false);
    }
    return true;
}

#ifndef SO_PEERGROUPS
#define SO_PEERGROUPS 59
#endif

/* The daemon's uid, root, or (by the peer's groups at connect time) admin_group. */
static bool is_admin(const struct ms_daemon *d, int fd, const struct ucred *cred)
{
    if (cred->uid == 0 || cred->uid == geteuid())
        return true;
    if (d->admin_gid < 0)
        return false;
    if ((long)cred->gid == d->admin_gid)
        return true;
    gid_t groups[256];
    socklen_t len = sizeof(groups);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) != 0)
        return false; /* too many groups or no support: not an admin by group */
    for (size_t i = 0; i < len / sizeof(gid_t); i++)
        if ((long)groups[i] == d->admin_gid)
            return true;
    return false;
}

void ms_daemon_on_listen(struct ms_daemon *d)
{
    /* At most ACCEPTS_PER_PASS at a time: the sessions accepted get to speak (their input is
     * handled next pass) before a flood of newer ones could make them the oldest to recycle. */
    for (int n = 0; n < ACCEPTS_PER_PASS && !d->accept_resume; n++) {
        int fd = accept4(d->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            int e = errno;
            if (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM) {
                /* A quiet control connection gives its descriptor up for this one. */
                struct ms_session *v = oldest_idle(d, -1);
                if (v) {
                    d->st.conns_refused++;
                    ms_log_info("out of descriptors (%s): closing the oldest quiet connection",
                                strerror(e));
                    ms_daemon_session_close(d, v, false);
                    n--; /* this one is still to accept */
                    continue;
                }
                pause_accept(d, e);
                return;
            }
            if (e != EAGAIN && e != EWOULDBLOCK && e != EINTR)
                ms_log_warn("accept: %s", strerror(e));
            return;
        }
        d->accept_backoff_ns = 0;
        struct ucred cred;
        socklen_t cl = sizeof(cred);
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0) {
            ms_log_warn("a connection without credentials: %s; refusing it", strerror(errno));
            close(fd);
            continue;
        }
        if (!make_room(d, cred.uid)) {
            d->st.conns_refused++;
            close(fd);
            continue;
        }
        struct ms_session *s = calloc(1, sizeof(*s));
        if (!s) {
            close(fd);
            continue;
        }
        s->ev.kind = MS_EV_SESSION;
        s->pidev.kind = MS_EV_PIDFD;
        s->id = ++d->next_session_id;
        s->task = MS_TASK_NONE;
        s->pidfd = -1;
        s->pid = cred.pid;
        s->uid = cred.uid;
        s->gid = cred.gid;
        s->admin = is_admin(d, fd, &cred);
        s->last_in = ms_daemon_now_ns();
        ms_conn_init(&s->conn, fd, d->conf.session_out_max);
        if (ms_daemon_ep_set(d, EPOLL_CTL_ADD, fd, &s->ev, EPOLLIN) != 0) {
            ms_conn_fini(&s->conn);
            free(s);
            continue;
        }
        s->next = d->sessions;
        if (d->sessions)
            d->sessions->prev = s;
        d->sessions = s;
        d->nsessions++;
        d->st.sessions_total++;
        ms_log_debug("session %llu: pid %d uid %d connected", (unsigned long long)s->id,
                     (int)s->pid, (int)s->uid);
    }
}
