/*
 * sweep.c - run a workload at several pressures under several policies; print and export.
 *
 * Each point builds its workload afresh (built-ins scale with the pressure), runs ideal first,
 * then the asked policies in enum order, and frees the workload. A point that fails records
 * why and the sweep goes on with the next: one pressure that cannot fit (a slice larger than
 * the budget) must not cost the results of the others. Output functions only read the
 * finished sweep and show a failed point with its reason.
 */
#include "sim/sweep.h"

#include <math.h>
#include <string.h>

void ms_fmt_bytes(char *buf, size_t cap, uint64_t b)
{
    if (b == 0)
        snprintf(buf, cap, "0 B");
    else if (b >= MS_GIB)
        snprintf(buf, cap, "%.2f GiB", (double)b / (double)MS_GIB);
    else if (b >= MS_MIB)
        snprintf(buf, cap, "%.1f MiB", (double)b / (double)MS_MIB);
    else
        snprintf(buf, cap, "%.1f KiB", (double)b / (double)MS_KIB);
}

void ms_fmt_ns(char *buf, size_t cap, uint64_t ns)
{
    if (ns >= 1000000000ull)
        snprintf(buf, cap, "%.2f s", (double)ns / 1e9);
    else if (ns >= 1000000ull)
        snprintf(buf, cap, "%.1f ms", (double)ns / 1e6);
    else if (ns >= 1000ull)
        snprintf(buf, cap, "%.1f us", (double)ns / 1e3);
    else
        snprintf(buf, cap, "%llu ns", (unsigned long long)ns);
}

struct prog {
    const struct ms_sweep_opts *o;
    char label[96];
};

static void on_progress(void *ctx, double done)
{
    struct prog *p = ctx;
    p->o->progress(p->o->progress_ctx, p->label, done);
}

static int run_point(const struct ms_sweep_opts *o, const struct ms_workload *w, uint64_t budget,
                     struct ms_sweep_point *pt, char *why, size_t whylen)
{
    pt->budget = budget;
    pt->footprint = ms_wl_footprint(w, UINT32_MAX);
    pt->actual_pressure = (double)pt->footprint / (double)budget;
    pt->ntasks = w->ntasks;
    snprintf(pt->desc, sizeof(pt->desc), "%s", w->desc);
    struct prog pg = {.o = o};
    for (int p = 0; p < MS_SIM_NPOLICIES; p++) {
        if (p != MS_SIM_IDEAL && !o->policies[p])
            continue;
        struct ms_replay_opts ro = o->replay;
        ro.policy = (enum ms_sim_policy)p;
        ro.cost = o->cost;
        ro.budget = budget;
        if (o->progress) {
            snprintf(pg.label, sizeof(pg.label), "%s %.0f%% %s", w->name, 100 * pt->actual_pressure,
                     ms_sim_policy_name(ro.policy));
            ro.progress = on_progress;
            ro.progress_ctx = &pg;
        } else {
            ro.progress = NULL;
        }
        char rwhy[256];
        int rc = ms_replay_run(w, &ro, &pt->res[p], rwhy, sizeof(rwhy));
        if (rc) {
            snprintf(why, whylen, "%s at %.0f%% pressure, policy %s: %s", w->name,
                     100 * pt->actual_pressure, ms_sim_policy_name(ro.policy), rwhy);
            return rc;
        }
        pt->ran[p] = true;
    }
    return MS_OK;
}

