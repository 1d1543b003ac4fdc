/*
 * shimopt.c - the table of libmsched's options and their parsing (contract: shimopt.h).
 *
 * The table is the only place an option's name, range and default are written: the shim's
 * modules take parsed values from ms_shimopts_read, `msched run` checks its flags with
 * ms_shimopt_parse and prints its help with ms_shimopt_help.
 */
#include "ipc/shimopt.h"

#include "core/ms.h"
#include "core/proto.h"
#include "core/timeline.h"
#include "core/units.h"

#include <stdlib.h>
#include <string.h>

#define MIB (1ull << 20)

/* clang-format off */
const struct ms_shimopt_def ms_shimopt_defs[MS_OPT_COUNT] = {
    [MS_OPT_PRIORITY] = {"MSCHED_PRIORITY", "--priority", "rt|be|N", NULL, MS_OT_PRIORITY, 0, 0,
        false, NULL, "be", "scheduling priority, 0-10 (rt = real-time = 10, be = 0)"},
    [MS_OPT_WEIGHT] = {"MSCHED_WEIGHT", "--weight", "N", NULL, MS_OT_UINT, 0,
        MS_PROTO_WEIGHT_MAX, false, NULL, "1",
        "share of GPU time relative to other tasks, 0-1000 (0 means 1)"},
    [MS_OPT_BUDGET] = {"MSCHED_BUDGET", "--budget", "SIZE", NULL, MS_OT_SIZE, MS_GRAN, UINT64_MAX,
        false, NULL, "", "device memory this process may keep resident (e.g. 16GiB, at least\n"
        "2MiB); beyond it the shim evicts and repopulates its own memory"},
    [MS_OPT_ENGINE] = {"MSCHED_ENGINE", "--engine", "vmm|unified|demand|off", NULL, MS_OT_WORD, 0,
        0, false, "vmm unified demand off", "vmm",
        "vmm: explicit migration (default); unified: managed memory,\n"
        "prefetched in and out; demand: managed memory prefetched\n"
        "out, faulted in (the demand-paging baseline); off: observe"},
    [MS_OPT_TRACE] = {"MSCHED_TRACE", "--trace", "FILE", NULL, MS_OT_PATH, 0, 0, false, NULL, "",
        "record the program's command stream (msched sim --trace);\n"
        "%p in FILE becomes the process id"},
    [MS_OPT_DAEMON] = {"MSCHED_DAEMON", "--no-daemon", NULL, "off", MS_OT_WORD, 0, 0, false,
        "on off", "on", "do not join (or start) mschedd: the program runs alone"},
    [MS_OPT_VERBOSE] = {"MSCHED_VERBOSE", "--verbose", NULL, "1", MS_OT_FLAG, 0, 0, false, NULL,
        "0", "the shim reports what it does on stderr"},
    [MS_OPT_STRICT] = {"MSCHED_STRICT", "--strict", NULL, "1", MS_OT_FLAG, 0, 0, false, NULL, "0",
        "check predictions: before every command, evict every chunk it does\n"
        "not name (alone, vmm engine; slow by design)"},
    [MS_OPT_IDLE_MS] = {"MSCHED_IDLE_MS", NULL, "MS", NULL, MS_OT_UINT, 0, 60000, false, NULL,
        "20", "quiet time after which a running task tells the daemon it is idle (0: never)"},
    [MS_OPT_DAEMON_TIMEOUT_MS] = {"MSCHED_DAEMON_TIMEOUT_MS", NULL, "MS", NULL, MS_OT_UINT, 100,
        3600000, true, NULL, "30000",
        "a daemon silent this long while the task waits on it is treated as gone (0: never)"},
    [MS_OPT_PIN_PIECE] = {"MSCHED_PIN_PIECE", NULL, "SIZE", NULL, MS_OT_SIZE, 0, UINT64_MAX, false,
        NULL, "64MiB", "host backing is pinned in pieces of this size (0: one call)"},
    [MS_OPT_VMM_EXPORTABLE] = {"MSCHED_VMM_EXPORTABLE", NULL, "0|1", NULL, MS_OT_FLAG, 0, 0, false,
        NULL, "1", "virtualize the application's exportable VMM handles too (their export is\n"
        "refused; 0: pass them to the driver, outside the budget)"},
    [MS_OPT_REAL_LIBCUDA] = {"MSCHED_REAL_LIBCUDA", NULL, "PATH", NULL, MS_OT_PATH, 0, 0, false,
        NULL, "", "the real CUDA driver to load (default: searched)"},
    [MS_OPT_ACCURACY] = {"MSCHED_ACCURACY", NULL, "FILE", NULL, MS_OT_PATH, 0, 0, false, NULL, "",
        "measure prediction accuracy with CUPTI into FILE (demand engine, alone)"},
    [MS_OPT_ACCURACY_MAX] = {"MSCHED_ACCURACY_MAX", NULL, "N", NULL, MS_OT_UINT, 1, 100000000,
        false, NULL, "2000", "launches the accuracy probe measures"},
    [MS_OPT_MISPREDICT] = {"MSCHED_MISPREDICT", NULL, "PERCENT", NULL, MS_OT_UINT, 0, 100, false,
        NULL, "0", "tests: drop this percent of every command's predicted chunks (alone;\n"
        "with MSCHED_STRICT=1 they run on the host: slower, never wrong)"},
    [MS_OPT_HOST_LIMIT] = {"MSCHED_HOST_LIMIT", "--host-limit", "SIZE", NULL, MS_OT_SIZE, MS_GRAN,
        UINT64_MAX, true, NULL, "", "pinned host memory that holds this process's memory off the\n"
        "device may take at most this (default: half the machine's RAM;\n"
        "0: no limit); beyond it allocations that do not fit the device fail\n"
        "and commands run on what is resident"},
    [MS_OPT_CUPTI] = {"MSCHED_CUPTI", NULL, "PATH", NULL, MS_OT_PATH, 0, 0, false, NULL, "",
        "the CUPTI library the accuracy probe loads (default: searched)"},
    [MS_OPT_PROFILE] = {"MSCHED_PROFILE", NULL, "FILE", NULL, MS_OT_PATH, 0, 0, false, NULL, "",
        "record what sampled kernel launches touch into FILE (engine off;\n"
        "msched profile sets it)"},
    [MS_OPT_PROFILE_FIRST] = {"MSCHED_PROFILE_FIRST", NULL, "N", NULL, MS_OT_UINT, 0, 1000000000,
        false, NULL, "4", "the profiler profiles the first N launches of each kernel"},
    [MS_OPT_PROFILE_EVERY] = {"MSCHED_PROFILE_EVERY", NULL, "N", NULL, MS_OT_UINT, 1, 1000000000,
        false, NULL, "32", "... and then one launch in N"},
    [MS_OPT_SANITIZER] = {"MSCHED_SANITIZER", NULL, "PATH", NULL, MS_OT_PATH, 0, 0, false, NULL,
        "", "the Compute Sanitizer library (libsanitizer-public.so) the profiler\n"
        "loads (default: searched)"},
    [MS_OPT_TEMPLATES] = {"MSCHED_TEMPLATES", "--templates", "FILE|off", NULL, MS_OT_PATH, 0, 0,
        false, NULL, "", "the kernel templates the engine predicts with (docs/templates.md;\n"
        "default: the store msched profile writes, when there is one); off:\n"
        "whole allocations"},
    [MS_OPT_REVERSE_DEMAND] = {"MSCHED_REVERSE_DEMAND", NULL, "0|1", NULL, MS_OT_FLAG, 0, 0,
        false, NULL, "0", "tests: name each DEMAND's chunks to the daemon in reverse order, so\n"
        "its populations come in the wrong order (commands must still wait\n"
        "for their own chunks)"},
    [MS_OPT_CHUNK] = {"MSCHED_CHUNK", "--chunk", "SIZE", NULL, MS_OT_SIZE, MS_GRAN,
        MS_CHUNK_MAX, false, NULL, "64MiB", "the unit of movement of allocations larger than twice\n"
        "it (smaller ones move whole), rounded up to a multiple of 2MiB:\n"
        "smaller chunks move less of a big allocation that kernel templates\n"
        "predict a part of, at more mapping work per byte"},
    [MS_OPT_DEFER_HOST_MAP] = {"MSCHED_DEFER_HOST_MAP", NULL, "0|1|2", NULL, MS_OT_UINT, 0, 2,
        false, NULL, "1", "under the daemon, a stopped task's evicted memory is mapped to its\n"
        "host copy after the eviction (or never, when it is populated back\n"
        "first) instead of within it; 0: within it; 2 (tests): only just\n"
        "before the next command"},
    [MS_OPT_HOST_POOL] = {"MSCHED_HOST_POOL", NULL, "SIZE", NULL, MS_OT_SIZE, MS_GRAN, UINT64_MAX,
        true, NULL, "1GiB", "pinned host memory of freed allocations kept for the next ones\n"
        "(pinning takes time; within MSCHED_HOST_LIMIT, given back at it; 0:\n"
        "unpin at once)"},
    [MS_OPT_HOST_POOL_IDLE_MS] = {"MSCHED_HOST_POOL_IDLE_MS", NULL, "MS", NULL, MS_OT_UINT, 1,
        86400000, true, NULL, "30000", "under the daemon, pinned host memory that sat unused in\n"
        "the pool this long is unpinned, a piece at a time (0: never)"},
    [MS_OPT_PACK_SMALL] = {"MSCHED_PACK_SMALL", NULL, "0|1", NULL, MS_OT_FLAG, 0, 0, false, NULL,
        "1", "allocations of up to 1 MiB share 2 MiB slabs (0: each is a region of\n"
        "its own, 2 MiB of the budget at least)"},
    [MS_OPT_PROGRESS_MS] = {"MSCHED_PROGRESS_MS", NULL, "MS", NULL, MS_OT_UINT, 100, 86400000,
        true, NULL, "0", "with MSCHED_VERBOSE, a line of the engine's counters this often\n"
        "while commands come (0, the default: only the exit summary)"},
    [MS_OPT_GRAPH_PIECES] = {"MSCHED_GRAPH_PIECES", NULL, "0|1", NULL, MS_OT_FLAG, 0, 0, false,
        NULL, "1", "a CUDA graph whose nodes name more than the budget runs as\n"
        "consecutive pieces, each with its own memory made resident first\n"
        "(0: whole, what does not fit read from host memory)"},
    [MS_OPT_PHASES] = {"MSCHED_PHASES", NULL, "0|1", NULL, MS_OT_FLAG, 0, 0, false, NULL, "0",
        "at exit, the time each phase of a kernel launch took in libmsched\n"
        "(packing, prediction, the gate, the daemon client, the driver call),\n"
        "summed over the run; costs two clock reads a phase"},
    [MS_OPT_SETTLED] = {"MSCHED_SETTLED", NULL, "0|1", NULL, MS_OT_FLAG, 0, 0, false, NULL, "0",
        "running alone, while every chunk is on the device: commands skip\n"
        "the prediction, the history and the pins (a fast path when memory\n"
        "fits; the history then starts again at the next migration)"},
    [MS_OPT_SOCKET] = {"MSCHED_SOCKET", NULL, "PATH", NULL, MS_OT_PATH, 0, 0, false, NULL, "",
        "the daemon's socket (default: $XDG_RUNTIME_DIR/msched/gpuN.sock or\n"
        "/tmp/msched-UID/gpuN.sock)"},
    [MS_OPT_SERVICE_USER] = {"MSCHED_SERVICE_USER", NULL, "USER", NULL, MS_OT_PATH, 0, 0, false,
        NULL, "", "a service user (besides yourself and root) whose daemon socket clients trust"},
};
/* clang-format on */

