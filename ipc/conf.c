/*
 * conf.c - the option table, value parsers and the configuration-file reader (contract:
 * conf.h).
 *
 * Sizes and durations are parsed and formatted by core/units.c.
 *
 * Every setter works on a copy of the value and writes the field only when the whole value
 * parsed and is in range, so a failed set never leaves a half-changed option.
 */
#include "ipc/conf.h"

#include "core/cost.h"
#include "ipc/http.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define LIMIT (1ull << 60) /* whole numbers (parse_uint) */
#define NS_US 1000ull
#define NS_MS 1000000ull
#define NS_S 1000000000ull

#define OFF(f) offsetof(struct ms_conf, f), sizeof(((struct ms_conf *)0)->f)

static const struct ms_conf_opt opts[] = {
    {"gpu", MS_CT_UINT, OFF(gpu), 0, 255, false,
     "GPU index, every GPU visible (resolved to its UUID by the CUDA driver)"},
    {"uuid", MS_CT_STRING, OFF(uuid), 0, 0, false,
     "the GPU's UUID (GPU-...; default: GPU gpu's): names the socket and the lock"},
    {"socket", MS_CT_STRING, OFF(socket), 0, 0, false,
     "socket path (default: $MSCHED_SOCKET, else gpu-UUID.sock in $MSCHED_SOCKET_DIR, else in "
     "$XDG_RUNTIME_DIR/msched, else in /tmp/msched-UID; gpuN.sock without a driver)"},
    {"budget", MS_CT_SIZE, OFF(budget), MS_GRAN, 1ull << 50, true,
     "device memory all tasks together may hold (default: 90 % of the GPU's memory; 16GiB "
     "when no driver answers)"},
    {"slice", MS_CT_DURATION, OFF(slice_ns), 100 * NS_US, 60 * NS_S, true,
     "base time slice (times a task's weight)"},
    {"slice_max", MS_CT_DURATION, OFF(slice_max_ns), 100 * NS_US, 600 * NS_S, true,
     "adaptive policy: longest slice"},
    {"switch_frac", MS_CT_UINT, OFF(switch_frac), 1, 100, true,
     "adaptive policy: predicted switch cost at most this percent of the slice"},
    {"policy", MS_CT_POLICY, OFF(policy), 0, 0, true, "rr, prio or adaptive"},
    {"evict", MS_CT_EVICT, OFF(evict), 0, 0, true, "eviction policy: opt, lru or whole"},
    {"cost", MS_CT_COST, OFF(cost), 0, 0, true, "cost profile for predictions (h200, rtx5080)"},
    {"stop_timeout", MS_CT_DURATION, OFF(stop_timeout_ns), NS_MS, 600 * NS_S, true,
     "a task that does not stop within this is stalled: its memory set aside, the others run"},
    {"order_timeout", MS_CT_DURATION, OFF(order_timeout_ns), NS_MS, 3600 * NS_S, true,
     "a migration order without progress for this long drops its task"},
    {"horizon", MS_CT_UINT, OFF(horizon), 1, 1024, true, "timeline entries the planner looks at"},
    {"early_run", MS_CT_BOOL, OFF(early_run), 0, 1, true,
     "send RUN with the POPULATE (the shim's launch gate waits per launch)"},
    {"idle_hold", MS_CT_DURATION, OFF(idle_hold_ns), 0, 600 * NS_S, true,
     "rr, adaptive: an idle task keeps the GPU up to this long, or as long as recent switches "
     "took if less (0s: yield at once)"},
    {"share", MS_CT_BOOL, OFF(share), 0, 1, true,
     "while the tasks' memory fits in the budget together (and the policy is not prio, the "
     "weights equal), run them at once; slice when it does not"},
    {"prepare_host", MS_CT_BOOL, OFF(prepare_host), 0, 1, true,
     "tell the running task how much of its memory the next switch will likely evict for the "
     "first time, so that its shim pins host memory for it before the switch"},
    {"max_tasks", MS_CT_UINT, OFF(max_tasks), 1, 65536, false, "most tasks at once"},
    {"session_out_max", MS_CT_SIZE, OFF(session_out_max), 64 * MS_KIB, MS_GIB, false,
     "bytes queued to one client before it is dropped as too slow"},
    {"log_level", MS_CT_LEVEL, OFF(log_level), 0, 0, true, "error, warn, info or debug"},
    {"log_file", MS_CT_STRING, OFF(log_file), 0, 0, false,
     "log file (default: stderr in the foreground, <socket>.log in the background)"},
    {"check", MS_CT_BOOL, OFF(check), 0, 1, true,
     "verify the scheduler's invariants after every pass of the event loop (tests)"},
    {"idle_exit", MS_CT_DURATION, OFF(idle_exit_ns), 0, 86400 * NS_S, true,
     "exit after this long with no client connected (0: never)"},
    {"hello_timeout", MS_CT_DURATION, OFF(hello_timeout_ns), 10 * NS_MS, 3600 * NS_S, true,
     "a connection that is not a task and sends nothing for this long is closed"},
    {"max_conns_per_uid", MS_CT_UINT, OFF(max_conns_per_uid), 1, 65536, true,
     "connections one user may hold at once (tasks and control clients)"},
    {"socket_group", MS_CT_STRING, OFF(socket_group), 0, 0, false,
     "serve this group's members too: socket 0660 and directory 0750 owned by the group "
     "(\"\": only the daemon's user)"},
    {"admin_group", MS_CT_STRING, OFF(admin_group), 0, 0, false,
     "members may change the configuration and exceed the user limits, like the daemon's "
     "user and root"},
    {"max_user_priority", MS_CT_UINT, OFF(max_user_priority), 0, 10, true,
     "highest priority a client that is not an admin may ask for (rt is 10)"},
    {"max_user_weight", MS_CT_UINT, OFF(max_user_weight), 1, 1000, true,
     "highest weight a client that is not an admin may ask for"},
    {"metrics_listen", MS_CT_STRING, OFF(metrics_listen), 0, 0, false,
     "serve Prometheus metrics over HTTP at GET /metrics on [HOST:]PORT (a port alone: "
     "127.0.0.1; \"\": off)"},
};

