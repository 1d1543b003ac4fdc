/*
 * httpd.c - mschedd's metrics endpoint: Prometheus text over HTTP/1.x, GET /metrics, served
 * from the daemon's own epoll loop (enabled by metrics_listen; docs/daemon.md, "Metrics").
 *
 * Design
 *   The scheduler must never wait on a scraper, so everything here is non-blocking and
 *   bounded: at most HTTP_MAX_CONNS connections at once (one more is answered 503 with a
 *   single best-effort write and closed), each may send at most MS_HTTP_HEAD_MAX bytes of
 *   request head and has HTTP_TIMEOUT_NS from accept to the end of its answer, after which it
 *   is closed whatever it was doing. A request is parsed by ipc/http.c as its bytes arrive;
 *   once its head is whole the answer is built at once (the same text as METRICS_REQ, from
 *   ms_daemon_metrics), queued, and written as the socket takes it; the connection is closed
 *   when the answer is written ("Connection: close": no keep-alive, no pipelining). Any body
 *   is never read. GET and HEAD of /metrics answer 200, other paths 404, other methods 405, a
 *   malformed head 400 and an over-long one 431.
 *
 * Invariants
 *   - a connection is closed only from its own event or from ms_httpd_tick (after the epoll
 *     batch), so no other event of a batch can point at a freed connection;
 *   - EPOLLIN is registered while the head is incomplete, EPOLLOUT once an answer is queued;
 *   - d->nhttp is the length of d->http_conns.
 */
#include "daemon/daemon.h"

#include "ipc/http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define HTTP_MAX_CONNS 8
#define HTTP_TIMEOUT_NS (5 * 1000000000ull)

struct ms_http_conn {
    struct ms_ev ev; /* MS_EV_HTTP; first member */
    int fd;
    char in[MS_HTTP_HEAD_MAX];
    size_t inlen;
    struct ms_buf out; /* the answer; written from out.data[sent..] */
    size_t sent;
    bool answered;
    uint64_t deadline;
    struct ms_http_conn *prev, *next;
};

static int ep(struct ms_daemon *d, int op, int fd, struct ms_ev *ev, uint32_t events)
{
    struct epoll_event e;
    memset(&e, 0, sizeof(e));
    e.events = events;
    e.data.ptr = ev;
    return epoll_ctl(d->epfd, op, fd, &e);
}

int ms_httpd_init(struct ms_daemon *d, char *why, size_t whylen)
{
    d->http_fd = -1;
    d->http_ev.kind = MS_EV_HTTP_LISTEN;
    if (!d->conf.metrics_listen[0])
        return MS_OK;
    struct sockaddr_storage sa;
    socklen_t salen;
    int rc = ms_http_parse_addr(d->conf.metrics_listen, &sa, &salen, why, whylen);
    if (rc)
        return rc;
    int fd = socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        bind(fd, (struct sockaddr *)&sa, salen) != 0 || listen(fd, 16) != 0 ||
        ep(d, EPOLL_CTL_ADD, fd, &d->http_ev, EPOLLIN) != 0) {
        snprintf(why, whylen, "cannot serve metrics on %s: %s", d->conf.metrics_listen,
                 strerror(errno));
        if (fd >= 0)
            close(fd);
        return MS_E_IO;
    }
    d->http_fd = fd;
    /* The port the kernel chose for port 0, for whoever reads the log. */
    struct sockaddr_storage got;
    socklen_t glen = sizeof(got);
    unsigned port = 0;
    char host[INET6_ADDRSTRLEN] = "?";
    if (getsockname(fd, (struct sockaddr *)&got, &glen) == 0) {
        bool v6 = got.ss_family == AF_INET6;
        port = ntohs(v6 ? ((struct sockaddr_in6 *)&got)->sin6_port
                        : ((struct sockaddr_in *)&got)->sin_port);
        inet_ntop(got.ss_family,
                  v6 ? (void *)&((struct sockaddr_in6 *)&got)->sin6_addr
                     : (void *)&((struct sockaddr_in *)&got)->sin_addr,
                  host, sizeof(host));
    }
    ms_log_info("metrics: http://%s%s%s:%u/metrics", got.ss_family == AF_INET6 ? "[" : "", host,
                got.ss_family == AF_INET6 ? "]" : "", port);
    return MS_OK;
}