static int word_index(const char *words, const char *text, uint64_t *out)
{
    size_t n = strlen(text);
    uint64_t i = 0;
    for (const char *w = words; *w; i++) {
        const char *end = strchr(w, ' ');
        size_t len = end ? (size_t)(end - w) : strlen(w);
        if (len == n && strncmp(w, text, n) == 0) {
            *out = i;
            return MS_OK;
        }
        w += len + (end ? 1 : 0);
    }
    return MS_E_INVAL;
}

static int parse_uint(const char *text, uint64_t *out)
{
    if (!*text || *text == '-' || *text == '+' || *text == ' ')
        return MS_E_INVAL;
    char *end = NULL;
    unsigned long long v = strtoull(text, &end, 10);
    if (*end)
        return MS_E_INVAL;
    *out = v;
    return MS_OK;
}

void ms_shimopt_expect(enum ms_shimopt id, char *buf, size_t n)
{
    const struct ms_shimopt_def *d = &ms_shimopt_defs[id];
    switch (d->type) {
    case MS_OT_SIZE:
        if (d->max == UINT64_MAX)
            snprintf(buf, n, "a size%s%s (e.g. 16GiB)", d->min ? " of at least " : "",
                     d->min ? "2MiB" : "");
        else
            snprintf(buf, n, "a size");
        break;
    case MS_OT_UINT:
        if (d->zero_ok)
            snprintf(buf, n, "0 or %llu..%llu", (unsigned long long)d->min,
                     (unsigned long long)d->max);
        else
            snprintf(buf, n, "%llu..%llu", (unsigned long long)d->min, (unsigned long long)d->max);
        break;
    case MS_OT_WORD: {
        snprintf(buf, n, "one of %s", d->words);
        break;
    }
    case MS_OT_PRIORITY: snprintf(buf, n, "rt, be or %d..%d", MS_PRIO_BE, MS_PRIO_RT); break;
    case MS_OT_FLAG: snprintf(buf, n, "0 or 1"); break;
    case MS_OT_PATH: snprintf(buf, n, "a path"); break;
    }
}