void ms_conf_default(struct ms_conf *c)
{
    memset(c, 0, sizeof(*c));
    struct ms_sched_config sc;
    ms_sched_config_default(&sc);
    c->budget = sc.budget;
    c->slice_ns = sc.slice_ns;
    c->slice_max_ns = sc.slice_max_ns;
    c->switch_frac = sc.switch_frac_pct;
    c->policy = (uint32_t)sc.policy;
    c->evict = (uint32_t)sc.evict;
    snprintf(c->cost, sizeof(c->cost), "%s", ms_cost_h200.name);
    c->stop_timeout_ns = sc.stop_timeout_ns;
    c->order_timeout_ns = sc.order_timeout_ns;
    c->horizon = sc.horizon;
    c->early_run = sc.early_run;
    c->idle_hold_ns = sc.idle_hold_ns;
    c->share = sc.share;
    c->prepare_host = sc.prepare_host;
    c->max_tasks = sc.max_tasks;
    c->session_out_max = 4 * MS_MIB;
    c->log_level = MS_LOG_WARN;
    c->hello_timeout_ns = 10 * NS_S;
    c->max_conns_per_uid = 128;
    c->max_user_priority = 5;
    c->max_user_weight = 10;
}

const struct ms_conf_opt *ms_conf_opts(size_t *out_n)
{
    *out_n = MS_ARRAY_LEN(opts);
    return opts;
}

const struct ms_conf_opt *ms_conf_find(const char *name)
{
    for (size_t i = 0; i < MS_ARRAY_LEN(opts); i++)
        if (strcmp(opts[i].name, name) == 0)
            return &opts[i];
    return NULL;
}

/* ---- option values ------------------------------------------------------------------------ */

static bool is_digit(char ch)
{
    return ch >= '0' && ch <= '9';
}

static bool is_space(char ch)
{
    return ch == ' ' || ch == '\t';
}

static int parse_bool(const char *s, bool *out)
{
    static const char *const yes[] = {"1", "true", "yes", "on"};
    static const char *const no[] = {"0", "false", "no", "off"};
    for (size_t i = 0; i < MS_ARRAY_LEN(yes); i++) {
        if (strcmp(s, yes[i]) == 0) {
            *out = true;
            return MS_OK;
        }
        if (strcmp(s, no[i]) == 0) {
            *out = false;
            return MS_OK;
        }
    }
    return MS_E_PARSE;
}

static int parse_uint(const char *s, uint64_t *out)
{
    if (!is_digit(*s))
        return MS_E_PARSE;
    uint64_t v = 0;
    for (; is_digit(*s); s++) {
        v = v * 10 + (uint64_t)(*s - '0');
        if (v > LIMIT)
            return MS_E_INVAL;
    }
    if (*s != '\0')
        return MS_E_PARSE;
    *out = v;
    return MS_OK;
}

