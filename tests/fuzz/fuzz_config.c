/*
 * fuzz_config.c - libFuzzer target for the daemon's configuration parser (ipc/conf.c).
 *
 * The input is a configuration file. It is parsed into a default configuration; a failure must
 * use a documented code and leave a one-line "line N: ..." reason. Whatever was applied (all of
 * it on success, the lines before the bad one otherwise) must then round-trip: for every
 * option, the canonical text from ms_conf_get must be accepted by ms_conf_set and give the same
 * text back. Each input line is also fed to the size and duration parsers: a value they accept
 * must format and parse back to itself.
 *
 * Any broken property calls abort(), which both libFuzzer and the replay runner report.
 */
#include "ipc/conf.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_round_trip(const struct ms_conf *c)
{
    size_t n;
    const struct ms_conf_opt *o = ms_conf_opts(&n);
    for (size_t i = 0; i < n; i++) {
        char v1[600], v2[600], why[300];
        if (ms_conf_get(c, o[i].name, v1, sizeof(v1)) != MS_OK)
            abort();
        struct ms_conf copy = *c;
        if (ms_conf_set(&copy, o[i].name, v1, false, why, sizeof(why)) != MS_OK)
            abort();
        if (ms_conf_get(&copy, o[i].name, v2, sizeof(v2)) != MS_OK || strcmp(v1, v2) != 0)
            abort();
        if (memcmp(&copy, c, sizeof(copy)) != 0)
            abort();
    }
}

static void check_values(const char *s)
{
    uint64_t v, w;
    char buf[64];
    if (ms_parse_size(s, &v) == MS_OK) {
        ms_format_size(v, buf, sizeof(buf));
        if (ms_parse_size(buf, &w) != MS_OK || w != v)
            abort();
        ms_format_size_h(v, buf, sizeof(buf));
    }
    if (ms_parse_duration(s, &v) == MS_OK) {
        ms_format_duration(v, buf, sizeof(buf));
        if (ms_parse_duration(buf, &w) != MS_OK || w != v)
            abort();
        ms_format_duration_h(v, buf, sizeof(buf));
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ms_conf c;
    ms_conf_default(&c);
    char why[300];
    int rc = ms_conf_parse(&c, (const char *)data, size, why, sizeof(why));
    if (rc != MS_OK) {
        if (rc != MS_E_PARSE && rc != MS_E_INVAL && rc != MS_E_NOTFOUND)
            abort();
        if (strncmp(why, "line ", 5) != 0 || strchr(why, '\n'))
            abort();
    }
    check_round_trip(&c);
    ms_conf_check(&c, why, sizeof(why));

    /* Each line through the value parsers, bounded. */
    size_t pos = 0;
    while (pos < size) {
        const uint8_t *nl = memchr(data + pos, '\n', size - pos);
        size_t n = nl ? (size_t)(nl - (data + pos)) : size - pos;
        if (n < 128) {
            char line[128];
            memcpy(line, data + pos, n);
            line[n] = '\0';
            check_values(line);
        }
        pos += n + 1;
    }
    return 0;
}
