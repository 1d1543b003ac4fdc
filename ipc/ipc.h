/*
 * ipc.h - the socket side of the protocol, shared by the daemon, the CLI and the shim: where the
 * daemon's socket lives, connecting with a timeout, and framed, nonblocking send and receive of
 * ms_msg (core/proto.h) with partial reads and writes handled.
 *
 * Design
 *   One Unix stream socket per physical GPU, named by the GPU's UUID so that every process
 *   reaches the same daemon whatever ordinal CUDA_VISIBLE_DEVICES or a container gives the
 *   GPU: $MSCHED_SOCKET when set (one path for every GPU), else gpu-<uuid>.sock in the socket
 *   directory: $MSCHED_SOCKET_DIR, else $XDG_RUNTIME_DIR/msched, else /tmp/msched-<uid>.
 * gpu<N>.sock, the index name, is a symbolic link to it made by the daemon (N: the GPU's index with
 * every GPU visible), or the socket itself for a daemon that knows no UUID (no CUDA driver answered
 * it). The directory is created 0700 (0750 for a socket group) by the daemon, which refuses one it
 *   does not own or that others can write, sticky or not.
 *
 *   Trust (docs/daemon.md, "Threat model"). A client connects only to a daemon it trusts: the
 *   socket's directory and file must belong to the user, root or the service user named by
 *   $MSCHED_SERVICE_USER, the directory must be writable by nobody else (unless sticky, like
 *   /tmp, where the file's owner decides), and the process listening (SO_PEERCRED) must run
 *   as one of those users. Anything else is refused before a byte is sent, so a squatter never
 *   learns a client's pid, name or allocations and cannot hang it. A link (the index name) is
 *   followed once, only to a bare name in its own directory, and the checks judge the socket
 *   it leads to.
 *
 *   A connection (struct ms_conn) owns a nonblocking fd and two buffers. Sending encodes the
 *   frame onto the output buffer and writes as much as the socket takes; the rest waits for
 *   ms_conn_flush (the owner polls for POLLOUT while ms_conn_out_pending). The output buffer is
 *   bounded: a peer that stops reading makes ms_conn_send fail with MS_E_NOSPACE instead of
 *   growing the sender's memory. Receiving reads at most one maximal frame ahead, so a peer can
 *   never make the reader hold more than MS_PROTO_MAX_FRAME plus one read's worth of bytes.
 *
 *   Sequence numbers: ms_conn_send gives a message with seq 0 the connection's next number
 *   (starting at 1); a reply keeps the seq of the request it answers. Each direction numbers
 *   its own messages, so a reply is recognised by its seq and its type together (STATUS for
 *   STATUS_REQ, ...), or is an ERROR with the request's seq (or seq 0: a frame the daemon could
 *   not even decode).
 *
 *   Everything here is async-signal-unsafe but thread-compatible: one thread per connection at a
 *   time. No global state but one flag (ms_ipc_connect says a refusal once per process); safe
 *   to compile with -fPIC into the shim.
 *
 * Errors: MS_E_IO (a system call failed; errno is kept), MS_E_NOTFOUND (no daemon listening),
 * MS_E_NOSPACE (output bound exceeded, or a path too long for a socket), MS_E_PARSE and
 * MS_E_VERSION from the decoder, MS_E_NOMEM.
 */
#ifndef MS_IPC_H
#define MS_IPC_H

#include "core/proto.h"

#include <stdbool.h>
#include <stddef.h>

#define MS_IPC_PATH_MAX 108 /* sizeof(sockaddr_un.sun_path) on Linux */
#define MS_IPC_READ_CHUNK 65536
#define MS_IPC_UUID_MAX 48 /* "GPU-" + 36 characters + NUL, rounded up */

/*
 * The socket path for GPU index `gpu` (gpu<N>.sock, rules above) into buf. Errors:
 * MS_E_NOSPACE (too long for a Unix socket address).
 */
int ms_ipc_socket_path(unsigned gpu, char *buf, size_t len);

/* The socket path for the GPU with this UUID (gpu-<uuid>.sock, or $MSCHED_SOCKET). Errors:
 * MS_E_INVAL (not a UUID), MS_E_NOSPACE. */
int ms_ipc_uuid_socket_path(const char *uuid, char *buf, size_t len);

/* The socket directory ($MSCHED_SOCKET_DIR, else $XDG_RUNTIME_DIR/msched, else
 * /tmp/msched-<uid>). */
int ms_ipc_socket_dir(char *buf, size_t len);

/* A UUID as written ("GPU-" or "MIG-" and 8-4-4-4-12 hexadecimal digits, or the digits
 * alone) into its 36 lower-case characters (len >= 37). Errors: MS_E_INVAL. */
int ms_ipc_uuid_hex(const char *uuid, char *hex, size_t len);

/* The driver's 16 UUID bytes as nvidia-smi writes them: "GPU-xxxxxxxx-xxxx-...". */
void ms_ipc_uuid_format(const unsigned char bytes[16], char *out, size_t len);

/* Whether a daemon's socket exists: $MSCHED_SOCKET, or any gpu*.sock in the directory. */
bool ms_ipc_any_socket(void);

/*
 * Make link_path a symbolic link to sock_path's name (both in the same directory), replacing
 * a link already there (atomically), or a socket whose daemon is gone (nobody holds its
 * <link_path>.lock); anything else is left alone (MS_E_BUSY).
 * ms_ipc_unlink_link removes link_path only while it still leads to sock_path.
 * Errors: MS_E_INVAL (another directory), MS_E_IO (errno), MS_E_NOSPACE.
 */