int ms_sweep_run(const struct ms_sweep_opts *o, struct ms_sweep *out, char *why, size_t whylen)
{
    memset(out, 0, sizeof(*out));
    if (!o->cost || (!o->workload && !o->trace) || o->npressures > MS_SWEEP_MAX_POINTS) {
        snprintf(why, whylen, "bad sweep options");
        return MS_E_INVAL;
    }
    snprintf(out->workload, sizeof(out->workload), "%s", o->trace ? o->trace->name : o->workload);
    out->profile = o->cost->name;
    out->slice_ns = o->replay.slice_ns;
    out->slice_max_ns = o->replay.slice_max_ns;
    out->switch_frac_pct = o->replay.slice_max_ns ? o->replay.switch_frac_pct : 0;
    out->duration_ns = o->replay.duration_ns;
    out->nslices = o->replay.nslices;
    out->hash_clean = o->replay.hash_clean;
    out->early_start = o->replay.early_start;
    out->seed = o->seed;
    size_t first_fail = 0;
    int first_rc = MS_OK;
    size_t n = o->trace ? (o->npressures ? o->npressures : 1) : o->npressures;
    uint64_t foot = o->trace ? ms_wl_footprint(o->trace, UINT32_MAX) : 0;
    for (size_t i = 0; i < n; i++) {
        struct ms_sweep_point *pt = &out->pts[out->n++];
        memset(pt, 0, sizeof(*pt));
        int rc;
        if (o->trace) {
            uint64_t budget = o->budget;
            if (o->npressures) {
                pt->pressure = o->pressures[i];
                double b = (double)foot / o->pressures[i];
                budget = b < (double)MS_GRAN ? MS_GRAN : (uint64_t)b / MS_GRAN * MS_GRAN;
            }
            if (budget == 0) {
                snprintf(pt->error, sizeof(pt->error), "no budget for the trace");
                rc = MS_E_INVAL;
            } else {
                rc = run_point(o, o->trace, budget, pt, pt->error, sizeof(pt->error));
            }
        } else {
            struct ms_workload w;
            ms_wl_init(&w);
            struct ms_wl_spec spec = {
                .name = o->workload,
                .pressure = o->pressures[i],
                .budget = o->budget,
                .cost = o->cost,
                .seed = o->seed,
            };
            pt->pressure = o->pressures[i];
            pt->budget = o->budget;
            rc = ms_wl_builtin(&spec, &w, pt->error, sizeof(pt->error));
            if (!rc)
                rc = run_point(o, &w, o->budget, pt, pt->error, sizeof(pt->error));
            ms_wl_fini(&w);
        }
        pt->rc = rc;
        if (rc) {
            if (!first_rc) {
                first_rc = rc;
                first_fail = i;
            }
            out->nfailed++;
        } else {
            pt->error[0] = '\0';
        }
    }
    if (first_rc) {
        const struct ms_sweep_point *pt = &out->pts[first_fail];
        if (out->nfailed == 1)
            snprintf(why, whylen, "point %zu of %zu (pressure %.0f%%) failed: %s", first_fail + 1,
                     out->n, 100 * pt->pressure, pt->error);
        else
            snprintf(why, whylen, "%zu of %zu points failed, the first (pressure %.0f%%): %s",
                     out->nfailed, out->n, 100 * pt->pressure, pt->error);
    }
    return first_rc;
}

double ms_sweep_norm(const struct ms_sweep *s, size_t i, enum ms_sim_policy p)
{
    const struct ms_sweep_point *pt = &s->pts[i];
    if (!pt->ran[p] || !pt->ran[MS_SIM_IDEAL] || pt->res[MS_SIM_IDEAL].throughput <= 0)
        return 0;
    return pt->res[p].throughput / pt->res[MS_SIM_IDEAL].throughput;
}

void ms_sweep_print(const struct ms_sweep *s, FILE *f)
{
    char a[32], b[32], c[32], d[32];
    for (size_t i = 0; i < s->n; i++) {
        const struct ms_sweep_point *pt = &s->pts[i];
        ms_fmt_bytes(a, sizeof(a), pt->footprint);
        ms_fmt_bytes(b, sizeof(b), pt->budget);
        if (pt->rc && pt->footprint == 0) { /* failed before its workload existed */
            fprintf(f, "%s at pressure %.0f%%, budget %s: FAILED: %s\n", s->workload,
                    100 * pt->pressure, b, pt->error);
            if (i + 1 < s->n)
                fprintf(f, "\n");
            continue;
        }
        fprintf(f, "%s\n", pt->desc);
        if (pt->pressure > 0)
            fprintf(f, "pressure %.0f%% (asked %.0f%%): footprint %s, budget %s, %zu tasks\n",
                    100 * pt->actual_pressure, 100 * pt->pressure, a, b, pt->ntasks);
        else
            fprintf(f, "pressure %.0f%%: footprint %s, budget %s, %zu tasks\n",
                    100 * pt->actual_pressure, a, b, pt->ntasks);
        fprintf(f, "  %-11s %10s %11s %11s %11s %10s %9s %12s%s\n", "policy", "throughput",
                "bytes in", "bytes out", "dropped", "faults", "switches", "mean switch",
                s->slice_max_ns ? "   mean slice" : "");
        for (int p = 0; p < MS_SIM_NPOLICIES; p++) {
            if (!pt->ran[p])
                continue;
            const struct ms_replay_result *r = &pt->res[p];
            ms_fmt_bytes(a, sizeof(a), r->bytes_in);
            ms_fmt_bytes(b, sizeof(b), r->bytes_out);
            ms_fmt_bytes(c, sizeof(c), r->bytes_dropped);
            ms_fmt_ns(d, sizeof(d), r->switches ? r->switch_ns / r->switches : 0);
            double pct = 100 * ms_sweep_norm(s, i, (enum ms_sim_policy)p);
            fprintf(f, "  %-11s %9.*f%% %11s %11s %11s %10llu %9llu %12s",
                    ms_sim_policy_name((enum ms_sim_policy)p), pct < 1 && pct > 0 ? 3 : 1, pct, a,
                    b, c, (unsigned long long)r->faults, (unsigned long long)r->switches, d);
            if (s->slice_max_ns) {
                ms_fmt_ns(d, sizeof(d), r->slices ? r->slice_ns / r->slices : 0);
                fprintf(f, " %12s", d);
            }
            fputc('\n', f);
        }
        if (pt->rc)
            fprintf(f, "  FAILED: %s\n", pt->error);
        if (i + 1 < s->n)
            fprintf(f, "\n");
    }
}

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

