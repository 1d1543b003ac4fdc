/*
 * cli.h - what the msched CLI's files share: the subcommand descriptor, error reporting, and
 * parsers for the units users type (sizes, durations, lists).
 *
 * Design
 *   One file per subcommand (cli/cmd_<name>.c) exports a `struct ms_cli_cmd`; cli/main.c lists
 *   them in one table, dispatches, and prints help. A subcommand returns its exit status:
 *   0 success, MS_EXIT_RUNTIME (1) when the work itself failed (unreadable or malformed input
 *   file, a budget that cannot work), MS_EXIT_USAGE (2) for a bad command line. Every error is
 *   one line on stderr starting with "msched: ".
 *
 * Ownership: parsers write only their out parameters. Not thread-safe (one CLI thread).
 */
#ifndef MS_CLI_H
#define MS_CLI_H

#include "core/ms.h"

#include <stdbool.h>
#include <stdio.h>

#define MS_VERSION "0.1.0"
#define MS_EXIT_RUNTIME 1
#define MS_EXIT_USAGE 2

struct ms_cli_cmd {
    const char *name;
    const char *summary;               /* one line for `msched help` */
    int (*run)(int argc, char **argv); /* argv[0] is the subcommand name */
    void (*help)(FILE *f);             /* full usage text */
};

extern const struct ms_cli_cmd ms_cmd_sim;
extern const struct ms_cli_cmd ms_cmd_demo;
extern const struct ms_cli_cmd ms_cmd_run;
extern const struct ms_cli_cmd ms_cli_status;
extern const struct ms_cli_cmd ms_cli_top;
extern const struct ms_cli_cmd ms_cli_config;
extern const struct ms_cli_cmd ms_cmd_profile;

/* Find libmsched (<bindir>/../lib/msched) and, with apply, put it in front of this process's
 * environment for the programs it runs next: first on LD_LIBRARY_PATH, or with preload on
 * LD_PRELOAD (cmd_run.c). 0, or MS_EXIT_RUNTIME after saying why. */
int ms_cli_use_shim(bool preload, bool apply);
/* Write len bytes to path atomically: a temporary file beside it (its directories made, 0700),
 * written, synced, then renamed over path (cmd_profile.c). MS_OK, MS_E_INVAL (path too long),
 * MS_E_IO (errno says why). */
int ms_cli_write_atomic(const char *path, const void *buf, size_t len);

/* The whole file at path, malloc'd (the caller frees), *out_len its bytes; NULL with *err an
 * errno (EFBIG past max bytes, ENOMEM) when it cannot be read whole (util.c). */
char *ms_cli_read_file(const char *path, size_t max, size_t *out_len, int *err);
/* Parse the template store at path into s (core/template.h); with missing_ok a missing file
 * is an empty store. MS_OK, or MS_EXIT_RUNTIME after saying why (cmd_profile.c). */
struct ms_tmpl_store;
int ms_cli_load_templates(struct ms_tmpl_store *s, const char *path, bool missing_ok);
/* Print "msched: <message>\n" to stderr. */
void ms_cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Sizes and durations as core/units.h reads them ("1.5GiB", "16GB", "200ms"), but not zero:
 * MS_E_PARSE for a malformed value, MS_E_INVAL for 0 or more than 2^60. */
int ms_cli_parse_size(const char *s, uint64_t *out);
int ms_cli_parse_duration(const char *s, uint64_t *out_ns);
/* A decimal unsigned integer that fits 64 bits. */
int ms_cli_parse_u64(const char *s, uint64_t *out);
/* Pressures: comma-separated ratios ("1.5,2,3") or percents ("150%,200%"), each in (0, 100].
 * At most cap values. */
int ms_cli_parse_pressures(const char *s, double *out, size_t cap, size_t *out_n);

/*
 * Options: "--name value" or "--name=value". ms_cli_opt matches argv[*i] against name and, when
 * it takes a value, stores it in *val (advancing *i past a separate value). Returns 1 on a match,
 * 0 when argv[*i] is another option, -1 (after printing the error) when the value is missing.
 */
int ms_cli_opt(int argc, char **argv, int *i, const char *name, const char **val);

/*
 * getopt_long with the CLI's error lines. Call ms_cli_getopt_reset() before the first call for
 * an argv. shortopts starts with ':' (a missing value is reported, not guessed). Returns the
 * option's value, -1 after the last option (optind is then the first operand), or
 * MS_CLI_OPT_BAD after printing "msched: <cmd>: unknown option ..." or "... needs a value".
 */
#define MS_CLI_OPT_BAD (-2)
struct option;
void ms_cli_getopt_reset(void);
int ms_cli_getopt(int argc, char **argv, const char *shortopts, const struct option *longopts,
                  const char *cmd);

/*
 * The daemon commands' --gpu N|UUID and --socket PATH: set sock (cap bytes) to GPU N's socket
 * (gpuN.sock, a link to the daemon's UUID socket), the UUID's own socket, or PATH. Returns 0,
 * or MS_EXIT_USAGE after printing the error.
 */
int ms_cli_gpu_socket(const char *gpu, char *sock, size_t cap);
int ms_cli_socket(const char *path, char *sock, size_t cap);

/* Progress line on stderr: enabled when stderr is a terminal or forced; at most 4 updates/s. */
struct ms_cli_progress {
    bool enabled;
    bool tty;
    double last; /* wall-clock seconds of the last update */
    bool shown;  /* a line is on screen */
};
void ms_cli_progress_init(struct ms_cli_progress *p, bool force);
/* Callback for ms_sweep_opts.progress (ctx = struct ms_cli_progress *). */
void ms_cli_progress_cb(void *ctx, const char *label, double done);
void ms_cli_progress_end(struct ms_cli_progress *p);

#endif /* MS_CLI_H */
