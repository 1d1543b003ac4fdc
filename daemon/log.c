/*
 * log.c - the daemon's log sink (contract: log.h).
 *
 * The line is formatted into a stack buffer and written with a single write(2) on a descriptor
 * opened with O_APPEND, so concurrent writers to the same file (a test's shell, a second
 * daemon refusing to start) never split a line. Over-long lines are cut with "...".
 */
#include "daemon/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static int log_fd = 2;
static enum ms_log_level log_level = MS_LOG_WARN;
static char log_path[256];

int ms_log_open(const char *path)
{
    if (!path || !*path) {
        ms_log_close();
        log_path[0] = '\0';
        return MS_OK;
    }
    /* O_NOFOLLOW: a link planted where the log goes (by whoever could write there) must not
     * make the daemon append to a file of their choosing. */
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return MS_E_IO;
    ms_log_close();
    log_fd = fd;
    snprintf(log_path, sizeof(log_path), "%s", path);
    return MS_OK;
}

int ms_log_reopen(void)
{
    if (!log_path[0])
        return MS_OK;
    char path[sizeof(log_path)];
    memcpy(path, log_path, sizeof(path));
    return ms_log_open(path);
}

void ms_log_close(void)
{
    if (log_fd > 2)
        close(log_fd);
    log_fd = 2;
}

void ms_log_set_level(enum ms_log_level level)
{
    log_level = level;
}

bool ms_log_enabled(enum ms_log_level level)
{
    return level <= log_level;
}

void ms_log(enum ms_log_level level, const char *fmt, ...)
{
    if (!ms_log_enabled(level))
        return;
    char line[1024];
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    localtime_r(&tv.tv_sec, &tm);
    int n = (int)strftime(line, sizeof(line), "%Y-%m-%dT%H:%M:%S", &tm);
    n += snprintf(line + n, sizeof(line) - (size_t)n,
                  ".%03d mschedd[%d] %s: ", (int)(tv.tv_usec / 1000), (int)getpid(),
                  ms_log_level_name(level));
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (m < 0)
        m = 0;
    size_t len = (size_t)n + (size_t)m;
    if (len > sizeof(line) - 2) {
        len = sizeof(line) - 2;
        memcpy(line + len - 3, "...", 3);
    }
    line[len++] = '\n';
    ssize_t w;
    do {
        w = write(log_fd, line, len);
    } while (w < 0 && errno == EINTR);
}
