/*
 * daemon.h - mschedd's internals shared by its files (not an interface of anything else).
 *
 * Design
 *   One thread, one epoll loop (docs/style.md §14). Everything the loop watches is a struct
 *   ms_ev whose `kind` says what it is: the listening socket, the signalfd, a client session's
 *   socket, a session's pidfd, the pidfd of a ghost (a task the scheduler dropped whose
 *   process still lives and may hold device memory), or the HTTP metrics endpoint's listening
 *   socket and its connections (httpd.c, bounded and never blocking the loop). The scheduler
 * (core/sched.h) decides; this code only moves bytes between sockets and the scheduler and turns
 * its actions into sends and closes.
 *
 *   A session is one client connection. It becomes a task session when it says HELLO; before
 *   that (the CLI) it may ask for STATUS, METRICS and CONFIG. Sessions are in one doubly linked
 *   list; tasks are few (max_tasks), so finding a task's session is a walk of the list.
 *
 *   Authorization: every request is judged by the connection's SO_PEERCRED, taken at
 *   accept. A client acts only through its own session, so only on its own task; an admin
 *   (the daemon's uid, root, or a member of admin_group, by SO_PEERGROUPS) may also change
 *   the configuration and ask for priorities and weights above max_user_priority and
 *   max_user_weight.
 *
 *   Bounds (docs/daemon.md, "Threat model"): a session that is not a task is closed when it
 *   has been silent for hello_timeout (before its first message) or CONTROL_IDLE_NS (after);
 *   a uid holds at most max_conns_per_uid sessions and all uids together max_tasks + 64; at
 *   either limit, or when accept runs out of descriptors, the oldest quiet session that is
 *   not a task makes room, and when there is none the new connection is refused (out of
 *   descriptors: accepting pauses, 50 ms doubling to 1 s, instead of spinning). One session's
 *   messages are handled at most MSGS_PER_PASS per loop pass, so a flood cannot starve the
 *   others; a client that does not read its replies is dropped once session_out_max wait.
 *
 *   Under a service manager (sdnotify.c): the listening socket may be inherited (socket
 *   activation, inherit_fd1), readiness and reloads are notified, and SIGHUP rebuilds the
 *   configuration through d->reload and applies what may change at run time.
 *
 * Glossary
 *   closing  a session that will be closed once its queued output is written (after an ERROR
 *            or a DROP), or after a short grace period if the peer does not read.
 *   ghost    see above; watched through its pidfd until the process exits, then
 *            ms_sched_task_gone releases its memory.
 *
 * Invariants
 *   - a session's task is MS_TASK_NONE or a live (non-ghost) task of the scheduler;
 *   - EPOLLOUT is registered exactly when the session has output pending;
 *   - every fd registered with epoll belongs to exactly one ms_ev still allocated.
 */
#ifndef MS_DAEMON_H
#define MS_DAEMON_H

#include "core/sched.h"
#include "daemon/log.h"
#include "ipc/conf.h"
#include "ipc/ipc.h"

#include <stdbool.h>
#include <sys/types.h>

enum ms_ev_kind {
    MS_EV_LISTEN = 1,
    MS_EV_SIGNAL,
    MS_EV_SESSION,
    MS_EV_PIDFD,
    MS_EV_GHOST,
    MS_EV_HTTP_LISTEN, /* the metrics endpoint's socket (httpd.c) */
    MS_EV_HTTP,        /* one metrics connection */
};

struct ms_ev {
    int kind; /* enum ms_ev_kind */
};

struct ms_session {
    struct ms_ev ev;    /* MS_EV_SESSION; first member: &ev == session */
    struct ms_ev pidev; /* MS_EV_PIDFD */
    uint64_t id;        /* for logs */
    struct ms_conn conn;
    uint32_t task; /* MS_TASK_NONE until HELLO, and after the task is dropped */
    int pidfd;     /* -1: none */
    pid_t pid;     /* of the peer, from SO_PEERCRED */
    uid_t uid;
    gid_t gid;
    bool admin; /* the daemon's uid, root, or a member of admin_group */
    bool closing;
    bool spoke;        /* has sent a whole message */
    bool more;         /* input left unhandled this pass (fairness cap): handle it next pass */
    bool turn;         /* more, at the start of this pass's second round */
    bool want_out;     /* EPOLLOUT registered */
    uint64_t last_in;  /* when it connected or last sent a whole message */
    uint64_t close_by; /* closing: give up flushing at this time */
    struct ms_session *prev, *next;
};

