/*
 * cmd_sim.c - `msched sim`: replay a built-in workload or a trace under several memory policies
 * on the simulated GPU and report throughput, bytes moved, faults and switch times.
 *
 * Design
 *   Parse every option first (usage errors exit 2 before any work), then load or build the
 *   workload, run the sweep (sim/sweep.h), print one table per pressure, and write the JSON and
 *   SVG files if asked ("-" writes one of them to stdout, and the table to stderr). Data errors
 *   (unreadable or malformed trace, a budget that cannot hold a slice) exit 1. A pressure point
 *   that fails does not stop the others: the table shows its reason, one error line names it,
 *   the files hold every point that ran (a failed one with its "error"), and the exit status
 *   is 1. Output files are written only after the sweep, and only when some point ran.
 */
#include "cli/cli.h"
#include "core/template.h"

#include "sim/svg.h"
#include "sim/sweep.h"

#include <errno.h>
#include <limits.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_BUDGET (16 * MS_GIB)
#define MAX_TRACE_BYTES (1ull << 32)
#define DEFAULT_SLICE_MAX (4ull * 1000 * 1000 * 1000) /* the daemon's slice_max */
#define DEFAULT_SWITCH_FRAC 10                        /* the daemon's switch_frac */

struct sim_args {
    const char *workload, *trace, *profile, *svg, *json, *dump, *templates;
    double pressures[MS_SWEEP_MAX_POINTS];
    size_t npressures;
    uint64_t budget;
    bool have_budget;
    uint64_t slice_ns, duration_ns, nslices, seed, horizon;
    uint64_t slice_max_ns, switch_frac; /* adaptive (slice_max_ns > 0) */
    bool policies[MS_SIM_NPOLICIES];
    bool hash_clean, progress, check, early_start;
};

static void sim_help(FILE *f)
{
    fprintf(
        f, "usage: msched sim [options]\n"
           "Replay GPU tasks under several memory policies on a simulated GPU (no GPU needed).\n"
           "\n"
           "  --workload NAME     built-in workload: micro (default), A, B, C, D, random\n"
           "  --trace FILE        replay a recorded trace instead (docs/trace-format.md)\n"
           "  --templates FILE    predict kernels by the templates in FILE (msched profile;\n"
           "                      docs/templates.md), taken as exact; default: whole\n"
           "                      allocations\n"
           "  --pressure LIST     footprint / budget, e.g. 1.5,2,3 or 150%%,200%% "
           "(default 1.5,2,3;\n"
           "                      with --trace: sets the budget to footprint / pressure)\n"
           "  --budget SIZE       device memory for the tasks, e.g. 16GiB (default 16 GiB)\n"
           "  --profile NAME      cost profile: h200 (default) or rtx5080\n"
           "  --slice DURATION    round-robin time slice, e.g. 200ms (default 200ms)\n"
           "  --adaptive          the daemon's adaptive policy: a slice that starts with a\n"
           "                      switch lasts until the switch is at most --switch-frac\n"
           "                      percent of it (default 10), up to --slice-max (default 4s);\n"
           "                      --slice is the shortest\n"
           "  --slice-max DURATION, --switch-frac N   set those (either implies --adaptive)\n"
           "  --policies LIST     any of opt,opt-serial,lru,whole,demand or all (default all);\n"
           "                      ideal (everything in memory) always runs as the reference\n"
           "  --duration DURATION simulated time measured per run, e.g. 30s (default 30s)\n"
           "  --slices N          measure N slices instead of a duration\n"
           "  --hash-clean on|off drop evicted chunks whose GPU hash is unchanged "
           "(default on)\n"
           "  --early-start       the daemon's early_run: a slice starts with its migration and\n"
           "                      each command once its own chunks are in\n"
           "  --horizon N         timeline entries the planner sees (default 2 x tasks)\n"
           "  --svg FILE          write a plot of throughput and bytes moved (- for stdout)\n"
           "  --json FILE         write every number as JSON (- for stdout; the table then\n"
           "                      goes to stderr)\n"
           "  --dump-trace FILE   write the built-in workload (first pressure) as a trace, "
           "then exit\n"
           "  --seed N            seed of the random workload (default 1)\n"
           "  --progress          show progress on stderr even when it is not a terminal\n"
           "  --check             verify every invariant after every step (slow)\n"
           "\n"
           "Sizes take B, KiB, MiB, GiB, TiB (K, M, G, T alone are binary too) or KB, MB, GB, TB;\n"
           "durations ns, us, ms or s.\n"
           "The model and its assumptions: docs/simulator.md; workloads: docs/workloads.md.\n");
}