int ms_log_level_parse(const char *s, enum ms_log_level *out)
{
    static const char *const names[] = {"error", "warn", "info", "debug"};
    for (size_t i = 0; i < MS_ARRAY_LEN(names); i++) {
        if (strcmp(s, names[i]) == 0) {
            *out = (enum ms_log_level)i;
            return MS_OK;
        }
    }
    return MS_E_PARSE;
}

const char *ms_log_level_name(enum ms_log_level l)
{
    switch (l) {
    case MS_LOG_ERROR: return "error";
    case MS_LOG_WARN: return "warn";
    case MS_LOG_INFO: return "info";
    case MS_LOG_DEBUG: return "debug";
    }
    return "unknown";
}

/* ---- set and get ---------------------------------------------------------------------------- */

#define WHY(...)                                                                                   \
    do {                                                                                           \
        if (why && whylen)                                                                         \
            snprintf(why, whylen, __VA_ARGS__);                                                    \
    } while (0)

static bool text_ok(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return false;
    return true;
}

int ms_conf_set(struct ms_conf *c, const char *key, const char *value, bool runtime, char *why,
                size_t whylen)
{
    if (why && whylen)
        why[0] = '\0';
    const struct ms_conf_opt *o = key ? ms_conf_find(key) : NULL;
    if (!o) {
        WHY("unknown option '%.64s'", key ? key : "");
        return MS_E_NOTFOUND;
    }
    if (!value) {
        WHY("%s: no value", o->name);
        return MS_E_PARSE;
    }
    if (runtime && !o->runtime) {
        WHY("%s cannot change while the daemon runs", o->name);
        return MS_E_STATE;
    }
    char *field = (char *)c + o->offset;
    uint64_t v = 0;
    int rc = MS_OK;
    switch (o->type) {
    case MS_CT_SIZE:
    case MS_CT_DURATION:
    case MS_CT_UINT:
        rc = o->type == MS_CT_SIZE       ? ms_parse_size(value, &v)
             : o->type == MS_CT_DURATION ? ms_parse_duration(value, &v)
                                         : parse_uint(value, &v);
        if (rc == MS_E_PARSE) {
            WHY("%s: '%.64s' is not a %s", o->name, value,
                o->type == MS_CT_SIZE       ? "size (like 16GiB)"
                : o->type == MS_CT_DURATION ? "duration (like 100ms)"
                                            : "number");
            return rc;
        }
        if (rc || v < o->min || v > o->max) {
            char lo[32], hi[32];
            if (o->type == MS_CT_SIZE) {
                ms_format_size(o->min, lo, sizeof(lo));
                ms_format_size(o->max, hi, sizeof(hi));
            } else if (o->type == MS_CT_DURATION) {
                ms_format_duration(o->min, lo, sizeof(lo));
                ms_format_duration(o->max, hi, sizeof(hi));
            } else {
                snprintf(lo, sizeof(lo), "%llu", (unsigned long long)o->min);
                snprintf(hi, sizeof(hi), "%llu", (unsigned long long)o->max);
            }
            WHY("%s: '%.64s' is outside %s..%s", o->name, value, lo, hi);
            return MS_E_INVAL;
        }
        if (o->size == sizeof(uint32_t)) {
            uint32_t v32 = (uint32_t)v;
            memcpy(field, &v32, sizeof(v32));
        } else {
            memcpy(field, &v, sizeof(v));
        }
        return MS_OK;
    case MS_CT_BOOL: {
        bool b;
        if (parse_bool(value, &b)) {
            WHY("%s: '%.64s' is not a boolean (true/false)", o->name, value);
            return MS_E_PARSE;
        }
        memcpy(field, &b, sizeof(b));
        return MS_OK;
    }
    case MS_CT_POLICY:
    case MS_CT_EVICT:
    case MS_CT_LEVEL: {
        uint32_t e;
        if (o->type == MS_CT_POLICY) {
            enum ms_sched_policy p;
            rc = ms_sched_policy_parse(value, &p);
            e = (uint32_t)p;
        } else if (o->type == MS_CT_EVICT) {
            enum ms_evict_policy p;
            rc = ms_evict_policy_parse(value, &p);
            e = (uint32_t)p;
        } else {
            enum ms_log_level l;
            rc = ms_log_level_parse(value, &l);
            e = (uint32_t)l;
        }
        if (rc) {
            WHY("%s: unknown value '%.64s' (%s)", o->name, value, o->help);
            return MS_E_PARSE;
        }
        memcpy(field, &e, sizeof(e));
        return MS_OK;
    }
    case MS_CT_COST:
        if (!ms_cost_find(value)) {
            WHY("%s: unknown profile '%.64s'", o->name, value);
            return MS_E_PARSE;
        }
        snprintf(field, o->size, "%s", value);
        return MS_OK;
    case MS_CT_STRING:
        if (strlen(value) >= o->size || !text_ok(value)) {
            WHY("%s: value too long (at most %zu bytes) or has control characters", o->name,
                o->size - 1);
            return MS_E_INVAL;
        }
        snprintf(field, o->size, "%s", value);
        return MS_OK;
    }
    return MS_E_INVAL;
}