struct ms_ghost {
    struct ms_ev ev; /* MS_EV_GHOST; first member */
    uint32_t task;
    int pidfd;
    pid_t pid;
    uint64_t warn_at; /* closed its connection: warn if it still runs then (0: no warning due) */
    struct ms_ghost *next;
};

#define MS_SWITCH_HIST_BUCKETS 13
#define MS_MOVED_HIST_BUCKETS 10

struct ms_http_conn;

struct ms_daemon_stats {
    uint64_t sessions_total;
    uint64_t protocol_errors; /* malformed frames and protocol violations */
    uint64_t slow_dropped;    /* clients dropped for not reading */
    uint64_t conns_refused;   /* connections refused or recycled (limits, descriptors) */
    uint64_t idle_closed;     /* connections closed by hello_timeout */
    uint64_t msgs_in, msgs_out;
    uint64_t bytes_in, bytes_out;
    uint64_t switch_stop_ns; /* the scheduler's stop_ns_total (sched.h), copied when read */
    uint64_t idle_holds, idle_resumes; /* the scheduler's, copied when read */
    uint64_t refills;                  /* the scheduler's, copied when read */
    uint64_t prepares, prepare_bytes;  /* the scheduler's PREPARE hints, copied when read */
    uint64_t slow_switches; /* switches longer than MS_SLOW_SWITCH_NS (each one logged) */
    uint64_t switch_seen;   /* the last switch looked at (sched.last_switch.seq) */
    /* histograms of every switch seen (note_switch): its duration and the bytes it moved
     * (out + in); bucket i counts those <= the bound i of metrics.c, the last one all */
    uint64_t switch_hist[MS_SWITCH_HIST_BUCKETS], switch_hist_sum_ns;
    uint64_t moved_hist[MS_MOVED_HIST_BUCKETS], moved_hist_sum;
    uint64_t switch_hist_count;
    uint64_t http_requests, http_refused; /* metrics connections accepted, refused (busy) */
};

struct ms_daemon {
    struct ms_conf conf;
    struct ms_sched sched;
    char sock_path[MS_IPC_PATH_MAX + 8];
    char lock_path[MS_IPC_PATH_MAX + 16];
    int epfd, listen_fd, signal_fd, lock_fd;
    struct ms_ev listen_ev, signal_ev;
    struct ms_session *sessions;
    size_t nsessions;
    struct ms_ghost *ghosts;
    uint64_t next_session_id;
    uint64_t start_ns;
    /* when the last session went away (0: a session exists, or idle_exit is off) */
    uint64_t idle_since;
    long socket_gid, admin_gid; /* resolved socket_group and admin_group; -1: none */
    /* accept paused for lack of descriptors until accept_resume (0: accepting) */
    uint64_t accept_resume, accept_backoff_ns;
    int http_fd; /* the metrics endpoint (-1: none) */
    struct ms_ev http_ev;
    struct ms_http_conn *http_conns;
    size_t nhttp;
    /* socket activation: the inherited listening socket + 1 (0: none; then the daemon binds) */
    int inherit_fd1;
    /* SIGHUP: the configuration as the file and the flags give it now (main.c; NULL: none) */
    int (*reload)(struct ms_conf *out, char *why, size_t whylen);
    bool stop;
    int exit_code;
    struct ms_daemon_stats st;
};

/*
 * Set the daemon up on an already-configured d->conf: scheduler, lock, socket, signals, epoll.
 * Prints nothing; errors go to why. Errors: MS_E_BUSY (another daemon holds the lock: why names
 * its pid), MS_E_IO, MS_E_INVAL (configuration), MS_E_NOMEM.
 */
int ms_daemon_init(struct ms_daemon *d, char *why, size_t whylen);
/* Run until SIGTERM/SIGINT (or d->stop). Returns the exit code. */
int ms_daemon_run(struct ms_daemon *d);
/* Say BYE to every session, close everything, remove the socket. */
void ms_daemon_fini(struct ms_daemon *d);

