/*
 * util.c - the CLI's shared helpers: error lines, unit parsers, option matching, progress.
 *
 * Parsers are strict: the whole string must be consumed, no leading or trailing junk, no
 * negative numbers, no NaN or infinity; a number too large for its unit is an error, never a
 * wrapped value.
 */
#include "cli/cli.h"

#include "core/units.h"
#include "ipc/ipc.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

void ms_cli_error(const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    for (char *p = buf; *p; p++) /* one line, whatever the message contains */
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    fprintf(stderr, "msched: %s\n", buf);
}

/* A non-negative finite decimal number at the start of s; *end after it. */
static int parse_number(const char *s, double *out, const char **end)
{
    if (!s || !(isdigit((unsigned char)s[0]) || (s[0] == '.' && isdigit((unsigned char)s[1]))))
        return MS_E_PARSE;
    errno = 0;
    char *e;
    double v = strtod(s, &e);
    /* strtod also accepts exponents and hex; allow only digits and one dot */
    for (const char *p = s; p < e; p++)
        if (!isdigit((unsigned char)*p) && *p != '.')
            return MS_E_PARSE;
    if (e == s || errno == ERANGE || !isfinite(v) || v < 0)
        return MS_E_PARSE;
    *out = v;
    *end = e;
    return MS_OK;
}

int ms_cli_parse_size(const char *s, uint64_t *out)
{
    uint64_t v;
    int rc = ms_parse_size(s, &v);
    if (rc)
        return rc;
    if (v == 0)
        return MS_E_INVAL;
    *out = v;
    return MS_OK;
}

int ms_cli_parse_duration(const char *s, uint64_t *out_ns)
{
    uint64_t v;
    int rc = ms_parse_duration(s, &v);
    if (rc)
        return rc;
    if (v == 0)
        return MS_E_INVAL;
    *out_ns = v;
    return MS_OK;
}

int ms_cli_parse_u64(const char *s, uint64_t *out)
{
    if (!s || !*s)
        return MS_E_PARSE;
    uint64_t v = 0;
    for (const char *p = s; *p; p++) {
        if (!isdigit((unsigned char)*p))
            return MS_E_PARSE;
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10)
            return MS_E_INVAL;
        v = v * 10 + d;
    }
    *out = v;
    return MS_OK;
}

int ms_cli_parse_pressures(const char *s, double *out, size_t cap, size_t *out_n)
{
    size_t n = 0;
    const char *p = s;
    if (!s || !*s)
        return MS_E_PARSE;
    for (;;) {
        double v;
        const char *end;
        if (parse_number(p, &v, &end))
            return MS_E_PARSE;
        if (*end == '%') {
            v /= 100;
            end++;
        }
        if (*end != ',' && *end != '\0')
            return MS_E_PARSE;
        if (!(v > 0) || v > 100)
            return MS_E_INVAL;
        if (n == cap)
            return MS_E_NOSPACE;
        out[n++] = v;
        if (*end == '\0')
            break;
        p = end + 1;
    }
    *out_n = n;
    return MS_OK;
}

int ms_cli_opt(int argc, char **argv, int *i, const char *name, const char **val)
{
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (strncmp(a, name, n) != 0)
        return 0;
    if (!val)
        return a[n] == '\0' ? 1 : 0;
    if (a[n] == '=') {
        *val = a + n + 1;
        return 1;
    }
    if (a[n] != '\0')
        return 0;
    if (*i + 1 >= argc) {
        ms_cli_error("option %s needs a value", name);
        return -1;
    }
    *val = argv[++*i];
    return 1;
}

void ms_cli_getopt_reset(void)
{
    optind = 0; /* glibc: start over, whatever an earlier parse left */
    opterr = 0;
}

int ms_cli_getopt(int argc, char **argv, const char *shortopts, const struct option *longopts,
                  const char *cmd)
{
    int c = getopt_long(argc, argv, shortopts, longopts, NULL);
    if (c != '?' && c != ':')
        return c;
    /* A long option is named as typed; a short one by its letter (it may sit in "-xy"). */
    const char *arg = optind > 0 && optind <= argc ? argv[optind - 1] : "";
    char shortname[3] = {'-', (char)optopt, '\0'};
    if (!(arg[0] == '-' && arg[1] == '-') && optopt > 0 && optopt < 128)
        arg = shortname;
    if (c == ':')
        ms_cli_error("%s: option %s needs a value", cmd, arg);
    else
        ms_cli_error("%s: unknown option '%s' (try 'msched help %s')", cmd, arg, cmd);
    return MS_CLI_OPT_BAD;
}

int ms_cli_gpu_socket(const char *gpu, char *sock, size_t cap)
{
    uint64_t g;
    char hex[MS_IPC_UUID_MAX];
    if (ms_ipc_uuid_hex(gpu, hex, sizeof(hex)) == MS_OK) {
        if (ms_ipc_uuid_socket_path(gpu, sock, cap) != MS_OK) {
            ms_cli_error("--gpu: the socket path for '%s' is too long", gpu);
            return MS_EXIT_USAGE;
        }
        return 0;
    }
    if (ms_cli_parse_u64(gpu, &g) != MS_OK || g > 255 ||
        ms_ipc_socket_path((unsigned)g, sock, cap) != MS_OK) {
        ms_cli_error("--gpu: '%s' is not a GPU index or UUID", gpu);
        return MS_EXIT_USAGE;
    }
    return 0;
}

int ms_cli_socket(const char *path, char *sock, size_t cap)
{
    if (strlen(path) >= cap || strlen(path) >= MS_IPC_PATH_MAX) {
        ms_cli_error("--socket: path too long");
        return MS_EXIT_USAGE;
    }
    snprintf(sock, cap, "%s", path);
    return 0;
}

static double wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void ms_cli_progress_init(struct ms_cli_progress *p, bool force)
{
    memset(p, 0, sizeof(*p));
    p->tty = isatty(STDERR_FILENO) == 1;
    p->enabled = force || p->tty;
    p->last = wall_s();
}

void ms_cli_progress_cb(void *ctx, const char *label, double done)
{
    struct ms_cli_progress *p = ctx;
    if (!p->enabled)
        return;
    double now = wall_s();
    if (now - p->last < 0.25)
        return;
    p->last = now;
    if (done < 0)
        done = 0;
    if (done > 1)
        done = 1;
    if (p->tty) {
        fprintf(stderr, "\rmsched: simulating %s: %3.0f%%\033[K", label, 100 * done);
        p->shown = true;
    } else {
        fprintf(stderr, "msched: simulating %s: %3.0f%%\n", label, 100 * done);
    }
    fflush(stderr);
}

void ms_cli_progress_end(struct ms_cli_progress *p)
{
    if (p->shown && p->tty)
        fprintf(stderr, "\r\033[K");
    p->shown = false;
}

char *ms_cli_read_file(const char *path, size_t max, size_t *out_len, int *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        *err = errno;
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    *err = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n == cap) {
            if (cap >= max) {
                free(buf);
                buf = NULL;
                *err = EFBIG;
                break;
            }
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                *err = ENOMEM;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        errno = 0;
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) {
            if (ferror(f)) {
                free(buf);
                buf = NULL;
                *err = errno ? errno : EIO;
            }
            break;
        }
    }
    if (!buf && *err == 0)
        *err = ENOMEM;
    fclose(f);
    *out_len = n;
    return buf;
}