int ms_conf_get(const struct ms_conf *c, const char *key, char *buf, size_t len)
{
    const struct ms_conf_opt *o = key ? ms_conf_find(key) : NULL;
    if (!o)
        return MS_E_NOTFOUND;
    const char *field = (const char *)c + o->offset;
    char tmp[512];
    uint64_t v = 0;
    if (o->type == MS_CT_SIZE || o->type == MS_CT_DURATION || o->type == MS_CT_UINT) {
        if (o->size == sizeof(uint32_t)) {
            uint32_t v32;
            memcpy(&v32, field, sizeof(v32));
            v = v32;
        } else {
            memcpy(&v, field, sizeof(v));
        }
    }
    uint32_t e = 0;
    if (o->type == MS_CT_POLICY || o->type == MS_CT_EVICT || o->type == MS_CT_LEVEL)
        memcpy(&e, field, sizeof(e));
    switch (o->type) {
    case MS_CT_SIZE: ms_format_size(v, tmp, sizeof(tmp)); break;
    case MS_CT_DURATION: ms_format_duration(v, tmp, sizeof(tmp)); break;
    case MS_CT_UINT: snprintf(tmp, sizeof(tmp), "%llu", (unsigned long long)v); break;
    case MS_CT_BOOL: {
        bool b;
        memcpy(&b, field, sizeof(b));
        snprintf(tmp, sizeof(tmp), "%s", b ? "true" : "false");
        break;
    }
    case MS_CT_POLICY:
        snprintf(tmp, sizeof(tmp), "%s", ms_sched_policy_name((enum ms_sched_policy)e));
        break;
    case MS_CT_EVICT:
        snprintf(tmp, sizeof(tmp), "%s", ms_evict_policy_name((enum ms_evict_policy)e));
        break;
    case MS_CT_LEVEL:
        snprintf(tmp, sizeof(tmp), "%s", ms_log_level_name((enum ms_log_level)e));
        break;
    case MS_CT_COST:
    case MS_CT_STRING: snprintf(tmp, sizeof(tmp), "%.*s", (int)o->size, field); break;
    }
    if (strlen(tmp) >= len)
        return MS_E_NOSPACE;
    memcpy(buf, tmp, strlen(tmp) + 1);
    return MS_OK;
}

int ms_conf_check(const struct ms_conf *c, char *why, size_t whylen)
{
    /* A slice_max below the slice (the 4 s default beside --slice 6s) is not an error: the
     * adaptive policy's longest slice is then the slice (ms_conf_to_sched). */
    if (c->metrics_listen[0]) {
        struct sockaddr_storage sa;
        socklen_t salen;
        int rc = ms_http_parse_addr(c->metrics_listen, &sa, &salen, why, whylen);
        if (rc)
            return rc;
    }
    struct ms_sched_config sc;
    ms_conf_to_sched(c, &sc);
    return ms_sched_config_check(&sc, why, whylen);
}

void ms_conf_to_sched(const struct ms_conf *c, struct ms_sched_config *out)
{
    ms_sched_config_default(out);
    out->policy = (enum ms_sched_policy)c->policy;
    out->evict = (enum ms_evict_policy)c->evict;
    out->budget = c->budget;
    out->slice_ns = c->slice_ns;
    out->slice_max_ns = MS_MAX(c->slice_max_ns, c->slice_ns);
    out->switch_frac_pct = c->switch_frac;
    out->cost = ms_cost_find(c->cost);
    out->stop_timeout_ns = c->stop_timeout_ns;
    out->order_timeout_ns = c->order_timeout_ns;
    out->horizon = c->horizon;
    out->early_run = c->early_run;
    out->idle_hold_ns = c->idle_hold_ns;
    out->share = c->share;
    out->prepare_host = c->prepare_host;
    out->max_tasks = c->max_tasks;
}

