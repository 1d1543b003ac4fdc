/*
 * log.h - libmsched's bottom layer: its log lines and the wall clock they carry.
 *
 * Design
 *   Two kinds of line, both one write(2) to stderr prefixed "msched[pid]: ", so lines from
 *   several threads or processes never interleave inside a line:
 *     - ms__shim_log: diagnostics, written only when MSCHED_VERBOSE is set
 * (ms__shim_log_configure);
 *     - ms__shim_say: what the user must see whatever the verbosity (a refused call, a daemon
 *       that went away, a setting that was ignored).
 *   Lines are cut at about 1 KiB. Nothing here allocates, locks or calls the driver, so every
 *   other file of the shim may log from any context, a fork child or an exit handler included.
 *
 * Layering: nothing in shim/ is below this file; it includes no other shim header.
 */
#ifndef MS_SHIM_LOG_H
#define MS_SHIM_LOG_H

#include <stdbool.h>
#include <stddef.h>

#if defined(__GNUC__)
#define MS_HIDDEN __attribute__((visibility("hidden")))
#define MS_PRINTF_LIKE(f, a) __attribute__((format(printf, f, a)))
#else
#define MS_HIDDEN
#define MS_PRINTF_LIKE(f, a)
#endif

/* Set once, at the shim's initialisation (MSCHED_VERBOSE set and not "0"). */
MS_HIDDEN void ms__shim_log_configure(bool verbose);
MS_HIDDEN bool ms__shim_verbose(void);

/* One line to stderr, prefixed "msched[pid]: ", only when verbose. */
MS_HIDDEN void ms__shim_log(const char *fmt, ...) MS_PRINTF_LIKE(1, 2);

/* One line to stderr, prefixed "msched[pid]: ", always. */
MS_HIDDEN void ms__shim_say(const char *fmt, ...) MS_PRINTF_LIKE(1, 2);

/* A wall-clock instant (CLOCK_REALTIME) as mschedd's log writes it, in local time
 * ("2026-12-03T17:02:34.500"), so that a shim's line can be matched to the daemon's. Taking
 * the instant is one clock read; format it only for a line that is logged. */
struct timespec;
MS_HIDDEN void ms__shim_wallclock(const struct timespec *at, char *buf, size_t n);

/* Monotonic nanoseconds (CLOCK_MONOTONIC). */
MS_HIDDEN unsigned long long ms__shim_now_ns(void);

/* Log a message the first time this call site is reached. */
#define MS_LOG_ONCE(...)                                                                           \
    do {                                                                                           \
        static int ms_once_;                                                                       \
        if (!__atomic_exchange_n(&ms_once_, 1, __ATOMIC_RELAXED))                                  \
            ms__shim_log(__VA_ARGS__);                                                             \
    } while (0)

#endif /* MS_SHIM_LOG_H */