/* Shared by the loop's files (server.c). ms_daemon_reply queues m on s (a client that does
 * not read its replies is dropped); ms_daemon_reply_error sends ERROR{code, text} answering
 * seq; ms_daemon_session_close closes s now (died: its process is gone or broke the rules);
 * ms_daemon_ep_set/ep_del change what epoll watches (0 or -1 with errno). */
uint64_t ms_daemon_now_ns(void);
void ms_daemon_reply(struct ms_daemon *d, struct ms_session *s, struct ms_msg *m);
void ms_daemon_reply_error(struct ms_daemon *d, struct ms_session *s, uint32_t seq, int code,
                           const char *text);
void ms_daemon_session_close(struct ms_daemon *d, struct ms_session *s, bool died);
struct ms_session *ms_daemon_session_of_task(struct ms_daemon *d, uint32_t task);
int ms_daemon_ep_set(struct ms_daemon *d, int op, int fd, struct ms_ev *ev, uint32_t events);
void ms_daemon_ep_del(struct ms_daemon *d, int fd);

/* Control requests (control.c): each answers req on s. ms_daemon_apply_option carries the
 * option `key` of d->conf over to the scheduler and the log; ms_daemon_admins writes who may
 * do what an admin may, for error texts. */
void ms_daemon_do_status(struct ms_daemon *d, struct ms_session *s, const struct ms_msg *req);
void ms_daemon_do_metrics(struct ms_daemon *d, struct ms_session *s, const struct ms_msg *req);
void ms_daemon_do_config_get(struct ms_daemon *d, struct ms_session *s, const struct ms_msg *req);
void ms_daemon_do_config_set(struct ms_daemon *d, struct ms_session *s, const struct ms_msg *req);
void ms_daemon_apply_option(struct ms_daemon *d, const char *key);
void ms_daemon_admins(const struct ms_daemon *d, char *buf, size_t len);

/* New connections (accept.c): accept what the listening socket has, within the bounds; after
 * a pause for want of descriptors, watch the socket again once the pause is over. */
void ms_daemon_on_listen(struct ms_daemon *d);
void ms_daemon_resume_accept(struct ms_daemon *d);

/* Prometheus text exposition of a STATUS message and the daemon's own counters into out
 * (replacing its contents), at most MS_PROTO_MAX_PAYLOAD bytes. uids[i] is the uid of
 * st->tasks[i]'s process (-1: unknown; uids NULL: none known). Errors: MS_E_NOMEM. */
int ms_metrics_text(const struct ms_msg_status *st, const struct ms_daemon_stats *ds,
                    size_t nsessions, const long *uids, struct ms_buf *out);
/* The daemon's metrics now (the text of METRICS and of GET /metrics). Errors: MS_E_NOMEM. */
int ms_daemon_metrics(struct ms_daemon *d, struct ms_buf *out);
/* Record a finished switch in the histograms. */
void ms_metrics_observe_switch(struct ms_daemon_stats *ds, uint64_t ns, uint64_t bytes);

/* The service manager (sdnotify.c): send a notification ("READY=1", ...) to $NOTIFY_SOCKET
 * if set (MS_OK when unset; MS_E_IO, MS_E_INVAL on failure); RELOADING=1 with the time; the
 * socket-activated listening socket, with its path into path: its fd, -1 when none was passed,
 * -2 when what was passed is not a listening Unix stream socket. */
int ms_sd_notify(const char *state);
int ms_sd_notify_reloading(void);
int ms_sd_listen_fd(char *path, size_t len);

/* The metrics endpoint (httpd.c): set up when metrics_listen is set (MS_E_INVAL, MS_E_IO with
 * why), its events, its earliest deadline (UINT64_MAX: none), timeouts, and closing. */
int ms_httpd_init(struct ms_daemon *d, char *why, size_t whylen);
void ms_httpd_on_listen(struct ms_daemon *d);
void ms_httpd_on_conn(struct ms_daemon *d, struct ms_ev *ev, uint32_t events);
uint64_t ms_httpd_deadline(const struct ms_daemon *d);
void ms_httpd_tick(struct ms_daemon *d, uint64_t now);
void ms_httpd_fini(struct ms_daemon *d);

#endif /* MS_DAEMON_H */