/* ---- the file format ------------------------------------------------------------------------ */

static bool key_char(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || is_digit(ch) || ch == '_' ||
           ch == '-';
}

int ms_conf_parse(struct ms_conf *c, const char *text, size_t len, char *why, size_t whylen)
{
    if (why && whylen)
        why[0] = '\0';
    if (len > 0 && !text)
        return MS_E_INVAL;
    size_t pos = 0;
    unsigned lineno = 0;
    while (pos < len) {
        lineno++;
        const char *line = text + pos;
        const char *nl = memchr(line, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - line) : len - pos;
        pos += n + (nl ? 1 : 0);
        if (n > MS_CONF_LINE_MAX) {
            WHY("line %u: longer than %u bytes", lineno, MS_CONF_LINE_MAX);
            return MS_E_PARSE;
        }
        if (memchr(line, '\0', n)) {
            WHY("line %u: NUL byte", lineno);
            return MS_E_PARSE;
        }
        char buf[MS_CONF_LINE_MAX + 1];
        memcpy(buf, line, n);
        buf[n] = '\0';
        if (n > 0 && buf[n - 1] == '\r')
            buf[--n] = '\0';
        char *p = buf;
        while (is_space(*p))
            p++;
        if (*p == '\0' || *p == '#')
            continue;
        char *eq = strchr(p, '=');
        if (!eq) {
            WHY("line %u: expected 'key = value'", lineno);
            return MS_E_PARSE;
        }
        char *kend = eq;
        while (kend > p && is_space(kend[-1]))
            kend--;
        *kend = '\0';
        for (char *k = p; *k; k++) {
            if (!key_char(*k)) {
                WHY("line %u: bad character in key", lineno);
                return MS_E_PARSE;
            }
            if (*k == '-')
                *k = '_'; /* slice-max and slice_max are the same key */
        }
        if (*p == '\0') {
            WHY("line %u: empty key", lineno);
            return MS_E_PARSE;
        }
        char *v = eq + 1;
        while (is_space(*v))
            v++;
        char *vend = v + strlen(v);
        while (vend > v && is_space(vend[-1]))
            vend--;
        *vend = '\0';
        size_t vlen = (size_t)(vend - v);
        if (vlen > 0 && *v == '"') {
            if (vlen < 2 || v[vlen - 1] != '"') {
                WHY("line %u: unterminated quote", lineno);
                return MS_E_PARSE;
            }
            v[vlen - 1] = '\0';
            v++;
        }
        char inner[256];
        int rc = ms_conf_set(c, p, v, false, inner, sizeof(inner));
        if (rc) {
            WHY("line %u: %s", lineno, inner);
            return rc;
        }
    }
    return MS_OK;
}

