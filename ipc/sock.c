/*
 * sock.c - where the daemon's socket lives, and opening it from either end (contract: ipc.h).
 *
 * Connecting is nonblocking from the start so the timeout holds even when the daemon's backlog
 * is full (connect then reports EAGAIN on a Unix socket: we retry until the deadline, since the
 * daemon accepts in its event loop and room frees quickly). ENOENT and ECONNREFUSED mean "no
 * daemon" and are reported as MS_E_NOTFOUND so callers can start one.
 */
#include "ipc/ipc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pwd.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
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

int ms_ipc_socket_dir(char *buf, size_t len)
{
    const char *dir = getenv("MSCHED_SOCKET_DIR");
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    int n;
    if (dir && *dir)
        n = snprintf(buf, len, "%s", dir);
    else if (xdg && *xdg)
        n = snprintf(buf, len, "%s/msched", xdg);
    else
        n = snprintf(buf, len, "/tmp/msched-%u", (unsigned)getuid());
    if (n < 0 || (size_t)n >= len || (size_t)n >= MS_IPC_PATH_MAX)
        return MS_E_NOSPACE;
    return MS_OK;
}

/* buf = $MSCHED_SOCKET, or the default directory + "/" + name. */
static int socket_named(const char *name, char *buf, size_t len)
{
    const char *env = getenv("MSCHED_SOCKET");
    int n;
    if (env && *env) {
        n = snprintf(buf, len, "%s", env);
    } else {
        char dir[MS_IPC_PATH_MAX + 1];
        if (ms_ipc_socket_dir(dir, sizeof(dir)) != MS_OK)
            return MS_E_NOSPACE;
        n = snprintf(buf, len, "%s/%s", dir, name);
    }
    if (n < 0 || (size_t)n >= len || (size_t)n >= MS_IPC_PATH_MAX)
        return MS_E_NOSPACE;
    return MS_OK;
}

int ms_ipc_socket_path(unsigned gpu, char *buf, size_t len)
{
    char name[32];
    snprintf(name, sizeof(name), "gpu%u.sock", gpu);
    return socket_named(name, buf, len);
}

int ms_ipc_uuid_socket_path(const char *uuid, char *buf, size_t len)
{
    char hex[MS_IPC_UUID_MAX];
    if (ms_ipc_uuid_hex(uuid, hex, sizeof(hex)) != MS_OK)
        return MS_E_INVAL;
    char name[MS_IPC_UUID_MAX + 16];
    snprintf(name, sizeof(name), "gpu-%s.sock", hex);
    return socket_named(name, buf, len);
}

static bool is_hex(char ch)
{
    return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f') || (ch >= 'A' && ch <= 'F');
}

int ms_ipc_uuid_hex(const char *uuid, char *hex, size_t len)
{
    if (!uuid || len < 37)
        return MS_E_INVAL;
    if (strncmp(uuid, "GPU-", 4) == 0 || strncmp(uuid, "MIG-", 4) == 0)
        uuid += 4;
    if (strlen(uuid) != 36)
        return MS_E_INVAL;
    for (size_t i = 0; i < 36; i++) {
        bool dash = i == 8 || i == 13 || i == 18 || i == 23;
        if (dash ? uuid[i] != '-' : !is_hex(uuid[i]))
            return MS_E_INVAL;
        hex[i] = (uuid[i] >= 'A' && uuid[i] <= 'F') ? (char)(uuid[i] - 'A' + 'a') : uuid[i];
    }
    hex[36] = '\0';
    return MS_OK;
}

void ms_ipc_uuid_format(const unsigned char bytes[16], char *out, size_t len)
{
    const unsigned char *b = bytes;
    snprintf(out, len, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
             b[14], b[15]);
}

/* A daemon's socket name: gpuN.sock or gpu-<uuid>.sock. */
static bool daemon_name(const char *name)
{
    size_t n = strlen(name);
    return n >= 9 && strncmp(name, "gpu", 3) == 0 && strcmp(name + n - 5, ".sock") == 0;
}

bool ms_ipc_any_socket(void)
{
    struct stat st;
    const char *env = getenv("MSCHED_SOCKET");
    if (env && *env)
        return stat(env, &st) == 0 && S_ISSOCK(st.st_mode);
    char dir[MS_IPC_PATH_MAX + 1], path[2 * MS_IPC_PATH_MAX + 2];
    if (ms_ipc_socket_dir(dir, sizeof(dir)) != MS_OK)
        return false;
    DIR *d = opendir(dir);
    if (!d)
        return false;
    bool found = false;
    for (struct dirent *e; !found && (e = readdir(d));) {
        if (!daemon_name(e->d_name))
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        found = stat(path, &st) == 0 && S_ISSOCK(st.st_mode);
    }
    closedir(d);
    return found;
}

