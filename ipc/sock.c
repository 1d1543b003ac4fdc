/*
 * sock.c - where the daemon's socket lives, and opening it from either end (contract: ipc.h).
 *
 * Connecting is nonblocking from the start so the timeout holds even when the daemon's backlog
 * is full (connect then reports EAGAIN on a Unix socket: we retry until the deadline, since the
 * daemon accepts in its event loop and room frees quickly). ENOENT and ECONNREFUSED mean "no
 * daemon" and are reported as MS_E_NOTFOUND so callers can start one.
 */
#include "ipc/ipc.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

uint64_t ms_ipc_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int ms_ipc_socket_path(unsigned gpu, char *buf, size_t len)
{
    const char *env = getenv("MSCHED_SOCKET");
    int n;
    if (env && *env) {
        n = snprintf(buf, len, "%s", env);
    } else {
        const char *xdg = getenv("XDG_RUNTIME_DIR");
        if (xdg && *xdg)
            n = snprintf(buf, len, "%s/msched/gpu%u.sock", xdg, gpu);
        else
            n = snprintf(buf, len, "/tmp/msched-%u/gpu%u.sock", (unsigned)getuid(), gpu);
    }
    if (n < 0 || (size_t)n >= len || (size_t)n >= MS_IPC_PATH_MAX)
        return MS_E_NOSPACE;
    return MS_OK;
}

int ms_ipc_prepare_dir(const char *sock_path, char *why, size_t whylen)
{
    char dir[MS_IPC_PATH_MAX + 1];
    if (snprintf(dir, sizeof(dir), "%s", sock_path) >= (int)sizeof(dir))
        return MS_E_NOSPACE;
    char *slash = strrchr(dir, '/');
    if (!slash)
        return MS_OK; /* a relative name in the current directory */
    if (slash == dir)
        return MS_OK; /* directly under / */
    *slash = '\0';
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        if (why && whylen)
            snprintf(why, whylen, "cannot create %s: %s", dir, strerror(errno));
        return MS_E_IO;
    }
    struct stat st;
    if (lstat(dir, &st) != 0) {
        if (why && whylen)
            snprintf(why, whylen, "cannot inspect %s: %s", dir, strerror(errno));
        return MS_E_IO;
    }
    if (!S_ISDIR(st.st_mode)) {
        if (why && whylen)
            snprintf(why, whylen, "%s is not a directory", dir);
        return MS_E_STATE;
    }
    /* Only a directory we created for ourselves needs to be private; an explicit
     * MSCHED_SOCKET in a shared directory (with the sticky bit, like /tmp) is the user's call. */
    if (st.st_uid != getuid() && !(st.st_mode & S_ISVTX)) {
        if (why && whylen)
            snprintf(why, whylen, "%s belongs to uid %u, not to us", dir, (unsigned)st.st_uid);
        return MS_E_STATE;
    }
    if ((st.st_mode & 022) && !(st.st_mode & S_ISVTX)) {
        if (why && whylen)
            snprintf(why, whylen, "%s is writable by others (mode %o)", dir,
                     (unsigned)(st.st_mode & 07777));
        return MS_E_STATE;
    }
    return MS_OK;
}

static int make_addr(const char *path, struct sockaddr_un *sa)
{
    memset(sa, 0, sizeof(*sa));
    sa->sun_family = AF_UNIX;
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof(sa->sun_path))
        return MS_E_NOSPACE;
    memcpy(sa->sun_path, path, n + 1);
    return MS_OK;
}

int ms_ipc_listen(const char *sock_path, int *out_fd)
{
    struct sockaddr_un sa;
    int rc = make_addr(sock_path, &sa);
    if (rc)
        return rc;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return MS_E_IO;
    /* A stale socket from a daemon that died (the caller holds the lock); never anything else. */
    struct stat st;
    if (lstat(sock_path, &st) == 0) {
        if (!S_ISSOCK(st.st_mode)) {
            close(fd);
            errno = EEXIST;
            return MS_E_IO;
        }
        unlink(sock_path);
    }
    mode_t old = umask(0177);
    int b = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
    umask(old);
    if (b != 0 || listen(fd, 64) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return MS_E_IO;
    }
    *out_fd = fd;
    return MS_OK;
}

int ms_ipc_connect(const char *sock_path, int timeout_ms, int *out_fd)
{
    struct sockaddr_un sa;
    int rc = make_addr(sock_path, &sa);
    if (rc)
        return rc;
    uint64_t deadline =
        timeout_ms < 0 ? UINT64_MAX : ms_ipc_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    for (;;) {
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
            return MS_E_IO;
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
            *out_fd = fd;
            return MS_OK;
        }
        int e = errno;
        if (e == EINPROGRESS) {
            /* Not expected on a Unix socket, but handled: wait for writability. */
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            uint64_t now = ms_ipc_now_ns();
            int ms = deadline == UINT64_MAX ? -1
                     : now >= deadline      ? 0
                                            : (int)((deadline - now) / 1000000ull + 1);
            int pr = poll(&p, 1, ms);
            int soerr = 0;
            socklen_t sl = sizeof(soerr);
            if (pr == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && !soerr) {
                *out_fd = fd;
                return MS_OK;
            }
            e = pr == 0 ? ETIMEDOUT : soerr ? soerr : errno;
        }
        close(fd);
        if (e == ENOENT || e == ECONNREFUSED || e == ENOTDIR) {
            errno = e;
            return MS_E_NOTFOUND;
        }
        if (e != EAGAIN || ms_ipc_now_ns() >= deadline) {
            errno = e == EAGAIN ? ETIMEDOUT : e;
            return MS_E_IO;
        }
        struct timespec ts = {.tv_sec = 0, .tv_nsec = 5000000}; /* backlog full: retry */
        nanosleep(&ts, NULL);
    }
}
