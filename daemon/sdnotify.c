/*
 * sdnotify.c - the service manager's side channels, without libsystemd: readiness
 * notification (sd_notify's datagram protocol) and socket activation (LISTEN_FDS).
 *
 * Design
 *   sd_notify: when $NOTIFY_SOCKET names a Unix datagram socket (a path, or "@name" for the
 *   abstract namespace) the daemon sends it newline-separated "KEY=VALUE" assignments in one
 *   datagram: READY=1 once it listens, RELOADING=1 with MONOTONIC_USEC while SIGHUP re-reads
 *   the configuration (then READY=1 again), STOPPING=1 when it shuts down, STATUS= a line for
 *   `systemctl status`. Without $NOTIFY_SOCKET nothing is sent. A failed send is ignored: the
 *   manager, not the daemon, decides what a missing notification means.
 *
 *   Socket activation: when $LISTEN_PID is this process and $LISTEN_FDS is at least 1, fd 3
 *   (SD_LISTEN_FDS_START) is a listening socket the manager created and owns. It is used only
 *   if it is a listening Unix stream socket; the variables are removed from the environment
 *   so nothing the daemon might start would take them for its own.
 *
 *   The protocol is small and stable (sd_notify(3), sd_listen_fds(3)); writing it here avoids
 *   a libsystemd dependency for machines without systemd, where all of this is inert.
 */
#include "daemon/daemon.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define LISTEN_FDS_START 3

int ms_sd_notify(const char *state)
{
    const char *path = getenv("NOTIFY_SOCKET");
    if (!path || !path[0])
        return MS_OK;
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    size_t n = strlen(path);
    if (n >= sizeof(sa.sun_path) || (path[0] != '/' && path[0] != '@'))
        return MS_E_INVAL;
    memcpy(sa.sun_path, path, n);
    if (path[0] == '@')
        sa.sun_path[0] = '\0'; /* the abstract namespace */
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return MS_E_IO;
    ssize_t w;
    do {
        w = sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sa, len);
    } while (w < 0 && errno == EINTR);
    close(fd);
    return w < 0 ? MS_E_IO : MS_OK;
}

int ms_sd_notify_reloading(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    char msg[96];
    snprintf(msg, sizeof(msg), "RELOADING=1\nMONOTONIC_USEC=%llu",
             (unsigned long long)ts.tv_sec * 1000000ull + (unsigned long long)ts.tv_nsec / 1000);
    return ms_sd_notify(msg);
}

int ms_sd_listen_fd(char *path, size_t len)
{
    const char *pid = getenv("LISTEN_PID"), *fds = getenv("LISTEN_FDS");
    if (!pid || !fds)
        return -1;
    char *end;
    long p = strtol(pid, &end, 10);
    if (*end || p != (long)getpid())
        return -1;
    long n = strtol(fds, &end, 10);
    unsetenv("LISTEN_PID");
    unsetenv("LISTEN_FDS");
    unsetenv("LISTEN_FDNAMES");
    if (*end || n < 1)
        return -1;
    int fd = LISTEN_FDS_START;
    int type = 0, acc = 0;
    socklen_t tl = sizeof(type), al = sizeof(acc);
    struct sockaddr_un sa;
    socklen_t sl = sizeof(sa);
    memset(&sa, 0, sizeof(sa));
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) != 0 || type != SOCK_STREAM ||
        getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &al) != 0 || !acc ||
        getsockname(fd, (struct sockaddr *)&sa, &sl) != 0 || sa.sun_family != AF_UNIX ||
        sa.sun_path[0] == '\0')
        return -2;
    if (fcntl(fd, F_SETFD, FD_CLOEXEC) != 0)
        return -2;
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0)
        return -2;
    snprintf(path, len, "%.*s", (int)sizeof(sa.sun_path), sa.sun_path);
    return fd;
}