static int usage(const char *fmt, const char *arg)
{
    char buf[300];
    snprintf(buf, sizeof(buf), fmt, arg);
    ms_cli_error("sim: %s (try 'msched help sim')", buf);
    return MS_EXIT_USAGE;
}

static int parse_policies(const char *s, bool *out)
{
    memset(out, 0, sizeof(bool) * MS_SIM_NPOLICIES);
    if (!*s)
        return usage("--policies needs at least one policy", "");
    for (const char *p = s;;) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        char tok[32];
        if (n == 0 || n >= sizeof(tok))
            return usage("--policies '%s' is not a list like opt,lru,demand", s);
        memcpy(tok, p, n);
        tok[n] = '\0';
        enum ms_sim_policy pol;
        if (strcmp(tok, "all") == 0) {
            for (int k = 0; k < MS_SIM_NPOLICIES; k++)
                out[k] = true;
        } else if (ms_sim_policy_parse(tok, &pol) == MS_OK) {
            out[pol] = true;
        } else {
            return usage("unknown policy '%s' (known: ideal, opt, opt-serial, lru, whole, "
                         "demand, all)",
                         tok);
        }
        if (!comma)
            return 0;
        p = comma + 1;
    }
}

enum {
    OPT_ADAPTIVE = 256,
    OPT_SLICE_MAX,
    OPT_SWITCH_FRAC,
    OPT_PROGRESS,
    OPT_CHECK,
    OPT_WORKLOAD,
    OPT_TRACE,
    OPT_TEMPLATES,
    OPT_PROFILE,
    OPT_SVG,
    OPT_JSON,
    OPT_DUMP,
    OPT_PRESSURE,
    OPT_BUDGET,
    OPT_SLICE,
    OPT_DURATION,
    OPT_SLICES,
    OPT_HORIZON,
    OPT_SEED,
    OPT_HASH_CLEAN,
    OPT_EARLY_START,
    OPT_POLICIES,
};

static const struct option longopts[] = {
    {"help", no_argument, NULL, 'h'},
    {"adaptive", no_argument, NULL, OPT_ADAPTIVE},
    {"slice-max", required_argument, NULL, OPT_SLICE_MAX},
    {"switch-frac", required_argument, NULL, OPT_SWITCH_FRAC},
    {"progress", no_argument, NULL, OPT_PROGRESS},
    {"check", no_argument, NULL, OPT_CHECK},
    {"workload", required_argument, NULL, OPT_WORKLOAD},
    {"trace", required_argument, NULL, OPT_TRACE},
    {"templates", required_argument, NULL, OPT_TEMPLATES},
    {"profile", required_argument, NULL, OPT_PROFILE},
    {"svg", required_argument, NULL, OPT_SVG},
    {"json", required_argument, NULL, OPT_JSON},
    {"dump-trace", required_argument, NULL, OPT_DUMP},
    {"pressure", required_argument, NULL, OPT_PRESSURE},
    {"budget", required_argument, NULL, OPT_BUDGET},
    {"slice", required_argument, NULL, OPT_SLICE},
    {"duration", required_argument, NULL, OPT_DURATION},
    {"slices", required_argument, NULL, OPT_SLICES},
    {"horizon", required_argument, NULL, OPT_HORIZON},
    {"seed", required_argument, NULL, OPT_SEED},
    {"hash-clean", required_argument, NULL, OPT_HASH_CLEAN},
    {"early-start", no_argument, NULL, OPT_EARLY_START},
    {"policies", required_argument, NULL, OPT_POLICIES},
    {NULL, 0, NULL, 0},
};