int ms_shimopt_parse(enum ms_shimopt id, const char *text, uint64_t *value, char *why,
                     size_t whylen)
{
    if ((unsigned)id >= MS_OPT_COUNT || !text)
        return MS_E_INVAL;
    const struct ms_shimopt_def *d = &ms_shimopt_defs[id];
    uint64_t v = 0;
    int e = *text ? MS_OK : MS_E_INVAL;
    if (e == MS_OK) {
        switch (d->type) {
        case MS_OT_SIZE:
            e = ms_parse_size(text, &v);
            if (e == MS_OK && (v < d->min || v > d->max) && !(d->zero_ok && v == 0))
                e = MS_E_INVAL;
            break;
        case MS_OT_UINT:
            e = parse_uint(text, &v);
            if (e == MS_OK && (v < d->min || v > d->max) && !(d->zero_ok && v == 0))
                e = MS_E_INVAL;
            break;
        case MS_OT_WORD: e = word_index(d->words, text, &v); break;
        case MS_OT_PRIORITY:
            if (strcmp(text, "rt") == 0)
                v = MS_PRIO_RT;
            else if (strcmp(text, "be") == 0)
                v = MS_PRIO_BE;
            else if (parse_uint(text, &v) != MS_OK || v > MS_PRIO_RT)
                e = MS_E_INVAL;
            break;
        case MS_OT_FLAG:
            if (word_index("1 yes on true", text, &v) == MS_OK)
                v = 1;
            else if (word_index("0 no off false", text, &v) == MS_OK)
                v = 0;
            else
                e = MS_E_INVAL;
            break;
        case MS_OT_PATH: break;
        }
    }
    if (e == MS_OK) {
        *value = v;
        return MS_OK;
    }
    if (why && whylen) {
        char exp[96];
        ms_shimopt_expect(id, exp, sizeof exp);
        snprintf(why, whylen, "%s=%.200s is not %s", d->env, text, exp);
    }
    return MS_E_INVAL;
}