#define WHY(...)                                                                                   \
    do {                                                                                           \
        if (why && whylen)                                                                         \
            snprintf(why, whylen, __VA_ARGS__);                                                    \
    } while (0)

/* The directory part of path into dir ("." for a bare name). */
static int dir_of(const char *path, char *dir, size_t len)
{
    if (snprintf(dir, len, "%s", path) >= (int)len)
        return MS_E_NOSPACE;
    char *slash = strrchr(dir, '/');
    if (!slash)
        snprintf(dir, len, ".");
    else if (slash == dir)
        dir[1] = '\0'; /* directly under / */
    else
        *slash = '\0';
    return MS_OK;
}

int ms_ipc_prepare_dir(const char *sock_path, char *why, size_t whylen)
{
    return ms_ipc_prepare_dir_group(sock_path, -1, why, whylen);
}

int ms_ipc_prepare_dir_group(const char *sock_path, long gid, char *why, size_t whylen)
{
    char dir[MS_IPC_PATH_MAX + 1];
    if (dir_of(sock_path, dir, sizeof(dir)) != MS_OK)
        return MS_E_NOSPACE;
    mode_t want = gid >= 0 ? 0750 : 0700;
    bool created = mkdir(dir, want) == 0;
    if (!created && errno != EEXIST) {
        WHY("cannot create %s: %s", dir, strerror(errno));
        return MS_E_IO;
    }
    /* Everything below goes through one descriptor, so a directory swapped for a link (or
     * anything else) between the checks and the changes is never what gets changed. */
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOTDIR || errno == ELOOP) {
            WHY("%s is not a directory", dir);
            return MS_E_STATE;
        }
        WHY("cannot open %s: %s", dir, strerror(errno));
        return MS_E_IO;
    }
    struct stat st;
    int rc = MS_OK;
    if (fstat(fd, &st) != 0) {
        WHY("cannot inspect %s: %s", dir, strerror(errno));
        rc = MS_E_IO;
    } else if (st.st_uid != geteuid()) {
        /* Someone else made it: whatever they left in it (a link where the log goes, a
         * listener of their own) is theirs to control. The sticky bit does not change that. */
        WHY("%s belongs to uid %u, not to this daemon's uid %u; remove it or use another "
            "--socket",
            dir, (unsigned)st.st_uid, (unsigned)geteuid());
        rc = MS_E_STATE;
    } else if (st.st_mode & 022) {
        WHY("%s is writable by others (mode %o); the socket needs a directory only its "
            "daemon may write",
            dir, (unsigned)(st.st_mode & 07777));
        rc = MS_E_STATE;
    } else if (gid >= 0 && ((long)st.st_gid != gid || (st.st_mode & 07777) != want)) {
        if (fchown(fd, (uid_t)-1, (gid_t)gid) != 0 || fchmod(fd, want) != 0) {
            WHY("cannot give %s to group %ld: %s", dir, gid, strerror(errno));
            rc = MS_E_IO;
        }
    } else if (created && (st.st_mode & 07777) != want && fchmod(fd, want) != 0) {
        WHY("cannot set the mode of %s: %s", dir, strerror(errno));
        rc = MS_E_IO;
    }
    close(fd);
    return rc;
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
    return ms_ipc_listen_group(sock_path, -1, out_fd);
}

int ms_ipc_listen_group(const char *sock_path, long gid, int *out_fd)
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
    /* Born 0600; opened to the group only once it belongs to the group (the directory is the
     * daemon's own, so nobody can swap the file meanwhile). */
    if (b == 0 && gid >= 0 &&
        (chown(sock_path, (uid_t)-1, (gid_t)gid) != 0 || chmod(sock_path, 0660) != 0))
        b = -1;
    if (b != 0 || listen(fd, 128) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return MS_E_IO;
    }
    *out_fd = fd;
    return MS_OK;
}

