/*
 * log.h - the daemon's log sink: one line per event, with a timestamp, to stderr or a file.
 *
 * Design
 *   Levels error < warn < info < debug; the default shows warnings and errors only (quiet by
 *   default). Each line is "2026-12-02T12:49:03.123 mschedd[1234] warn: text" and is written
 *   with one write(2) so lines from a daemon and its shell tests do not interleave mid-line.
 *   ms_log_reopen() re-opens the file after a rotation (SIGHUP). Under systemd, when stderr is
 *   the journal ($JOURNAL_STREAM), a line is "<4>warn: text" instead: journald stamps it.
 *
 *   Rate limit: each call site (its format string) writes at most 20 lines per 10 s window at
 *   levels error to info; the rest are counted and summed up in one "N similar lines
 *   suppressed" line when the window ends (ms_log_tick, called from the event loop, says it
 *   for a site that fell silent; ms_log_close for every site). Debug lines are not limited,
 *   nor ms_log_unlimited's.
 *
 * Not thread-safe: the daemon has one thread.
 */
#ifndef MS_DAEMON_LOG_H
#define MS_DAEMON_LOG_H

#include "ipc/conf.h"

#include <stdbool.h>

/* Log to path (append; NULL or "" = stderr). Errors: MS_E_IO (errno set). */
int ms_log_open(const char *path);
int ms_log_reopen(void);
void ms_log_close(void);
void ms_log_set_level(enum ms_log_level level);
/* Whether stderr is $JOURNAL_STREAM; if so, lines written to stderr get a "<N>" priority prefix
 * and no time or pid (journald adds them). Call after the log's descriptor is settled. */
bool ms_log_detect_journal(void);
bool ms_log_enabled(enum ms_log_level level);
void ms_log(enum ms_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Not rate-limited: for lines bounded by the daemon's own pace (a switch), never a client's. */
void ms_log_unlimited(enum ms_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Write the summaries of windows that have ended. */
void ms_log_tick(void);

#define ms_log_error(...) ms_log(MS_LOG_ERROR, __VA_ARGS__)
#define ms_log_warn(...) ms_log(MS_LOG_WARN, __VA_ARGS__)
#define ms_log_info(...) ms_log(MS_LOG_INFO, __VA_ARGS__)
#define ms_log_debug(...) ms_log(MS_LOG_DEBUG, __VA_ARGS__)

#endif /* MS_DAEMON_LOG_H */