static void conn_close(struct ms_daemon *d, struct ms_http_conn *c)
{
    epoll_ctl(d->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    ms_buf_fini(&c->out);
    if (c->prev)
        c->prev->next = c->next;
    else
        d->http_conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    d->nhttp--;
    free(c);
}

static int answer(struct ms_http_conn *c, const char *status, const char *type, const char *body,
                  size_t len, bool head_only)
{
    char hdr[256];
    int n = snprintf(hdr, sizeof(hdr),
                     "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n",
                     status, type, len);
    c->out.len = 0;
    c->answered = true;
    int rc = ms_buf_append(&c->out, hdr, (size_t)n);
    if (!rc && !head_only && len)
        rc = ms_buf_append(&c->out, body, len);
    return rc;
}

static int answer_text(struct ms_http_conn *c, const char *status, const char *body)
{
    return answer(c, status, "text/plain; charset=utf-8", body, strlen(body), false);
}

static int respond(struct ms_daemon *d, struct ms_http_conn *c, const struct ms_http_req *r)
{
    bool head = strcmp(r->method, "HEAD") == 0;
    if (strcmp(r->method, "GET") != 0 && !head)
        return answer_text(c, "405 Method Not Allowed", "only GET and HEAD\n");
    if (!ms_http_path_is(r, "/metrics"))
        return answer_text(c, "404 Not Found", "not found: the metrics are at /metrics\n");
    struct ms_buf text;
    ms_buf_init(&text);
    int rc = ms_daemon_metrics(d, &text);
    if (rc == MS_OK)
        rc = answer(c, "200 OK", "text/plain; version=0.0.4; charset=utf-8", (char *)text.data,
                    text.len, head);
    else
        rc = answer_text(c, "500 Internal Server Error", "cannot build the metrics\n");
    ms_buf_fini(&text);
    return rc;
}

/* Write what the socket takes; close when all is written or the peer is gone. */
static void flush(struct ms_daemon *d, struct ms_http_conn *c)
{
    while (c->sent < c->out.len) {
        ssize_t w =
            send(c->fd, c->out.data + c->sent, c->out.len - c->sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            c->sent += (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            ep(d, EPOLL_CTL_MOD, c->fd, &c->ev, EPOLLOUT);
            return;
        }
        break; /* the peer is gone */
    }
    /* The whole answer is written (or cannot be): a half-close lets the peer read it all. */
    shutdown(c->fd, SHUT_WR);
    conn_close(d, c);
}

static void on_input(struct ms_daemon *d, struct ms_http_conn *c)
{
    for (;;) {
        if (c->inlen == sizeof(c->in))
            break;
        ssize_t n = recv(c->fd, c->in + c->inlen, sizeof(c->in) - c->inlen, MSG_DONTWAIT);
        if (n > 0) {
            c->inlen += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        /* EOF or an error before a whole head: nobody to answer. */
        conn_close(d, c);
        return;
    }
    struct ms_http_req r;
    int rc = ms_http_parse_request(c->in, c->inlen, &r);
    if (rc == 0)
        return; /* wait for more (bounded by the deadline and the buffer) */
    if (rc == 1)
        rc = respond(d, c, &r);
    else if (rc == MS_E_NOSPACE)
        rc = answer_text(c, "431 Request Header Fields Too Large", "request head too large\n");
    else
        rc = answer_text(c, "400 Bad Request", "malformed request\n");
    if (rc) {
        conn_close(d, c);
        return;
    }
    flush(d, c);
}

void ms_httpd_on_listen(struct ms_daemon *d)
{
    for (int k = 0; k < HTTP_MAX_CONNS; k++) {
        int fd = accept4(d->http_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                ms_log_warn("metrics: accept: %s", strerror(errno));
            return;
        }
        if (d->nhttp >= HTTP_MAX_CONNS) {
            static const char busy[] = "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
                                       "Connection: close\r\n\r\n";
            ssize_t w = send(fd, busy, sizeof(busy) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
            (void)w;
            close(fd);
            d->st.http_refused++;
            continue;
        }
        struct ms_http_conn *c = calloc(1, sizeof(*c));
        if (!c) {
            close(fd);
            continue;
        }
        c->ev.kind = MS_EV_HTTP;
        c->fd = fd;
        ms_buf_init(&c->out);
        c->deadline = ms_ipc_now_ns() + HTTP_TIMEOUT_NS;
        if (ep(d, EPOLL_CTL_ADD, fd, &c->ev, EPOLLIN) != 0) {
            close(fd);
            free(c);
            continue;
        }
        c->next = d->http_conns;
        if (c->next)
            c->next->prev = c;
        d->http_conns = c;
        d->nhttp++;
        d->st.http_requests++;
    }
}

void ms_httpd_on_conn(struct ms_daemon *d, struct ms_ev *ev, uint32_t events)
{
    struct ms_http_conn *c = (struct ms_http_conn *)ev;
    if (c->answered)
        flush(d, c);
    else if (events & (EPOLLIN | EPOLLHUP | EPOLLERR))
        on_input(d, c);
}

uint64_t ms_httpd_deadline(const struct ms_daemon *d)
{
    uint64_t dl = UINT64_MAX;
    for (const struct ms_http_conn *c = d->http_conns; c; c = c->next)
        dl = MS_MIN(dl, c->deadline);
    return dl;
}

void ms_httpd_tick(struct ms_daemon *d, uint64_t now)
{
    for (struct ms_http_conn *c = d->http_conns, *nx; c; c = nx) {
        nx = c->next;
        if (now >= c->deadline) {
            ms_log_debug("metrics: a connection timed out");
            conn_close(d, c);
        }
    }
}

void ms_httpd_fini(struct ms_daemon *d)
{
    while (d->http_conns)
        conn_close(d, d->http_conns);
    if (d->http_fd >= 0)
        close(d->http_fd);
    d->http_fd = -1;
}