/* The last component of path. */
static const char *base_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* A socket whose daemon is gone: nobody holds its lock (<path>.lock, as the daemon takes it). */
static bool stale_socket(const char *path)
{
    char lock[MS_IPC_PATH_MAX + 16];
    if (snprintf(lock, sizeof(lock), "%s.lock", path) >= (int)sizeof(lock))
        return false;
    int fd = open(lock, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return errno == ENOENT;
    bool free = flock(fd, LOCK_EX | LOCK_NB) == 0;
    close(fd); /* releases the lock, if it was taken */
    return free;
}

int ms_ipc_link_socket(const char *sock_path, const char *link_path)
{
    char sdir[MS_IPC_PATH_MAX + 1], ldir[MS_IPC_PATH_MAX + 1], tmp[MS_IPC_PATH_MAX + 32];
    if (dir_of(sock_path, sdir, sizeof(sdir)) != MS_OK ||
        dir_of(link_path, ldir, sizeof(ldir)) != MS_OK)
        return MS_E_NOSPACE;
    if (strcmp(sdir, ldir) != 0) {
        errno = EXDEV;
        return MS_E_INVAL;
    }
    struct stat st;
    if (lstat(link_path, &st) == 0 && !S_ISLNK(st.st_mode) &&
        !(S_ISSOCK(st.st_mode) && stale_socket(link_path))) {
        errno = EEXIST; /* a daemon's own socket (one named by its index): left alone */
        return MS_E_BUSY;
    }
    /* A new link beside it, renamed over the old one: the name never points nowhere. */
    if (snprintf(tmp, sizeof(tmp), "%s.%d.tmp", link_path, (int)getpid()) >= (int)sizeof(tmp))
        return MS_E_NOSPACE;
    unlink(tmp);
    if (symlink(base_of(sock_path), tmp) != 0)
        return MS_E_IO;
    if (rename(tmp, link_path) != 0) {
        int e = errno;
        unlink(tmp);
        errno = e;
        return MS_E_IO;
    }
    return MS_OK;
}

void ms_ipc_unlink_link(const char *sock_path, const char *link_path)
{
    char target[MS_IPC_PATH_MAX + 1];
    ssize_t n = readlink(link_path, target, sizeof(target) - 1);
    if (n <= 0)
        return;
    target[n] = '\0';
    if (strcmp(target, base_of(sock_path)) == 0)
        unlink(link_path); /* still ours: another daemon may have taken the name since */
}

/* ---- whom a client trusts ------------------------------------------------------------------- */

/* The uid MSCHED_SERVICE_USER names (a number or a user name), or -1. */
static long service_uid(void)
{
    const char *u = getenv("MSCHED_SERVICE_USER");
    if (!u || !*u)
        return -1;
    char *end;
    errno = 0;
    unsigned long v = strtoul(u, &end, 10);
    if (*end == '\0' && errno == 0 && v < UINT32_MAX)
        return (long)v;
    struct passwd pw, *res = NULL;
    char buf[1024];
    if (getpwnam_r(u, &pw, buf, sizeof(buf), &res) == 0 && res)
        return (long)res->pw_uid;
    return -1;
}

static bool trusted(uid_t uid)
{
    if (uid == 0 || uid == geteuid())
        return true;
    long svc = service_uid();
    return svc >= 0 && (uid_t)svc == uid;
}

static void say_untrusted(const char *why)
{
    static atomic_flag said = ATOMIC_FLAG_INIT;
    if (atomic_flag_test_and_set(&said))
        return;
    char line[600];
    int n = snprintf(line, sizeof(line), "msched: %s\n", why);
    if (n > 0) {
        ssize_t w = write(2, line, MS_MIN((size_t)n, sizeof(line) - 1));
        (void)w;
    }
}

/*
 * Before connecting: the socket's directory must belong to someone trusted and be writable by
 * nobody else (or be sticky, like /tmp, when the socket file itself is trusted). Returns
 * MS_E_NOTFOUND when there is nothing to connect to, MS_E_STATE (why says) when it is untrusted.
 */
static int check_path(const char *sock_path, char *why, size_t whylen)
{
    char dir[MS_IPC_PATH_MAX + 1];
    if (dir_of(sock_path, dir, sizeof(dir)) != MS_OK)
        return MS_E_NOSPACE;
    struct stat ds, ss;
    if (stat(dir, &ds) != 0 || lstat(sock_path, &ss) != 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return MS_E_NOTFOUND;
        return MS_E_IO;
    }
    if (!trusted(ds.st_uid)) {
        WHY("refusing the daemon socket %s: its directory belongs to uid %u (not this user, root "
            "or MSCHED_SERVICE_USER)",
            sock_path, (unsigned)ds.st_uid);
        return MS_E_STATE;
    }
    if ((ds.st_mode & 022) && !(ds.st_mode & S_ISVTX)) {
        WHY("refusing the daemon socket %s: anyone may write its directory (mode %o)", sock_path,
            (unsigned)(ds.st_mode & 07777));
        return MS_E_STATE;
    }
    if (!trusted(ss.st_uid)) {
        WHY("refusing the daemon socket %s: it belongs to uid %u (not this user, root or "
            "MSCHED_SERVICE_USER)",
            sock_path, (unsigned)ss.st_uid);
        return MS_E_STATE;
    }
    return MS_OK;
}

/* After connecting: the process that listens must be trusted too. */
static int check_peer(int fd, const char *sock_path, char *why, size_t whylen)
{
    struct ucred cred;
    socklen_t cl = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0) {
        WHY("refusing the daemon socket %s: cannot learn who listens on it: %s", sock_path,
            strerror(errno));
        return MS_E_STATE;
    }
    if (!trusted(cred.uid)) {
        WHY("refusing the daemon socket %s: its listener (pid %d) runs as uid %u (not this "
            "user, root or MSCHED_SERVICE_USER)",
            sock_path, (int)cred.pid, (unsigned)cred.uid);
        return MS_E_STATE;
    }
    return MS_OK;
}