int ms_conf_load(struct ms_conf *c, const char *path, char *why, size_t whylen)
{
    /* Never through a link: a daemon run as root reads only the file it was named. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (!f) {
        WHY("%s: %s", path, errno == ELOOP ? "is a symbolic link (refused)" : strerror(errno));
        if (fd >= 0)
            close(fd);
        return MS_E_IO;
    }
    char *text = malloc(MS_CONF_FILE_MAX + 1);
    if (!text) {
        fclose(f);
        return MS_E_NOMEM;
    }
    size_t n = fread(text, 1, MS_CONF_FILE_MAX + 1, f);
    int err = ferror(f);
    fclose(f);
    int rc = MS_OK;
    char inner[300];
    if (err) {
        WHY("%s: read error", path);
        rc = MS_E_IO;
    } else if (n > MS_CONF_FILE_MAX) {
        WHY("%s: larger than %u bytes", path, MS_CONF_FILE_MAX);
        rc = MS_E_NOSPACE;
    } else if ((rc = ms_conf_parse(c, text, n, inner, sizeof(inner))) != MS_OK) {
        WHY("%s: %s", path, inner);
    }
    free(text);
    return rc;
}

/* The key of a configuration line (normalized, '-' as '_') into key; false for a blank line, a
 * comment or a line without '='. */
static bool line_key(const char *line, size_t n, char *key, size_t keylen)
{
    size_t i = 0;
    while (i < n && is_space(line[i]))
        i++;
    if (i == n || line[i] == '#')
        return false;
    size_t k = 0;
    while (i < n && key_char(line[i]) && k + 1 < keylen)
        key[k++] = line[i] == '-' ? '_' : line[i], i++;
    key[k] = '\0';
    while (i < n && is_space(line[i]))
        i++;
    return k > 0 && i < n && line[i] == '=';
}

int ms_conf_save(const char *path, const char *key, const char *value, char *why, size_t whylen)
{
    if (!ms_conf_find(key)) {
        WHY("unknown option '%s'", key);
        return MS_E_NOTFOUND;
    }
    if (strchr(value, '"') || strchr(value, '\n') || strlen(value) > MS_CONF_LINE_MAX / 2) {
        WHY("%s: this value cannot be written to the file", key);
        return MS_E_INVAL;
    }
    struct stat st;
    mode_t mode = 0644;
    char *old = malloc(MS_CONF_FILE_MAX + 1);
    char *out = malloc(MS_CONF_FILE_MAX + MS_CONF_LINE_MAX + 2);
    int rc = MS_OK;
    size_t n = 0, len = 0;
    if (!old || !out) {
        rc = MS_E_NOMEM;
        goto done;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd >= 0) {
        if (fstat(fd, &st) == 0)
            mode = st.st_mode & 07777;
        ssize_t r;
        while (n <= MS_CONF_FILE_MAX && (r = read(fd, old + n, MS_CONF_FILE_MAX + 1 - n)) > 0)
            n += (size_t)r;
        close(fd);
        if (n > MS_CONF_FILE_MAX) {
            WHY("%s: larger than %u bytes", path, MS_CONF_FILE_MAX);
            rc = MS_E_NOSPACE;
            goto done;
        }
    } else if (errno != ENOENT) {
        WHY("%s: %s", path, errno == ELOOP ? "is a symbolic link (refused)" : strerror(errno));
        rc = MS_E_IO;
        goto done;
    }
    bool quote = !value[0] || strchr(value, ' ') || strchr(value, '#') || strchr(value, '\t');
    char setting[MS_CONF_LINE_MAX + 2];
    int sl = snprintf(setting, sizeof(setting), "%s = %s%s%s\n", key, quote ? "\"" : "", value,
                      quote ? "\"" : "");
    bool done_key = false;
    for (size_t pos = 0; pos < n;) {
        const char *line = old + pos;
        const char *nl = memchr(line, '\n', n - pos);
        size_t ln = nl ? (size_t)(nl - line) + 1 : n - pos;
        pos += ln;
        char k[64];
        if (line_key(line, ln, k, sizeof(k)) && strcmp(k, key) == 0) {
            if (!done_key) {
                memcpy(out + len, setting, (size_t)sl);
                len += (size_t)sl;
                done_key = true;
            }
            continue; /* a later line for the key would override the saved one */
        }
        memcpy(out + len, line, ln);
        len += ln;
        if (!nl)
            out[len++] = '\n';
    }
    if (!done_key) {
        memcpy(out + len, setting, (size_t)sl);
        len += (size_t)sl;
    }
    struct ms_conf c;
    ms_conf_default(&c);
    char inner[300];
    if (len > MS_CONF_FILE_MAX) {
        WHY("%s would be larger than %u bytes", path, MS_CONF_FILE_MAX);
        rc = MS_E_NOSPACE;
        goto done;
    }
    if ((rc = ms_conf_parse(&c, out, len, inner, sizeof(inner))) != MS_OK ||
        (rc = ms_conf_check(&c, inner, sizeof(inner))) != MS_OK) {
        WHY("%s would not be valid: %s", path, inner);
        goto done;
    }
    /* A new file beside the old one, renamed over it: a reader sees the old or the new. */
    char tmp[4096];
    if (snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof(tmp)) {
        WHY("%s: path too long", path);
        rc = MS_E_NOSPACE;
        goto done;
    }
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
    if (fd < 0) {
        WHY("%s: %s", tmp, strerror(errno));
        rc = MS_E_IO;
        goto done;
    }
    size_t w = 0;
    while (w < len) {
        ssize_t r = write(fd, out + w, len - w);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        w += (size_t)r;
    }
    if (w != len || fchmod(fd, mode) != 0 || fsync(fd) != 0 || close(fd) != 0 ||
        rename(tmp, path) != 0) {
        WHY("%s: %s", path, strerror(errno));
        unlink(tmp);
        rc = MS_E_IO;
        goto done;
    }
done:
    free(old);
    free(out);
    return rc;
}
