/*
 * log.c - the daemon's log sink (contract: log.h).
 *
 * The line is formatted into a stack buffer and written with a single write(2) on a descriptor
 * opened with O_APPEND, so concurrent writers to the same file (a test's shell, a second
 * daemon refusing to start) never split a line. Over-long lines are cut with "...".
 *
 * Rate limit. A hostile client can make one call site fire thousands of times a second (a
 * refused connection, a malformed frame); the log must stay readable and bounded. So every call
 * site (known by its format string) may write MS_LOG_BURST lines per MS_LOG_WINDOW_NS; the rest
 * are counted, and once the window is over one line says "N similar lines suppressed" with the
 * site's format. Debug lines are never limited (they are asked for). The sites are kept in a
 * small table; when it is full the oldest window is closed early.
 *
 * Journal. Under systemd, stderr is a stream to journald, which stamps every line with the
 * time, the pid and a priority itself; $JOURNAL_STREAM names that stream ("DEV:INODE"). When
 * it is the descriptor the log writes to (fd 2), lines carry no time or pid of their own and
 * start with a syslog priority prefix "<N>" (3 error, 4 warn, 6 info, 7 debug) that journald
 * turns into the entry's priority, so `journalctl -p warning` shows warnings and errors.
 */
#include "daemon/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static int log_fd = 2;
static enum ms_log_level log_level = MS_LOG_WARN;
static char log_path[256];
static bool journal; /* fd 2 is $JOURNAL_STREAM (ms_log_detect_journal) */

#define MS_LOG_BURST 20
#define MS_LOG_WINDOW_NS (10 * 1000000000ull)
#define MS_LOG_SITES 32

struct site {
    const char *fmt; /* NULL: free */
    enum ms_log_level level;
    uint64_t since; /* the window's start */
    uint32_t lines, suppressed;
};
static struct site sites[MS_LOG_SITES];

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void write_line(enum ms_log_level level, const char *fmt, va_list ap);

/* Past the limit: the summary lines themselves are at most one per site and window. */
static void write_direct(enum ms_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void write_direct(enum ms_log_level level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    write_line(level, fmt, ap);
    va_end(ap);
}

static void say_suppressed(struct site *st)
{
    if (st->suppressed) {
        /* The site's format is shown as text, never used as a format. */
        write_direct(st->level, "%u similar lines suppressed in %llu s (\"%.120s\")",
                     st->suppressed, (unsigned long long)(MS_LOG_WINDOW_NS / 1000000000ull),
                     st->fmt);
        st->suppressed = 0;
    }
}

/* Whether a line of this site may be written now. */
static bool admit(enum ms_log_level level, const char *fmt)
{
    uint64_t now = mono_ns();
    struct site *st = NULL, *oldest = &sites[0];
    for (size_t i = 0; i < MS_LOG_SITES; i++) {
        if (sites[i].fmt == fmt) {
            st = &sites[i];
            break;
        }
        if (!sites[i].fmt || (oldest->fmt && sites[i].since < oldest->since))
            oldest = &sites[i];
    }
    if (!st) {
        struct site old = *oldest;
        *oldest = (struct site){.fmt = fmt, .level = level, .since = now};
        say_suppressed(&old);
        st = oldest;
    } else if (now - st->since >= MS_LOG_WINDOW_NS) {
        say_suppressed(st);
        st->since = now;
        st->lines = 0;
    }
    if (st->lines >= MS_LOG_BURST) {
        st->suppressed++;
        return false;
    }
    st->lines++;
    return true;
}

void ms_log_unlimited(enum ms_log_level level, const char *fmt, ...)
{
    if (!ms_log_enabled(level))
        return;
    va_list ap;
    va_start(ap, fmt);
    write_line(level, fmt, ap);
    va_end(ap);
}

void ms_log_tick(void)
{
    uint64_t now = mono_ns();
    for (size_t i = 0; i < MS_LOG_SITES; i++) {
        struct site *st = &sites[i];
        if (st->fmt && st->suppressed && now - st->since >= MS_LOG_WINDOW_NS) {
            say_suppressed(st);
            st->since = now;
            st->lines = 0;
        }
    }
}

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
    for (size_t i = 0; i < MS_LOG_SITES; i++)
        say_suppressed(&sites[i]); /* what the ending windows held back */
    if (log_fd > 2)
        close(log_fd);
    log_fd = 2;
}

bool ms_log_detect_journal(void)
{
    journal = false;
    const char *js = getenv("JOURNAL_STREAM");
    unsigned long long dev, ino;
    char extra;
    struct stat st;
    if (js && sscanf(js, "%llu:%llu%c", &dev, &ino, &extra) == 2 && fstat(2, &st) == 0)
        journal = (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
    return journal;
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
    if (level != MS_LOG_DEBUG && !admit(level, fmt))
        return;
    va_list ap;
    va_start(ap, fmt);
    write_line(level, fmt, ap);
    va_end(ap);
}

static void write_line(enum ms_log_level level, const char *fmt, va_list ap)
{
    char line[1024];
    int n;
    if (journal && log_fd == 2) {
        static const int prio[] = {3, 4, 6, 7}; /* error, warn, info, debug */
        n = snprintf(line, sizeof(line), "<%d>%s: ", prio[level <= MS_LOG_DEBUG ? level : 3],
                     ms_log_level_name(level));
    } else {
        struct timeval tv;
        gettimeofday(&tv, NULL);
        struct tm tm;
        localtime_r(&tv.tv_sec, &tm);
        n = (int)strftime(line, sizeof(line), "%Y-%m-%dT%H:%M:%S", &tm);
        n += snprintf(line + n, sizeof(line) - (size_t)n,
                      ".%03d mschedd[%d] %s: ", (int)(tv.tv_usec / 1000), (int)getpid(),
                      ms_log_level_name(level));
    }
    int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
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