int ms_ipc_connect(const char *sock_path, int timeout_ms, int *out_fd)
{
    char why[400] = "";
    int rc = ms_ipc_connect_why(sock_path, timeout_ms, out_fd, why, sizeof(why));
    if (rc == MS_E_STATE) {
        say_untrusted(why);
        errno = EACCES;
    }
    return rc;
}

/*
 * A daemon's index name (gpu0.sock) is a link to its UUID name in the same directory. The
 * checks must hold for what is connected to, so a link is followed here, once, and only to a
 * bare name beside it (in the same directory, whose trust check_path then judges); the link
 * itself must belong to someone trusted (in a sticky directory anyone may make one).
 */
static int resolve_link(const char *sock_path, char *out, size_t len, char *why, size_t whylen)
{
    struct stat ls;
    if (lstat(sock_path, &ls) != 0 || !S_ISLNK(ls.st_mode)) {
        if (snprintf(out, len, "%s", sock_path) >= (int)len)
            return MS_E_NOSPACE;
        return MS_OK;
    }
    char target[MS_IPC_PATH_MAX + 1], dir[MS_IPC_PATH_MAX + 1];
    ssize_t n = readlink(sock_path, target, sizeof(target) - 1);
    if (n <= 0)
        return MS_E_IO;
    target[n] = '\0';
    if (strchr(target, '/') || strcmp(target, ".") == 0 || strcmp(target, "..") == 0) {
        WHY("refusing the daemon socket %s: it is a link out of its directory (to %s)", sock_path,
            target);
        return MS_E_STATE;
    }
    if (!trusted(ls.st_uid)) {
        WHY("refusing the daemon socket %s: it is a link that belongs to uid %u (not this "
            "user, root or MSCHED_SERVICE_USER)",
            sock_path, (unsigned)ls.st_uid);
        return MS_E_STATE;
    }
    if (dir_of(sock_path, dir, sizeof(dir)) != MS_OK ||
        snprintf(out, len, "%s/%s", dir, target) >= (int)MS_MIN(len, (size_t)MS_IPC_PATH_MAX))
        return MS_E_NOSPACE;
    struct stat ts;
    if (lstat(out, &ts) == 0 && S_ISLNK(ts.st_mode)) {
        WHY("refusing the daemon socket %s: its link leads to another link", sock_path);
        return MS_E_STATE;
    }
    return MS_OK;
}

int ms_ipc_connect_why(const char *sock_path_in, int timeout_ms, int *out_fd, char *why,
                       size_t whylen)
{
    char sock_path[MS_IPC_PATH_MAX + 1];
    int rc = resolve_link(sock_path_in, sock_path, sizeof(sock_path), why, whylen);
    if (rc)
        return rc;
    struct sockaddr_un sa;
    rc = make_addr(sock_path, &sa);
    if (rc)
        return rc;
    rc = check_path(sock_path, why, whylen);
    if (rc == MS_E_NOTFOUND)
        errno = ENOENT;
    if (rc)
        return rc;
    uint64_t deadline =
        timeout_ms < 0 ? UINT64_MAX : ms_ipc_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    for (;;) {
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
            return MS_E_IO;
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
            rc = check_peer(fd, sock_path, why, whylen);
            if (rc) {
                close(fd);
                return rc;
            }
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
                rc = check_peer(fd, sock_path, why, whylen);
                if (rc) {
                    close(fd);
                    return rc;
                }
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