static int parse_args(int argc, char **argv, struct sim_args *a)
{
    memset(a, 0, sizeof(*a));
    a->profile = "h200";
    a->budget = DEFAULT_BUDGET;
    a->slice_ns = 200ull * 1000 * 1000;
    a->duration_ns = 30ull * 1000 * 1000 * 1000;
    a->seed = 1;
    a->switch_frac = DEFAULT_SWITCH_FRAC;
    a->hash_clean = true;
    for (int p = 0; p < MS_SIM_NPOLICIES; p++)
        a->policies[p] = true;
    a->pressures[0] = 1.5;
    a->pressures[1] = 2;
    a->pressures[2] = 3;
    size_t default_np = 3;
    bool have_pressure = false;
    ms_cli_getopt_reset();
    int c;
    while ((c = ms_cli_getopt(argc, argv, ":h", longopts, "sim")) != -1) {
        const char *v = optarg;
        int rc;
        switch (c) {
        case 'h': sim_help(stdout); return -1;
        case OPT_ADAPTIVE:
            if (!a->slice_max_ns)
                a->slice_max_ns = DEFAULT_SLICE_MAX;
            break;
        case OPT_SLICE_MAX:
            if (ms_cli_parse_duration(v, &a->slice_max_ns) || a->slice_max_ns == 0)
                return usage("--slice-max '%s' is not a duration like 4s", v);
            break;
        case OPT_SWITCH_FRAC:
            if (ms_cli_parse_u64(v, &a->switch_frac) || a->switch_frac < 1 || a->switch_frac > 100)
                return usage("--switch-frac '%s' is not a percentage from 1 to 100", v);
            if (!a->slice_max_ns)
                a->slice_max_ns = DEFAULT_SLICE_MAX;
            break;
        case OPT_PROGRESS: a->progress = true; break;
        case OPT_CHECK: a->check = true; break;
        case OPT_EARLY_START: a->early_start = true; break;
        case OPT_WORKLOAD: a->workload = v; break;
        case OPT_TRACE: a->trace = v; break;
        case OPT_TEMPLATES: a->templates = v; break;
        case OPT_PROFILE: a->profile = v; break;
        case OPT_SVG: a->svg = v; break;
        case OPT_JSON: a->json = v; break;
        case OPT_DUMP: a->dump = v; break;
        case OPT_PRESSURE:
            rc = ms_cli_parse_pressures(v, a->pressures, MS_SWEEP_MAX_POINTS, &a->npressures);
            if (rc == MS_E_NOSPACE)
                return usage("--pressure takes at most 16 values", "");
            if (rc == MS_E_INVAL)
                return usage("--pressure '%s': each value must be above 0 and at most 100", v);
            if (rc)
                return usage("--pressure '%s' is not a list like 1.5,2,3 or 150%%,200%%", v);
            have_pressure = true;
            break;
        case OPT_BUDGET:
            rc = ms_cli_parse_size(v, &a->budget);
            if (rc == MS_E_INVAL)
                return usage("--budget '%s' is out of range (1 B .. 1 EiB)", v);
            if (rc)
                return usage("--budget '%s' is not a size like 16GiB", v);
            a->have_budget = true;
            break;
        case OPT_SLICE:
            if (ms_cli_parse_duration(v, &a->slice_ns))
                return usage("--slice '%s' is not a duration like 200ms", v);
            break;
        case OPT_DURATION:
            if (ms_cli_parse_duration(v, &a->duration_ns))
                return usage("--duration '%s' is not a duration like 30s", v);
            break;
        case OPT_SLICES:
            if (ms_cli_parse_u64(v, &a->nslices) || a->nslices == 0 || a->nslices > 100000000)
                return usage("--slices '%s' is not a count from 1 to 100000000", v);
            break;
        case OPT_HORIZON:
            if (ms_cli_parse_u64(v, &a->horizon) || a->horizon == 0 || a->horizon > 100000)
                return usage("--horizon '%s' is not a count from 1 to 100000", v);
            break;
        case OPT_SEED:
            if (ms_cli_parse_u64(v, &a->seed))
                return usage("--seed '%s' is not an unsigned integer", v);
            break;
        case OPT_HASH_CLEAN:
            if (strcmp(v, "on") == 0)
                a->hash_clean = true;
            else if (strcmp(v, "off") == 0)
                a->hash_clean = false;
            else
                return usage("--hash-clean takes on or off, not '%s'", v);
            break;
        case OPT_POLICIES:
            rc = parse_policies(v, a->policies);
            if (rc)
                return rc;
            break;
        default: return MS_EXIT_USAGE;
        }
    }
    if (optind < argc)
        return usage("unexpected argument '%s'", argv[optind]);
    if (a->workload && a->trace)
        return usage("--workload and --trace exclude each other", "");
    if (a->json && a->svg && strcmp(a->json, "-") == 0 && strcmp(a->svg, "-") == 0)
        return usage("--json and --svg cannot both go to stdout ('-')", "");
    if (a->trace && have_pressure && a->have_budget)
        return usage("with --trace, give --pressure or --budget, not both", "");
    if (!a->trace && !a->workload)
        a->workload = "micro";
    if (a->workload) {
        size_t nb;
        const struct ms_wl_info *bi = ms_wl_builtins(&nb);
        bool known = false;
        for (size_t k = 0; k < nb; k++)
            known = known || strcmp(bi[k].name, a->workload) == 0;
        if (!known)
            return usage("unknown workload '%s' (known: micro, A, B, C, D, random)", a->workload);
    }
    if (!ms_cost_find(a->profile))
        return usage("unknown profile '%s' (known: h200, rtx5080)", a->profile);
    if (!have_pressure && !a->trace)
        a->npressures = default_np;
    if (a->trace && !have_pressure)
        a->npressures = 0;
    if (a->trace && !have_pressure && !a->have_budget)
        return usage("with --trace, give --pressure or --budget", "");
    return 0;
}

