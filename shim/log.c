/*
 * log.c - libmsched's log lines and clocks (contract: log.h).
 *
 * A line is formatted into a stack buffer and written with one write(2): no stdio (whose
 * buffers and locks are not safe in a fork child or a signal-driven exit), no allocation.
 */
#include "shim/log.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static bool verbose; /* written once at initialisation, before any thread logs */

void ms__shim_log_configure(bool on)
{
    verbose = on;
}

bool ms__shim_verbose(void)
{
    return verbose;
}

static void vline(const char *fmt, va_list ap)
{
    char buf[1024];
    int n = snprintf(buf, sizeof buf, "msched[%d]: ", (int)getpid());
    if (n < 0)
        return;
    int m = vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
    size_t room = sizeof buf - (size_t)n - 2;
    size_t len = (size_t)n + (m < 0 ? 0 : ((size_t)m < room ? (size_t)m : room));
    buf[len++] = '\n';
    ssize_t w = write(2, buf, len);
    (void)w;
}

void ms__shim_log(const char *fmt, ...)
{
    if (!verbose)
        return;
    va_list ap;
    va_start(ap, fmt);
    vline(fmt, ap);
    va_end(ap);
}

void ms__shim_say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vline(fmt, ap);
    va_end(ap);
}

void ms__shim_wallclock(const struct timespec *at, char *buf, size_t n)
{
    struct tm tm;
    time_t sec = at->tv_sec;
    localtime_r(&sec, &tm);
    size_t k = strftime(buf, n, "%Y-%m-%dT%H:%M:%S", &tm);
    if (k && k + 5 <= n)
        snprintf(buf + k, n - k, ".%03ld", at->tv_nsec / 1000000L);
}

unsigned long long ms__shim_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}