void ms_shimopts_read(struct ms_shimopts *o, const char *(*get)(const char *name),
                      void (*bad)(void *arg, const char *why, const char *def), void *arg)
{
    memset(o, 0, sizeof(*o));
    for (int i = 0; i < MS_OPT_COUNT; i++) {
        const struct ms_shimopt_def *d = &ms_shimopt_defs[i];
        uint64_t v = 0;
        if (*d->def)
            (void)ms_shimopt_parse((enum ms_shimopt)i, d->def, &v, NULL, 0);
        o->value[i] = v;
        const char *t = get ? get(d->env) : NULL;
        if (!t || !*t)
            continue;
        char why[320];
        if (ms_shimopt_parse((enum ms_shimopt)i, t, &v, why, sizeof why) != MS_OK) {
            if (bad)
                bad(arg, why, *d->def ? d->def : "unset");
            continue;
        }
        o->set[i] = true;
        o->value[i] = v;
        o->text[i] = t;
    }
}

int ms_shimopt_by_flag(const char *flag)
{
    for (int i = 0; flag && i < MS_OPT_COUNT; i++)
        if (ms_shimopt_defs[i].flag && strcmp(ms_shimopt_defs[i].flag, flag) == 0)
            return i;
    return -1;
}

/* One help entry: "  NAME  text", the text's lines aligned at column col. */
static void entry(FILE *f, const char *name, const char *help, int col)
{
    int w = fprintf(f, "  %s", name);
    if (w + 2 > col) {
        fputc('\n', f);
        w = 0;
    }
    fprintf(f, "%*s", col - w, "");
    for (const char *p = help; *p; p++) {
        fputc(*p, f);
        if (*p == '\n')
            fprintf(f, "%*s", col, "");
    }
    fputc('\n', f);
}

void ms_shimopt_help(FILE *f)
{
    char name[96];
    for (int i = 0; i < MS_OPT_COUNT; i++) {
        const struct ms_shimopt_def *d = &ms_shimopt_defs[i];
        if (!d->flag)
            continue;
        snprintf(name, sizeof name, "%s%s%s", d->flag, d->metavar ? " " : "",
                 d->metavar ? d->metavar : "");
        entry(f, name, d->help, 22);
    }
    fprintf(f, "\nenvironment (the options above set these; the others are read as given):\n");
    for (int i = 0; i < MS_OPT_COUNT; i++) {
        const struct ms_shimopt_def *d = &ms_shimopt_defs[i];
        char line[512];
        if (d->flag)
            snprintf(line, sizeof line, "set by %s%s%s", d->flag, *d->def ? "; default " : "",
                     d->def);
        else
            snprintf(line, sizeof line, "%s%s%s", d->help, *d->def ? "; default " : "", d->def);
        entry(f, d->env, line, 28);
    }
}

int ms_shimopt_templates_default(const char *(*get)(const char *name), char *out, size_t cap)
{
    const char *xdg = get("XDG_CACHE_HOME"), *home = get("HOME");
    int n;
    if (xdg && xdg[0] == '/')
        n = snprintf(out, cap, "%s/msched/templates", xdg);
    else if (home && home[0] == '/')
        n = snprintf(out, cap, "%s/.cache/msched/templates", home);
    else
        return MS_E_NOTFOUND;
    return n > 0 && (size_t)n < cap ? MS_OK : MS_E_INVAL;
}