/* Write the JSON or the SVG to path ("-": stdout). */
static int write_out(const char *path, const struct ms_sweep *s, bool svg)
{
    bool std = strcmp(path, "-") == 0;
    FILE *f = std ? stdout : fopen(path, "w");
    if (!f) {
        ms_cli_error("cannot write %s: %s", path, strerror(errno));
        return MS_EXIT_RUNTIME;
    }
    errno = 0;
    int rc = svg ? ms_svg_write(s, true, f) : ms_sweep_json(s, f);
    if ((std ? fflush(f) : fclose(f)) != 0 || rc) {
        ms_cli_error("cannot write %s: %s", std ? "to stdout" : path,
                     strerror(errno ? errno : EIO));
        return MS_EXIT_RUNTIME;
    }
    return 0;
}

static int dump_trace(const struct sim_args *a, const struct ms_cost *cost)
{
    struct ms_workload w;
    ms_wl_init(&w);
    struct ms_wl_spec spec = {a->workload, a->pressures[0], a->budget, cost, a->seed};
    char why[256];
    int rc = ms_wl_builtin(&spec, &w, why, sizeof(why));
    char *text = NULL;
    size_t len = 0;
    if (!rc)
        rc = ms_wl_to_trace(&w, &text, &len);
    ms_wl_fini(&w);
    if (rc) {
        ms_cli_error("sim: %s", rc == MS_E_NOMEM ? "out of memory" : why);
        return MS_EXIT_RUNTIME;
    }
    FILE *f = fopen(a->dump, "w");
    bool ok = f && fwrite(text, 1, len, f) == len;
    if (f && fclose(f) != 0)
        ok = false;
    ms_free(text);
    if (!ok) {
        ms_cli_error("cannot write %s: %s", a->dump, strerror(errno ? errno : EIO));
        return MS_EXIT_RUNTIME;
    }
    printf("wrote %s (%zu bytes)\n", a->dump, len);
    return 0;
}

