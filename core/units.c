/*
 * units.c - sizes ("16GiB", "512MB", "2G") and durations ("100ms", "1.5s") read from text and
 * written back (contract: units.h).
 *
 * Numbers are parsed by hand (no strtod: it depends on the locale and accepts hex, infinities
 * and exponents nobody means in a size): an integer part, an optional '.' and up to nine
 * fraction digits, then the unit. The integer part is range-checked as it is read, so no input
 * can overflow; the fraction is applied in double precision and rounded down, which is exact for
 * every value a person writes ("1.5GiB"). ms_format_size and ms_format_duration write the exact
 * value in the largest unit that divides it, so what they write parses back to the same value
 * (tests/fuzz/fuzz_config.c checks that).
 */
#include "core/units.h"

#include "core/ms.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define LIMIT (1ull << 60)
#define NS_US 1000ull
#define NS_MS 1000000ull
#define NS_S 1000000000ull

static int lower(int ch)
{
    return ch >= 'A' && ch <= 'Z' ? ch - 'A' + 'a' : ch;
}

static bool is_digit(char ch)
{
    return ch >= '0' && ch <= '9';
}

static bool is_space(char ch)
{
    return ch == ' ' || ch == '\t';
}

/* number [unit]: integer part <= LIMIT, up to 9 fraction digits, unit letters (<= 7). */
static int parse_num_unit(const char *s, uint64_t *ip, double *frac, char *unit, size_t ulen)
{
    const char *p = s;
    while (is_space(*p))
        p++;
    if (!is_digit(*p) && !(*p == '.' && is_digit(p[1])))
        return MS_E_PARSE;
    uint64_t v = 0;
    while (is_digit(*p)) {
        v = v * 10 + (uint64_t)(*p - '0');
        if (v > LIMIT)
            return MS_E_INVAL;
        p++;
    }
    double f = 0.0, scale = 0.1;
    if (*p == '.') {
        p++;
        int nd = 0;
        while (is_digit(*p)) {
            if (++nd > 9)
                return MS_E_PARSE;
            f += (*p - '0') * scale;
            scale /= 10.0;
            p++;
        }
        if (nd == 0)
            return MS_E_PARSE;
    }
    while (is_space(*p))
        p++;
    size_t n = 0;
    while ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')) {
        if (n + 1 >= ulen)
            return MS_E_PARSE;
        unit[n++] = (char)lower(*p);
        p++;
    }
    unit[n] = '\0';
    while (is_space(*p))
        p++;
    if (*p != '\0')
        return MS_E_PARSE;
    *ip = v;
    *frac = f;
    return MS_OK;
}

static int scale_value(uint64_t ip, double frac, uint64_t mult, uint64_t *out)
{
    if (ip > LIMIT / mult)
        return MS_E_INVAL;
    uint64_t v = ip * mult;
    double extra = frac * (double)mult; /* < mult */
    uint64_t e = (uint64_t)extra;
    if (v > LIMIT - e)
        return MS_E_INVAL;
    *out = v + e;
    return MS_OK;
}

struct unit {
    const char *u; /* lower case */
    uint64_t m;
};

/* A number and one of the n units in tab (matched case-insensitively), scaled. */
static int parse_with(const char *s, const struct unit *tab, size_t n, uint64_t *out)
{
    if (!s || !out)
        return MS_E_INVAL;
    uint64_t ip;
    double frac;
    char unit[8];
    int rc = parse_num_unit(s, &ip, &frac, unit, sizeof(unit));
    if (rc)
        return rc;
    for (size_t i = 0; i < n; i++)
        if (strcmp(unit, tab[i].u) == 0)
            return scale_value(ip, frac, tab[i].m, out);
    return MS_E_PARSE;
}

int ms_parse_size(const char *s, uint64_t *out)
{
    static const struct unit units[] = {
        {"", 1},
        {"b", 1},
        {"kib", MS_KIB},
        {"mib", MS_MIB},
        {"gib", MS_GIB},
        {"tib", 1024ull * MS_GIB},
        {"kb", 1000ull},
        {"mb", 1000000ull},
        {"gb", 1000000000ull},
        {"tb", 1000000000000ull},
        {"k", MS_KIB},
        {"m", MS_MIB},
        {"g", MS_GIB},
        {"t", 1024ull * MS_GIB},
    };
    return parse_with(s, units, MS_ARRAY_LEN(units), out);
}

int ms_parse_duration(const char *s, uint64_t *out_ns)
{
    static const struct unit units[] = {{"ns", 1}, {"us", NS_US}, {"ms", NS_MS}, {"s", NS_S}};
    return parse_with(s, units, MS_ARRAY_LEN(units), out_ns);
}

void ms_format_size(uint64_t bytes, char *buf, size_t len)
{
    static const struct {
        const char *u;
        uint64_t m;
    } units[] = {{"TiB", 1024ull * MS_GIB}, {"GiB", MS_GIB}, {"MiB", MS_MIB}, {"KiB", MS_KIB}};
    for (size_t i = 0; i < MS_ARRAY_LEN(units); i++) {
        if (bytes && bytes % units[i].m == 0) {
            snprintf(buf, len, "%llu%s", (unsigned long long)(bytes / units[i].m), units[i].u);
            return;
        }
    }
    snprintf(buf, len, "%lluB", (unsigned long long)bytes);
}

void ms_format_duration(uint64_t ns, char *buf, size_t len)
{
    static const struct {
        const char *u;
        uint64_t m;
    } units[] = {{"s", NS_S}, {"ms", NS_MS}, {"us", NS_US}};
    for (size_t i = 0; i < MS_ARRAY_LEN(units); i++) {
        if (ns && ns % units[i].m == 0) {
            snprintf(buf, len, "%llu%s", (unsigned long long)(ns / units[i].m), units[i].u);
            return;
        }
    }
    snprintf(buf, len, "%lluns", (unsigned long long)ns);
}

static void human(double v, const char *unit, char *buf, size_t len)
{
    if (v < 10.0)
        snprintf(buf, len, "%.2f %s", v, unit);
    else if (v < 100.0)
        snprintf(buf, len, "%.1f %s", v, unit);
    else
        snprintf(buf, len, "%.0f %s", v, unit);
}

void ms_format_size_h(uint64_t bytes, char *buf, size_t len)
{
    static const char *const u[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
    if (bytes < 1024) {
        snprintf(buf, len, "%llu B", (unsigned long long)bytes);
        return;
    }
    double v = (double)bytes / 1024.0;
    size_t i = 0;
    while (v >= 1024.0 && i + 1 < MS_ARRAY_LEN(u)) {
        v /= 1024.0;
        i++;
    }
    human(v, u[i], buf, len);
}

void ms_format_duration_h(uint64_t ns, char *buf, size_t len)
{
    if (ns < NS_US)
        snprintf(buf, len, "%llu ns", (unsigned long long)ns);
    else if (ns < NS_MS)
        human((double)ns / NS_US, "us", buf, len);
    else if (ns < NS_S)
        human((double)ns / NS_MS, "ms", buf, len);
    else
        human((double)ns / NS_S, "s", buf, len);
}
