/*
 * config.c - libmsched's options, read once from the environment (contract: config.h).
 */
#include "shim/config.h"

#include "core/ms.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct ms_shimopts opts;

static const char *get(const char *name)
{
    return secure_getenv(name);
}

static void bad(void *arg, const char *why, const char *def)
{
    (void)arg;
    ms__shim_say("%s; using %s", why, def);
}

void ms__shim_config_load(void)
{
    ms_shimopts_read(&opts, get, bad, NULL);
}

const struct ms_shimopts *ms__shim_opts(void)
{
    return &opts;
}

uint64_t ms__shim_opt(enum ms_shimopt id)
{
    return ms__shim_opts()->value[id];
}

bool ms__shim_opt_set(enum ms_shimopt id)
{
    return ms__shim_opts()->set[id];
}

const char *ms__shim_opt_text(enum ms_shimopt id)
{
    return ms__shim_opts()->text[id];
}

int ms__shim_templates_path(char *out, size_t cap)
{
    const char *t = ms__shim_opt_text(MS_OPT_TEMPLATES);
    if (t && strcmp(t, "off") == 0)
        return 0;
    if (t && snprintf(out, cap, "%s", t) >= (int)cap) {
        ms__shim_say("MSCHED_TEMPLATES is longer than a path may be; predicting whole allocations");
        return 0;
    }
    if (t)
        return 1;
    return ms_shimopt_templates_default(get, out, cap) == MS_OK ? 2 : 0;
}