static int sim_run(int argc, char **argv)
{
    struct sim_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc)
        return rc < 0 ? 0 : rc;
    const struct ms_cost *cost = ms_cost_find(a.profile);
    if (a.dump) {
        if (!a.workload)
            return usage("--dump-trace needs a built-in --workload", "");
        return dump_trace(&a, cost);
    }

    struct ms_workload tw;
    ms_wl_init(&tw);
    struct ms_sweep_opts so;
    memset(&so, 0, sizeof(so));
    if (a.trace) {
        size_t len = 0;
        int err = 0;
        char *text = ms_cli_read_file(a.trace, MAX_TRACE_BYTES, &len, &err);
        if (!text) {
            ms_cli_error("cannot read %s: %s", a.trace, strerror(err));
            return MS_EXIT_RUNTIME;
        }
        const char *base = strrchr(a.trace, '/');
        char why[300];
        rc = ms_wl_from_trace(text, len, base ? base + 1 : a.trace, &tw, why, sizeof(why));
        free(text);
        if (rc) {
            ms_wl_fini(&tw);
            ms_cli_error("%s: %s", a.trace, rc == MS_E_NOMEM ? "out of memory" : why);
            return MS_EXIT_RUNTIME;
        }
        so.trace = &tw;
    } else {
        so.workload = a.workload;
    }
    struct ms_tmpl_store *tmpl = NULL;
    if (a.templates && (ms_tmpl_store_new(&tmpl) != MS_OK ||
                        ms_cli_load_templates(tmpl, a.templates, false) != MS_OK)) {
        if (!tmpl)
            ms_cli_error("out of memory");
        ms_tmpl_store_free(tmpl);
        ms_wl_fini(&tw);
        return MS_EXIT_RUNTIME;
    }
    memcpy(so.pressures, a.pressures, sizeof(so.pressures));
    so.npressures = a.npressures;
    so.budget = a.budget;
    so.cost = cost;
    memcpy(so.policies, a.policies, sizeof(so.policies));
    ms_replay_opts_default(&so.replay, cost, a.budget);
    so.replay.slice_ns = a.slice_ns;
    so.replay.slice_max_ns = a.slice_max_ns;
    so.replay.switch_frac_pct = (uint32_t)a.switch_frac;
    so.replay.duration_ns = a.duration_ns;
    so.replay.nslices = a.nslices;
    so.replay.hash_clean = a.hash_clean;
    so.replay.horizon = (uint32_t)a.horizon;
    so.replay.check = a.check;
    so.replay.early_start = a.early_start;
    so.replay.templates = tmpl;
    so.seed = a.seed;
    struct ms_cli_progress prog;
    ms_cli_progress_init(&prog, a.progress);
    so.progress = ms_cli_progress_cb;
    so.progress_ctx = &prog;

    char sl[32], du[32], mx[32], how[128];
    ms_fmt_ns(sl, sizeof(sl), a.slice_ns);
    ms_fmt_ns(du, sizeof(du), a.duration_ns);
    if (a.nslices)
        snprintf(du, sizeof(du), "%llu slices", (unsigned long long)a.nslices);
    snprintf(how, sizeof(how), "round-robin slices of %s", sl);
    if (a.slice_max_ns) {
        ms_fmt_ns(mx, sizeof(mx), MS_MAX(a.slice_max_ns, a.slice_ns));
        snprintf(how, sizeof(how), "adaptive slices of %s to %s (a switch at most %llu %%)", sl, mx,
                 (unsigned long long)a.switch_frac);
    }
    /* With --json - or --svg - stdout carries that file alone; the table goes to stderr. */
    FILE *human = (a.json && strcmp(a.json, "-") == 0) || (a.svg && strcmp(a.svg, "-") == 0)
                      ? stderr
                      : stdout;
    char tm[PATH_MAX + 64] = "";
    if (tmpl)
        snprintf(tm, sizeof tm, ", templates %s (%zu kernels)", a.templates,
                 ms_tmpl_store_count(tmpl));
    fprintf(human,
            "msched sim: simulated GPU (profile %s), %s, %s measured after warm-up, "
            "hash-clean %s%s%s\n\n",
            cost->name, how, du, a.hash_clean ? "on" : "off", a.early_start ? ", early start" : "",
            tm);
    fflush(human);

    struct ms_sweep *sw = malloc(sizeof(*sw));
    if (!sw) {
        ms_tmpl_store_free(tmpl);
        ms_wl_fini(&tw);
        ms_cli_error("out of memory");
        return MS_EXIT_RUNTIME;
    }
    char why[512];
    rc = ms_sweep_run(&so, sw, why, sizeof(why));
    ms_cli_progress_end(&prog);
    ms_sweep_print(sw, human);
    int status = 0;
    if (rc) {
        /* A failed point is reported; the others' results are still written. */
        ms_cli_error("%s", rc == MS_E_NOMEM ? "out of memory" : why);
        status = MS_EXIT_RUNTIME;
    }
    if (sw->n > sw->nfailed) {
        int w = 0;
        if (a.json && (w = write_out(a.json, sw, false)) == 0 && strcmp(a.json, "-") != 0)
            fprintf(human, "\nwrote %s\n", a.json);
        if (!w && a.svg && (w = write_out(a.svg, sw, true)) == 0 && strcmp(a.svg, "-") != 0)
            fprintf(human, "%swrote %s\n", a.json ? "" : "\n", a.svg);
        if (w)
            status = w;
    }
    free(sw);
    ms_tmpl_store_free(tmpl);
    ms_wl_fini(&tw);
    return status;
}

const struct ms_cli_cmd ms_cmd_sim = {
    .name = "sim",
    .summary = "replay workloads under memory policies on a simulated GPU",
    .run = sim_run,
    .help = sim_help,
};
