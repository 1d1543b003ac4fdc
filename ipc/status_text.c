/*
 * status_text.c - renders a STATUS reply as text (contract: status_text.h).
 *
 * Lines are formatted one at a time into a scratch buffer, cut to the width, and appended to
 * the output only if the whole line fits, so a short buffer loses trailing rows, never half a
 * row. Rates compare a task with the same id in the previous sample; a task that is new has no
 * rate ("-").
 */
#include "ipc/status_text.h"

#include "ipc/conf.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

struct sink {
    char *buf;
    size_t len, used;
    int width;
    int lines;
    int full;
};

static void line(struct sink *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void line(struct sink *s, const char *fmt, ...)
{
    if (s->full)
        return;
    char tmp[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    if ((size_t)n >= sizeof(tmp))
        n = (int)sizeof(tmp) - 1;
    while (n > 0 && tmp[n - 1] == ' ')
        n--;
    if (s->width > 0 && n > s->width)
        n = s->width;
    if (s->used + (size_t)n + 2 > s->len) {
        s->full = 1;
        return;
    }
    memcpy(s->buf + s->used, tmp, (size_t)n);
    s->used += (size_t)n;
    s->buf[s->used++] = '\n';
    s->buf[s->used] = '\0';
    s->lines++;
}

static const char *prio_name(int32_t p, char *buf, size_t len)
{
    if (p == 0)
        return "be";
    if (p >= 10)
        return "rt";
    snprintf(buf, len, "%d", p);
    return buf;
}

static void uptime(uint64_t ns, char *buf, size_t len)
{
    uint64_t s = ns / 1000000000ull;
    if (s < 60)
        snprintf(buf, len, "%llus", (unsigned long long)s);
    else if (s < 3600)
        snprintf(buf, len, "%llum%02llus", (unsigned long long)(s / 60),
                 (unsigned long long)(s % 60));
    else
        snprintf(buf, len, "%lluh%02llum", (unsigned long long)(s / 3600),
                 (unsigned long long)(s / 60 % 60));
}

static void rate(uint64_t now, uint64_t before, double dt, char *buf, size_t len)
{
    if (dt <= 0 || now < before) {
        snprintf(buf, len, "-");
        return;
    }
    char h[24];
    ms_format_size_h((uint64_t)((double)(now - before) / dt), h, sizeof(h));
    snprintf(buf, len, "%.24s/s", h);
}

static const struct ms_task_status *find(const struct ms_msg_status *st, uint32_t task)
{
    if (!st)
        return NULL;
    for (uint32_t i = 0; i < st->ntasks; i++)
        if (st->tasks[i].task == task)
            return &st->tasks[i];
    return NULL;
}

int ms_status_render(const struct ms_msg_status *st, const struct ms_msg_status *prev, double dt_s,
                     int width, char *buf, size_t len)
{
    struct sink s = {.buf = buf, .len = len, .width = width};
    if (len == 0)
        return 0;
    buf[0] = '\0';
    bool rates = prev && dt_s > 0;
    char up[32], slice[32], res[32], bud[32], in[32], out[32], mean[32], mx[32];
    uptime(st->uptime_ns, up, sizeof(up));
    ms_format_duration_h(st->slice_ns, slice, sizeof(slice));
    ms_format_size_h(st->resident, res, sizeof(res));
    ms_format_size_h(st->budget, bud, sizeof(bud));
    ms_format_size_h(st->bytes_in, in, sizeof(in));
    ms_format_size_h(st->bytes_out, out, sizeof(out));
    if (st->switches) {
        ms_format_duration_h(st->switch_ns_total / st->switches, mean, sizeof(mean));
        ms_format_duration_h(st->switch_ns_max, mx, sizeof(mx));
    } else {
        snprintf(mean, sizeof(mean), "-");
        snprintf(mx, sizeof(mx), "-");
    }
    line(&s, "msched: GPU %u, mschedd pid %u, up %s; policy %s, eviction %s, slice %s", st->gpu,
         st->daemon_pid, up, st->policy, st->evict, slice);
    line(&s, "memory: %s resident of %s budget (%.0f%%), %u task%s", res, bud,
         st->budget ? 100.0 * (double)st->resident / (double)st->budget : 0.0, st->ntasks,
         st->ntasks == 1 ? "" : "s");
    uint64_t host = 0, pool = 0;
    for (uint32_t i = 0; i < st->ntasks; i++) {
        host += st->tasks[i].host_bytes;
        pool += st->tasks[i].host_pool;
    }
    char hb[32], poolb[32];
    ms_format_size_h(host, hb, sizeof(hb));
    ms_format_size_h(pool, poolb, sizeof(poolb));
    if (pool)
        line(&s,
             "host: %s pinned by the tasks' shims (for memory off the device; %s of it free "
             "in their pools)",
             hb, poolb);
    else
        line(&s, "host: %s pinned by the tasks' shims (for memory off the device)", hb);
    line(&s, "mode: %s",
         st->sharing ? "shared (memory fits: tasks run at once)" : "sliced (one task at a time)");
    char refills[64] = "";
    if (st->refills)
        snprintf(refills, sizeof(refills), " (%llu refills: a stopped task ran again)",
                 (unsigned long long)st->refills);
    line(&s, "switches: %llu%s, mean %s, max %s; moved in %s, out %s",
         (unsigned long long)st->switches, refills, mean, mx, in, out);
    if (st->first_count || st->complete_count) {
        /* The switch split: STOP to the incoming task's first command, and to its working set
         * complete (after RUN under early_run); RUN to first command as the shims saw it. */
        char fm[32] = "-", cm[32] = "-", p50[32], rmx[32];
        if (st->first_count)
            ms_format_duration_h(st->first_ns_total / st->first_count, fm, sizeof(fm));
        if (st->complete_count)
            ms_format_duration_h(st->complete_ns_total / st->complete_count, cm, sizeof(cm));
        ms_format_duration_h(st->run_first_p50_ns, p50, sizeof(p50));
        ms_format_duration_h(st->run_first_max_ns, rmx, sizeof(rmx));
        line(&s,
             "  until the first command ran: mean %s; until the working set was complete: mean "
             "%s; RUN to first command: median %s, max %s",
             fm, cm, p50, rmx);
    }
    if (rates) {
        char ri[32], ro[32];
        rate(st->bytes_in, prev->bytes_in, dt_s, ri, sizeof(ri));
        rate(st->bytes_out, prev->bytes_out, dt_s, ro, sizeof(ro));
        double sw =
            st->switches >= prev->switches ? (double)(st->switches - prev->switches) / dt_s : 0.0;
        line(&s, "throughput: in %s, out %s, %.1f switches/s", ri, ro, sw);
    }
    line(&s, "%s", "");
    if (st->ntasks == 0) {
        line(&s, "no tasks");
        return s.lines;
    }
    if (rates)
        line(&s, "%-5s %-7s %-8s %-4s %-10s %-10s %-11s %-11s %-6s %-8s %-10s %-6s %s", "TASK",
             "PID", "STATE", "PRIO", "RESIDENT", "FOOTPRINT", "IN/S", "OUT/S", "SLICES", "GPU TIME",
             "HOST", "MISSES", "NAME");
    else
        line(&s, "%-5s %-7s %-8s %-4s %-10s %-10s %-10s %-10s %-6s %-8s %-10s %-6s %s", "TASK",
             "PID", "STATE", "PRIO", "RESIDENT", "FOOTPRINT", "IN", "OUT", "SLICES", "GPU TIME",
             "HOST", "MISSES", "NAME");
    for (uint32_t i = 0; i < st->ntasks; i++) {
        const struct ms_task_status *t = &st->tasks[i];
        char pb[16], r[32], f[32], a[32], b[32], g[32], h[32];
        ms_format_size_h(t->resident, r, sizeof(r));
        ms_format_size_h(t->host_bytes, h, sizeof(h));
        ms_format_size_h(t->footprint, f, sizeof(f));
        ms_format_duration_h(t->run_ns, g, sizeof(g));
        if (rates) {
            const struct ms_task_status *p = find(prev, t->task);
            rate(t->bytes_in, p ? p->bytes_in : UINT64_MAX, p ? dt_s : 0, a, sizeof(a));
            rate(t->bytes_out, p ? p->bytes_out : UINT64_MAX, p ? dt_s : 0, b, sizeof(b));
            line(&s, "%-5u %-7u %-8s %-4s %-10s %-10s %-11s %-11s %-6llu %-8s %-10s %-6llu %s",
                 t->task, t->pid, ms_task_state_name(t->state), prio_name(t->prio, pb, sizeof(pb)),
                 r, f, a, b, (unsigned long long)t->switches, g, h, (unsigned long long)t->misses,
                 t->name);
        } else {
            ms_format_size_h(t->bytes_in, a, sizeof(a));
            ms_format_size_h(t->bytes_out, b, sizeof(b));
            line(&s, "%-5u %-7u %-8s %-4s %-10s %-10s %-10s %-10s %-6llu %-8s %-10s %-6llu %s",
                 t->task, t->pid, ms_task_state_name(t->state), prio_name(t->prio, pb, sizeof(pb)),
                 r, f, a, b, (unsigned long long)t->switches, g, h, (unsigned long long)t->misses,
                 t->name);
        }
    }
    return s.lines;
}
