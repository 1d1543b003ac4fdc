/*
 * conf.h - the daemon's options: one table of names, types, ranges and help that drives the
 * command-line flags, the configuration file and the protocol's CONFIG_GET / CONFIG_SET.
 *
 * Design
 *   Every option lives in struct ms_conf and has one row in the table (conf.c): name, type,
 *   default, minimum and maximum, whether it may change while the daemon runs, and a one-line
 *   description. Values are always text at the edges ("16GiB", "100ms", "opt") and are parsed
 *   and range-checked here, so the three front ends cannot disagree.
 *
 *   The configuration file is UTF-8 text, one "key = value" per line; blank lines and lines
 *   whose first non-blank character is '#' are ignored; a value may be wrapped in double quotes.
 *   Parsing is defensive: lines over MS_CONF_LINE_MAX bytes, NUL bytes, unknown keys and bad
 *   values are errors naming the line; files over MS_CONF_FILE_MAX bytes are refused. The parser
 *   is fuzzed (tests/fuzz/fuzz_config.c).
 *
 *   Sizes and durations are read and written by core/units.h (included here), which every
 *   front end shares.
 *
 * Lives in ipc/ because it is edge code shared by the daemon and the CLI (and built into the
 * libraries the fuzz replays link); it reads files but never the environment.
 *
 * Ownership: the caller owns struct ms_conf; nothing is allocated. Not thread-safe.
 */
#ifndef MS_CONF_H
#define MS_CONF_H

#include "core/sched.h"
#include "core/units.h"
#include "ipc/ipc.h"

#include <stdbool.h>
#include <stddef.h>

#define MS_CONF_LINE_MAX 1024
#define MS_CONF_FILE_MAX (256u * 1024u)
/* The configuration file of the systemd unit (packaging/systemd), and of `msched config set
 * --save` by default. */
#define MS_CONF_DEFAULT_PATH "/etc/msched/msched.conf"

enum ms_log_level { MS_LOG_ERROR = 0, MS_LOG_WARN, MS_LOG_INFO, MS_LOG_DEBUG };

struct ms_conf {
    uint32_t gpu;                 /* GPU index (every GPU visible), when uuid is "" */
    char uuid[MS_IPC_UUID_MAX];   /* the GPU's UUID: names the socket and the lock */
    char socket[MS_IPC_PATH_MAX]; /* "" = gpu-<uuid>.sock (ms_ipc_uuid_socket_path) */
    uint64_t budget;              /* bytes all tasks may hold on the device */
    uint64_t slice_ns;            /* base time slice */
    uint64_t slice_max_ns;        /* adaptive: longest slice */
    uint32_t switch_frac;         /* adaptive: switch cost <= this % of the slice */
    uint32_t policy;              /* enum ms_sched_policy */
    uint32_t evict;               /* enum ms_evict_policy */
    char cost[16];                /* cost profile name (core/cost.h) */
    uint64_t stop_timeout_ns;     /* STOP .. STOPPED */
    uint64_t order_timeout_ns;    /* a migration order without progress */
    uint32_t horizon;             /* timeline entries the planner sees */
    bool early_run;               /* RUN with the POPULATE */
    uint64_t idle_hold_ns;        /* longest hold for an idle task (sched.h) */
    bool share;                   /* run tasks at once while their memory fits (sched.h) */
    bool prepare_host;            /* PREPARE: host memory ahead of a switch (sched.h) */
    uint32_t max_tasks;
    uint64_t session_out_max;   /* bytes queued to one client before it is dropped */
    uint32_t log_level;         /* enum ms_log_level */
    char log_file[256];         /* "" = stderr */
    bool check;                 /* verify the scheduler's invariants after every event */
    uint64_t idle_exit_ns;      /* exit after this long without a session (0: never) */
    uint64_t hello_timeout_ns;  /* a connection without a task, silent this long, is closed */
    uint32_t max_conns_per_uid; /* connections one uid may hold at once */
    char socket_group[64];      /* "" = private socket; else a group name or number */
    char admin_group[64];       /* members may change the configuration ("" = none) */
    uint32_t max_user_priority; /* highest priority a non-admin client may ask for */
    uint32_t max_user_weight;   /* highest weight a non-admin client may ask for */
    char metrics_listen[64];    /* "" = no HTTP metrics endpoint; else [HOST:]PORT */
};

enum ms_conf_type {
    MS_CT_SIZE,
    MS_CT_DURATION,
    MS_CT_UINT,
    MS_CT_BOOL,
    MS_CT_POLICY,
    MS_CT_EVICT,
    MS_CT_LEVEL,
    MS_CT_COST,
    MS_CT_STRING,
};

struct ms_conf_opt {
    const char *name;
    enum ms_conf_type type;
    size_t offset;     /* of the field in struct ms_conf */
    size_t size;       /* of the field (strings: the array) */
    uint64_t min, max; /* numeric types */
    bool runtime;      /* may be changed by CONFIG_SET */
    const char *help;
};

void ms_conf_default(struct ms_conf *c);

/* The table; *out_n rows. */
const struct ms_conf_opt *ms_conf_opts(size_t *out_n);
/* NULL when unknown. */
const struct ms_conf_opt *ms_conf_find(const char *name);

/*
 * Parse value and store it. runtime: refuse options that cannot change while running.
 * Errors: MS_E_NOTFOUND (unknown key), MS_E_PARSE (malformed value), MS_E_INVAL (out of
 * range), MS_E_STATE (not changeable at run time). why gets one line.
 */
int ms_conf_set(struct ms_conf *c, const char *key, const char *value, bool runtime, char *why,
                size_t whylen);

/* The value's canonical text. Errors: MS_E_NOTFOUND, MS_E_NOSPACE (buf too small). */
int ms_conf_get(const struct ms_conf *c, const char *key, char *buf, size_t len);

/* Cross-option checks (slice_max >= slice). MS_E_INVAL with why. */
int ms_conf_check(const struct ms_conf *c, char *why, size_t whylen);

/*
 * Parse configuration text (need not be NUL-terminated). Options are applied in order; on the
 * first error parsing stops (earlier lines stay applied) and why says "line N: ...".
 * Errors: those of ms_conf_set, MS_E_PARSE (syntax, long line, NUL byte).
 */
int ms_conf_parse(struct ms_conf *c, const char *text, size_t len, char *why, size_t whylen);

/* Read and parse a file. Errors: MS_E_IO (unreadable), MS_E_NOSPACE (too large), as above. */
int ms_conf_load(struct ms_conf *c, const char *path, char *why, size_t whylen);

/*
 * Persist one option in the configuration file at path: the first line that sets key gets
 * "key = value", later ones are removed, and without one the line is appended (a missing file
 * is created, 0644). Comments and other lines stay as they are. The new text must parse and
 * pass ms_conf_check, and replaces the file by rename (never through a link), keeping its mode.
 * Errors: MS_E_NOTFOUND (unknown key), MS_E_INVAL (a value the file cannot carry, or an
 * invalid result), MS_E_NOSPACE, MS_E_IO, MS_E_NOMEM; why says which.
 */
int ms_conf_save(const char *path, const char *key, const char *value, char *why, size_t whylen);

/* The scheduler's configuration from these options. */
void ms_conf_to_sched(const struct ms_conf *c, struct ms_sched_config *out);

int ms_log_level_parse(const char *s, enum ms_log_level *out);
const char *ms_log_level_name(enum ms_log_level l);

#endif /* MS_CONF_H */
