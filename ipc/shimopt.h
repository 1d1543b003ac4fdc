/*
 * shimopt.h - libmsched's options: one table of the MSCHED_* environment variables the shim
 * reads, which `msched run` writes, checks and documents (its --help is printed from it).
 *
 * Design
 *   Every option has one row (shimopt.c): its variable, the `msched run` flag that sets it (if
 *   any), its type and range, its default and a one-line description. Values are text at the
 *   edges ("16GiB", "rt", "1") and are parsed and range-checked here only, so the CLI refuses
 *   exactly what the shim would ignore, and both say the same thing about it.
 *
 *   Types: SIZE (core/units.h sizes), UINT (decimal), WORD (one of a list of words; the value
 *   is its index), PRIORITY (rt, be or 0..10), FLAG (1/yes/on/true or 0/no/off/false), PATH
 *   (any non-empty text). A row may allow 0 below its minimum ("0 or 100..3600000").
 *
 *   MSCHED_SOCKET and MSCHED_SERVICE_USER are read by ipc/sock.c (the daemon and the CLI read
 *   them too) and are listed here only so that the help names them.
 *
 * Lives in ipc/ because it is edge code shared by the shim and the CLI; it never reads the
 * environment itself: callers pass a getter. Pure functions over a constant table; nothing is
 * allocated; thread-safe.
 */
#ifndef MS_IPC_SHIMOPT_H
#define MS_IPC_SHIMOPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum ms_shimopt {
    MS_OPT_PRIORITY = 0,
    MS_OPT_WEIGHT,
    MS_OPT_BUDGET,
    MS_OPT_ENGINE,
    MS_OPT_TRACE,
    MS_OPT_DAEMON,
    MS_OPT_VERBOSE,
    MS_OPT_STRICT,
    MS_OPT_IDLE_MS,
    MS_OPT_DAEMON_TIMEOUT_MS,
    MS_OPT_PIN_PIECE,
    MS_OPT_VMM_EXPORTABLE,
    MS_OPT_REAL_LIBCUDA,
    MS_OPT_ACCURACY,
    MS_OPT_ACCURACY_MAX,
    MS_OPT_CUPTI,
    MS_OPT_SOCKET,
    MS_OPT_SERVICE_USER,
    MS_OPT_MISPREDICT,
    MS_OPT_HOST_LIMIT,
    MS_OPT_PROFILE,
    MS_OPT_PROFILE_FIRST,
    MS_OPT_PROFILE_EVERY,
    MS_OPT_SANITIZER,
    MS_OPT_TEMPLATES,
    MS_OPT_REVERSE_DEMAND,
    MS_OPT_CHUNK,
    MS_OPT_DEFER_HOST_MAP,
    MS_OPT_HOST_POOL,
    MS_OPT_HOST_POOL_IDLE_MS,
    MS_OPT_PACK_SMALL,
    MS_OPT_PROGRESS_MS,
    MS_OPT_GRAPH_PIECES,
    MS_OPT_PHASES,
    MS_OPT_SETTLED,
    MS_OPT_COUNT
};

enum ms_shimopt_type {
    MS_OT_SIZE,
    MS_OT_UINT,
    MS_OT_WORD,
    MS_OT_PRIORITY,
    MS_OT_FLAG,
    MS_OT_PATH,
};

/* MS_OPT_ENGINE's words, in the order of their values. */
enum ms_engine_kind { MS_ENGINE_VMM = 0, MS_ENGINE_UNIFIED, MS_ENGINE_DEMAND, MS_ENGINE_OFF };
/* MS_OPT_DAEMON's words. */
enum { MS_DAEMON_ON = 0, MS_DAEMON_OFF };

struct ms_shimopt_def {
    const char *env;     /* "MSCHED_BUDGET" */
    const char *flag;    /* the `msched run` flag, or NULL */
    const char *metavar; /* the flag's argument ("SIZE"), or NULL: a switch */
    const char *set_to;  /* a switch: the value it sets ("off" for --no-daemon) */
    enum ms_shimopt_type type;
    uint64_t min, max; /* SIZE, UINT: the range */
    bool zero_ok;      /* SIZE, UINT: 0 is allowed below min */
    const char *words; /* WORD: space-separated, value = index */
    const char *def;   /* the default, as text ("" when the option is unset by default) */
    const char *help;  /* one line (may be wrapped with '\n') */
};

extern const struct ms_shimopt_def ms_shimopt_defs[MS_OPT_COUNT];

/* The options as read: set[i] when the variable was given with a valid value; value[i] is the
 * parsed number (SIZE, UINT, WORD index, PRIORITY, FLAG 0/1), or the default's when not set;
 * text[i] is the variable's text (borrowed from the getter) when set, else NULL. */
struct ms_shimopts {
    bool set[MS_OPT_COUNT];
    uint64_t value[MS_OPT_COUNT];
    const char *text[MS_OPT_COUNT];
};

/* Parse one value of option id. MS_OK with *value, or MS_E_INVAL with one sentence in why
 * ("MSCHED_WEIGHT=abc is not 0..1000") that the caller completes (with "; using 1" or as a
 * usage error). why may be NULL. */
int ms_shimopt_parse(enum ms_shimopt id, const char *text, uint64_t *value, char *why,
                     size_t whylen);

/* What option id takes, as a phrase ("0..1000", "a size of at least 2MiB (e.g. 16GiB)"). */
void ms_shimopt_expect(enum ms_shimopt id, char *buf, size_t n);

/* Read every option through get (getenv-like; NULL or "" means unset). A bad value leaves the
 * option unset (its default stands) and calls bad(arg, why, default text) once. */
void ms_shimopts_read(struct ms_shimopts *o, const char *(*get)(const char *name),
                      void (*bad)(void *arg, const char *why, const char *def), void *arg);

/* The template store `msched profile` writes and the shim reads by default (MSCHED_TEMPLATES
 * unset): $XDG_CACHE_HOME/msched/templates, else $HOME/.cache/msched/templates (each only when
 * absolute), through get as above. MS_OK with the path in out; MS_E_NOTFOUND when neither
 * variable gives one, MS_E_INVAL when it does not fit cap. */
int ms_shimopt_templates_default(const char *(*get)(const char *name), char *out, size_t cap);

/* The table's id for a `msched run` flag ("--budget"), or -1. */
int ms_shimopt_by_flag(const char *flag);

/* `msched run`'s options (every row with a flag) and then the environment variables, with
 * their help, as `msched run --help` prints them. */
void ms_shimopt_help(FILE *f);

#endif /* MS_IPC_SHIMOPT_H */