int ms_ipc_link_socket(const char *sock_path, const char *link_path);
void ms_ipc_unlink_link(const char *sock_path, const char *link_path);

/*
 * Create the socket's parent directory if missing (one level only: mode 0700, or 0750 and
 * group gid when gid >= 0) and check, through a descriptor opened with O_NOFOLLOW, that it is
 * a directory owned by this process's effective uid that nobody else may write (a sticky bit
 * does not make a shared directory acceptable). With gid >= 0 an existing directory is given
 * to the group, mode 0750. Errors: MS_E_IO (errno set), MS_E_STATE (not a directory, another
 * owner, writable by others: why says which), MS_E_NOSPACE.
 */
int ms_ipc_prepare_dir(const char *sock_path, char *why, size_t whylen); /* gid -1 */
int ms_ipc_prepare_dir_group(const char *sock_path, long gid, char *why, size_t whylen);

/*
 * Listen on sock_path (nonblocking, close-on-exec, mode 0600, or 0660 and group gid when gid >=
 * 0). A stale socket at the path is removed first (the caller must hold the daemon lock); any
 * other kind of file is left alone and refused (MS_E_IO, errno EEXIST). Errors: MS_E_IO,
 * MS_E_NOSPACE.
 */
int ms_ipc_listen(const char *sock_path, int *out_fd); /* gid -1 */
int ms_ipc_listen_group(const char *sock_path, long gid, int *out_fd);

/*
 * Connect to a trusted daemon (above) on sock_path within timeout_ms (< 0: no limit). The fd
 * is nonblocking and close-on-exec. Errors: MS_E_NOTFOUND (no such socket or directory, or
 * nobody listening), MS_E_STATE (untrusted: its directory, its file or its listener belongs
 * to someone else; why has one line naming the path and the owner), MS_E_IO (including the
 * timeout; errno ETIMEDOUT), MS_E_NOSPACE.
 */
int ms_ipc_connect_why(const char *sock_path, int timeout_ms, int *out_fd, char *why,
                       size_t whylen);

/*
 * The same, for callers with nowhere to show why (the shim logs only when verbose): an
 * untrusted socket is a security refusal the user must see, so its line goes to stderr
 * ("msched: refusing the daemon socket ..."), once per process, and errno is EACCES.
 */
int ms_ipc_connect(const char *sock_path, int timeout_ms, int *out_fd);

struct ms_conn {
    int fd;
    struct ms_buf in;  /* received, not yet decoded */
    struct ms_buf out; /* encoded, out[out_off..] not yet written */
    size_t out_off;
    size_t out_max; /* bound on unwritten bytes; 0 = unbounded */
    uint32_t seq;   /* last sequence number given out */
    bool eof;       /* the peer closed its side */
    uint64_t bytes_in, bytes_out, msgs_in, msgs_out;
};

/* Take ownership of fd (nonblocking). out_max 0 = no bound. */
void ms_conn_init(struct ms_conn *c, int fd, size_t out_max);
/* Close the fd (if >= 0) and free the buffers. */
void ms_conn_fini(struct ms_conn *c);

/*
 * Encode m (seq 0 gets the next number, written back into m->seq) and write what the socket
 * takes. Errors: MS_E_NOSPACE (the unwritten bytes would exceed out_max: nothing queued),
 * MS_E_INVAL (m is not a valid message), MS_E_IO (the socket failed), MS_E_NOMEM.
 */
int ms_conn_send(struct ms_conn *c, struct ms_msg *m);

/* Write queued bytes. Returns 0 when nothing is left, 1 when bytes remain, or MS_E_IO. */
int ms_conn_flush(struct ms_conn *c);
bool ms_conn_out_pending(const struct ms_conn *c);

/*
 * Read what is available, without going beyond one maximal frame ahead. Returns the bytes
 * read (0 when none were available or the buffer is full), or MS_E_IO; sets c->eof when the
 * peer closed (then returns 0).
 */
int ms_conn_fill(struct ms_conn *c);

/*
 * Decode the next buffered frame: 1 (*out filled; free it with ms_msg_free), 0 (need more
 * bytes), or the decoder's error (the stream is unusable: close it).
 */
int ms_conn_next(struct ms_conn *c, struct ms_msg *out);

/* Wait until the fd is readable (or writable too when out bytes are pending), up to
 * timeout_ms. Returns 1 ready, 0 timeout, MS_E_IO. */
int ms_conn_wait(struct ms_conn *c, int timeout_ms);

/*
 * One request, one reply, on a fresh connection: connect to sock_path, send req, wait for its
 * reply (HELLO, STATUS_REQ, METRICS_REQ, CONFIG_GET/SET; other frames are skipped), close. The
 * reply may be an ERROR message: check reply->type. Errors: those of ms_ipc_connect; MS_E_IO
 * (including the timeout and the daemon closing without answering); MS_E_PARSE / MS_E_VERSION (a
 * bad reply).
 */
int ms_ipc_request(const char *sock_path, int timeout_ms, const struct ms_msg *req,
                   struct ms_msg *reply);

/* The same on an open connection (kept open afterwards). */
int ms_conn_request(struct ms_conn *c, int timeout_ms, const struct ms_msg *req,
                    struct ms_msg *reply);

/* Monotonic clock in nanoseconds. */
uint64_t ms_ipc_now_ns(void);

#endif /* MS_IPC_H */
