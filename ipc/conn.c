/*
 * conn.c - framed, nonblocking message I/O on a connected socket (contract: ipc.h).
 *
 * Output: frames are appended to one buffer; out_off marks how much the kernel has taken. The
 * buffer is compacted when more than half of it has been written, so appending stays amortized
 * O(1) and a connection that keeps up never holds more than about one burst. send() uses
 * MSG_NOSIGNAL so a closed peer is an error, not a SIGPIPE.
 *
 * Input: reads go into the input buffer only while it holds less than one maximal frame, so a
 * flood of bytes is throttled by the reader's own decode pace (the kernel's socket buffer then
 * pushes back on the peer).
 */
#include "ipc/ipc.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

void ms_conn_init(struct ms_conn *c, int fd, size_t out_max)
{
    memset(c, 0, sizeof(*c));
    c->fd = fd;
    c->out_max = out_max;
    ms_buf_init(&c->in);
    ms_buf_init(&c->out);
}

void ms_conn_fini(struct ms_conn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    ms_buf_fini(&c->in);
    ms_buf_fini(&c->out);
    memset(c, 0, sizeof(*c));
    c->fd = -1;
}

bool ms_conn_out_pending(const struct ms_conn *c)
{
    return c->out.len > c->out_off;
}

int ms_conn_flush(struct ms_conn *c)
{
    while (c->out_off < c->out.len) {
        ssize_t n = send(c->fd, c->out.data + c->out_off, c->out.len - c->out_off,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            c->out_off += (size_t)n;
            c->bytes_out += (uint64_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        return MS_E_IO;
    }
    if (c->out_off == c->out.len) {
        c->out.len = 0;
        c->out_off = 0;
        return 0;
    }
    if (c->out_off > c->out.len / 2) {
        ms_buf_consume(&c->out, c->out_off);
        c->out_off = 0;
    }
    return 1;
}

int ms_conn_send(struct ms_conn *c, struct ms_msg *m)
{
    if (m->seq == 0) {
        c->seq = c->seq + 1 ? c->seq + 1 : 1;
        m->seq = c->seq;
    }
    size_t before = c->out.len;
    int rc = ms_msg_encode(m, &c->out);
    if (rc)
        return rc;
    if (c->out_max && c->out.len - c->out_off > c->out_max) {
        c->out.len = before; /* not queued */
        return MS_E_NOSPACE;
    }
    c->msgs_out++;
    rc = ms_conn_flush(c);
    return rc < 0 ? rc : MS_OK;
}

int ms_conn_fill(struct ms_conn *c)
{
    int total = 0;
    while (c->in.len < MS_PROTO_MAX_FRAME && !c->eof) {
        if (ms_grow((void **)&c->in.data, &c->in.cap, c->in.len + MS_IPC_READ_CHUNK, 1))
            return MS_E_NOMEM;
        ssize_t n = recv(c->fd, c->in.data + c->in.len, MS_IPC_READ_CHUNK, MSG_DONTWAIT);
        if (n > 0) {
            c->in.len += (size_t)n;
            c->bytes_in += (uint64_t)n;
            total += (int)n;
            if ((size_t)n < MS_IPC_READ_CHUNK)
                break; /* drained for now */
            continue;
        }
        if (n == 0) {
            c->eof = true;
            break;
        }
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            break;
        return MS_E_IO;
    }
    return total;
}

int ms_conn_next(struct ms_conn *c, struct ms_msg *out)
{
    size_t used = 0;
    int rc = ms_msg_decode(c->in.data, c->in.len, out, &used);
    if (rc == 1) {
        ms_buf_consume(&c->in, used);
        c->msgs_in++;
    }
    return rc;
}

int ms_conn_wait(struct ms_conn *c, int timeout_ms)
{
    struct pollfd p = {.fd = c->fd, .events = POLLIN};
    if (ms_conn_out_pending(c))
        p.events |= POLLOUT;
    for (;;) {
        int n = poll(&p, 1, timeout_ms);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return MS_E_IO;
        return n > 0 ? 1 : 0;
    }
}

/* Each direction numbers its own messages, so a reply is known by its seq and its type. */
static unsigned reply_type(unsigned req)
{
    switch (req) {
    case MS_MSG_HELLO: return MS_MSG_WELCOME;
    case MS_MSG_STATUS_REQ: return MS_MSG_STATUS;
    case MS_MSG_METRICS_REQ: return MS_MSG_METRICS;
    case MS_MSG_CONFIG_GET:
    case MS_MSG_CONFIG_SET: return MS_MSG_CONFIG;
    default: return MS_MSG_TYPE_END; /* no reply expected: only an ERROR ends the wait */
    }
}

int ms_conn_request(struct ms_conn *c, int timeout_ms, const struct ms_msg *req,
                    struct ms_msg *reply)
{
    memset(reply, 0, sizeof(*reply));
    struct ms_msg r = *req; /* shallow: encoding only reads the arrays */
    r.seq = 0;
    int rc = ms_conn_send(c, &r);
    if (rc)
        return rc;
    uint64_t deadline =
        timeout_ms < 0 ? UINT64_MAX : ms_ipc_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    for (;;) {
        struct ms_msg m;
        rc = ms_conn_next(c, &m);
        if (rc < 0)
            return rc;
        if (rc == 1) {
            if ((m.seq == r.seq && m.type == reply_type(r.type)) ||
                (m.type == MS_MSG_ERROR && (m.seq == r.seq || m.seq == 0))) {
                *reply = m;
                return MS_OK;
            }
            ms_msg_free(&m); /* not ours (an order for a shim, say): skip */
            continue;
        }
        if (c->eof) {
            errno = ECONNRESET;
            return MS_E_IO;
        }
        if (ms_conn_out_pending(c) && ms_conn_flush(c) < 0)
            return MS_E_IO;
        uint64_t now = ms_ipc_now_ns();
        if (now >= deadline) {
            errno = ETIMEDOUT;
            return MS_E_IO;
        }
        int ms = deadline == UINT64_MAX ? -1 : (int)((deadline - now) / 1000000ull + 1);
        rc = ms_conn_wait(c, ms);
        if (rc < 0)
            return rc;
        if (rc > 0) {
            rc = ms_conn_fill(c);
            if (rc < 0)
                return rc;
        }
    }
}

int ms_ipc_request(const char *sock_path, int timeout_ms, const struct ms_msg *req,
                   struct ms_msg *reply)
{
    int fd;
    int rc = ms_ipc_connect(sock_path, timeout_ms, &fd);
    if (rc)
        return rc;
    struct ms_conn c;
    ms_conn_init(&c, fd, 0);
    rc = ms_conn_request(&c, timeout_ms, req, reply);
    if (rc == MS_OK) {
        struct ms_msg bye;
        ms_msg_init(&bye, MS_MSG_BYE);
        ms_conn_send(&c, &bye); /* best effort: the daemon also handles a plain close */
    }
    int e = errno;
    ms_conn_fini(&c);
    errno = e;
    return rc;
}