int ms_sweep_json(const struct ms_sweep *s, FILE *f)
{
    fprintf(f, "{\n  \"format\": \"msched-sim-1\",\n  \"workload\": ");
    json_str(f, s->workload);
    fprintf(f, ",\n  \"profile\": ");
    json_str(f, s->profile ? s->profile : "");
    fprintf(f,
            ",\n  \"slice_ns\": %llu,\n  \"slice_max_ns\": %llu,\n  \"switch_frac_pct\": %u,\n"
            "  \"duration_ns\": %llu,\n  \"nslices\": %llu,\n"
            "  \"hash_clean\": %s,\n  \"early_start\": %s,\n  \"seed\": %llu,\n  \"points\": [",
            (unsigned long long)s->slice_ns, (unsigned long long)s->slice_max_ns,
            (unsigned)s->switch_frac_pct, (unsigned long long)s->duration_ns,
            (unsigned long long)s->nslices, s->hash_clean ? "true" : "false",
            s->early_start ? "true" : "false", (unsigned long long)s->seed);
    for (size_t i = 0; i < s->n; i++) {
        const struct ms_sweep_point *pt = &s->pts[i];
        fprintf(f, "%s\n    {\n      \"pressure\": %.4f,\n      \"actual_pressure\": %.4f,\n",
                i ? "," : "", pt->pressure, pt->actual_pressure);
        fprintf(f, "      \"budget\": %llu,\n      \"footprint\": %llu,\n      \"tasks\": %zu,\n",
                (unsigned long long)pt->budget, (unsigned long long)pt->footprint, pt->ntasks);
        fprintf(f, "      \"desc\": ");
        json_str(f, pt->desc);
        if (pt->rc) {
            fprintf(f, ",\n      \"error\": ");
            json_str(f, pt->error);
        }
        fprintf(f, ",\n      \"policies\": {");
        bool first = true;
        for (int p = 0; p < MS_SIM_NPOLICIES; p++) {
            if (!pt->ran[p])
                continue;
            const struct ms_replay_result *r = &pt->res[p];
            fprintf(f, "%s\n        \"%s\": {", first ? "" : ",",
                    ms_sim_policy_name((enum ms_sim_policy)p));
            first = false;
            fprintf(f, "\"normalized_throughput\": %.6f, \"throughput\": %.6f, ",
                    ms_sweep_norm(s, i, (enum ms_sim_policy)p), r->throughput);
            fprintf(f, "\"total_ns\": %llu, \"compute_ns\": %llu, ",
                    (unsigned long long)r->total_ns, (unsigned long long)r->compute_ns);
            fprintf(f,
                    "\"bytes_in\": %llu, \"bytes_out\": %llu, \"bytes_dropped\": %llu, "
                    "\"bytes_fresh\": %llu, ",
                    (unsigned long long)r->bytes_in, (unsigned long long)r->bytes_out,
                    (unsigned long long)r->bytes_dropped, (unsigned long long)r->bytes_fresh);
            fprintf(f,
                    "\"faults\": %llu, \"fault_ns\": %llu, \"switches\": %llu, "
                    "\"switch_ns\": %llu, \"mean_switch_ns\": %llu, \"first_ns\": %llu, ",
                    (unsigned long long)r->faults, (unsigned long long)r->fault_ns,
                    (unsigned long long)r->switches, (unsigned long long)r->switch_ns,
                    (unsigned long long)(r->switches ? r->switch_ns / r->switches : 0),
                    (unsigned long long)r->first_ns);
            fprintf(f,
                    "\"slices\": %llu, \"mean_slice_ns\": %llu, \"commands\": %llu, "
                    "\"peak_resident\": %llu, \"misses\": %llu, \"hashes\": %llu}",
                    (unsigned long long)r->slices,
                    (unsigned long long)(r->slices ? r->slice_ns / r->slices : 0),
                    (unsigned long long)r->commands, (unsigned long long)r->peak_resident,
                    (unsigned long long)r->misses, (unsigned long long)r->hashes);
        }
        fprintf(f, "\n      }\n    }");
    }
    fprintf(f, "\n  ]\n}\n");
    return ferror(f) ? MS_E_IO : MS_OK;
}
