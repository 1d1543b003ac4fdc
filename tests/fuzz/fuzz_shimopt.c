/*
 * fuzz_shimopt.c - libFuzzer target for the shim's option parser (ipc/shimopt.c).
 *
 * The input is an environment: lines "NAME=value". Every option is read through a getter over
 * those lines. Properties: a bad value is reported once and leaves the option unset with its
 * default; a value that is set parses again to the same number; numbers stay in their rows'
 * ranges; the report fits its buffer and is one line.
 *
 * Any broken property calls abort(), which both libFuzzer and the replay runner report.
 */
#include "ipc/shimopt.h"

#include "core/ms.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_LINES 64
static char text[4096];
static char *names[MAX_LINES], *values[MAX_LINES];
static int nlines, nbad;

static const char *get(const char *name)
{
    for (int i = nlines - 1; i >= 0; i--)
        if (strcmp(names[i], name) == 0)
            return values[i];
    return NULL;
}

static void bad(void *arg, const char *why, const char *def)
{
    (void)arg;
    if (!why || !def || strchr(why, '\n') || strlen(why) >= 320)
        abort();
    nbad++;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size >= sizeof text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    nlines = 0;
    for (char *line = text; line && *line && nlines < MAX_LINES;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        char *eq = strchr(line, '=');
        if (eq) {
            *eq = '\0';
            names[nlines] = line;
            values[nlines] = eq + 1;
            nlines++;
        }
        line = nl ? nl + 1 : NULL;
    }
    struct ms_shimopts o;
    nbad = 0;
    ms_shimopts_read(&o, get, bad, NULL);
    int expect_bad = 0;
    for (int i = 0; i < MS_OPT_COUNT; i++) {
        const struct ms_shimopt_def *d = &ms_shimopt_defs[i];
        const char *t = get(d->env);
        uint64_t v = 0, def = 0;
        if (*d->def && ms_shimopt_parse((enum ms_shimopt)i, d->def, &def, NULL, 0) != MS_OK)
            abort();
        if (!t || !*t) {
            if (o.set[i] || o.value[i] != def)
                abort();
            continue;
        }
        char why[320];
        int rc = ms_shimopt_parse((enum ms_shimopt)i, t, &v, why, sizeof why);
        if (rc != MS_OK) {
            expect_bad++;
            if (o.set[i] || o.value[i] != def || strncmp(why, d->env, strlen(d->env)) != 0)
                abort();
            continue;
        }
        if (!o.set[i] || o.value[i] != v || o.text[i] != t)
            abort();
        if ((d->type == MS_OT_UINT || d->type == MS_OT_SIZE) && (v < d->min || v > d->max) &&
            !(d->zero_ok && v == 0))
            abort();
        if (d->type == MS_OT_FLAG && v > 1)
            abort();
    }
    if (nbad != expect_bad)
        abort();
    return 0;
}
