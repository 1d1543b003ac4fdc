/*
 * metrics.c - the Prometheus text exposition (format 0.0.4) of the daemon's status.
 *
 * Every family has HELP and TYPE lines; counters end in _total; units are bytes and seconds as
 * Prometheus recommends. Per-task series carry the labels gpu, task, pid and name; label values
 * are escaped (backslash, double quote, newline) as the format requires. The text is cut at a
 * line boundary if it would exceed one protocol payload (thousands of tasks).
 */
#include "daemon/daemon.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

struct out {
    struct ms_buf *b;
    int err;
};

static void put(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(struct out *o, const char *fmt, ...)
{
    if (o->err)
        return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof(line))
        n = (int)sizeof(line) - 1;
    if (o->b->len + (size_t)n > MS_PROTO_MAX_PAYLOAD) {
        o->err = MS_E_NOSPACE;
        return;
    }
    o->err = ms_buf_append(o->b, line, (size_t)n);
}

static void family(struct out *o, const char *name, const char *type, const char *help)
{
    put(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* Escape a label value into buf. */
static const char *esc(const char *s, char *buf, size_t len)
{
    size_t k = 0;
    for (; *s && k + 3 < len; s++) {
        if (*s == '\\' || *s == '"') {
            buf[k++] = '\\';
            buf[k++] = *s;
        } else if (*s == '\n') {
            buf[k++] = '\\';
            buf[k++] = 'n';
        } else {
            buf[k++] = *s;
        }
    }
    buf[k] = '\0';
    return buf;
}

static double sec(uint64_t ns)
{
    return (double)ns / 1e9;
}

int ms_metrics_text(const struct ms_msg_status *st, const struct ms_daemon_stats *ds,
                    size_t nsessions, struct ms_buf *out)
{
    out->len = 0;
    struct out o = {.b = out, .err = 0};
    unsigned g = st->gpu;
    unsigned long long u;

    family(&o, "msched_budget_bytes", "gauge", "Device memory all tasks together may hold.");
    put(&o, "msched_budget_bytes{gpu=\"%u\"} %llu\n", g, (unsigned long long)st->budget);
    family(&o, "msched_resident_bytes", "gauge", "Device memory the tasks hold now.");
    put(&o, "msched_resident_bytes{gpu=\"%u\"} %llu\n", g, (unsigned long long)st->resident);
    family(&o, "msched_uptime_seconds", "gauge", "Seconds since the daemon started.");
    put(&o, "msched_uptime_seconds{gpu=\"%u\"} %.3f\n", g, sec(st->uptime_ns));
    family(&o, "msched_slice_seconds", "gauge", "Configured base time slice.");
    put(&o, "msched_slice_seconds{gpu=\"%u\"} %.6f\n", g, sec(st->slice_ns));
    family(&o, "msched_switches_total", "counter", "Context switches (slices granted).");
    put(&o, "msched_switches_total{gpu=\"%u\"} %llu\n", g, (unsigned long long)st->switches);
    family(&o, "msched_switch_seconds_total", "counter",
           "Time from a switch's start (STOP sent) to RUN, summed.");
    put(&o, "msched_switch_seconds_total{gpu=\"%u\"} %.6f\n", g, sec(st->switch_ns_total));
    family(&o, "msched_switch_seconds_max", "gauge", "Longest context switch so far.");
    put(&o, "msched_switch_seconds_max{gpu=\"%u\"} %.6f\n", g, sec(st->switch_ns_max));
    family(&o, "msched_switch_stop_seconds_total", "counter",
           "Part of msched_switch_seconds_total spent waiting for the outgoing task to stop "
           "(its queued GPU work to drain).");
    put(&o, "msched_switch_stop_seconds_total{gpu=\"%u\"} %.6f\n", g, sec(ds->switch_stop_ns));
    family(&o, "msched_slow_switches_total", "counter",
           "Context switches longer than 100 ms (each one is logged with its stop time).");
    put(&o, "msched_slow_switches_total{gpu=\"%u\"} %llu\n", g,
        (unsigned long long)ds->slow_switches);
    family(&o, "msched_idle_holds_total", "counter",
           "Times a task that went idle kept the GPU while others waited (its hold).");
    put(&o, "msched_idle_holds_total{gpu=\"%u\"} %llu\n", g, (unsigned long long)ds->idle_holds);
    family(&o, "msched_idle_hold_resumes_total", "counter",
           "Holds that ended with the task busy again (no switch needed).");
    put(&o, "msched_idle_hold_resumes_total{gpu=\"%u\"} %llu\n", g,
        (unsigned long long)ds->idle_resumes);
    family(&o, "msched_populated_bytes_total", "counter", "Bytes copied host to device.");
    put(&o, "msched_populated_bytes_total{gpu=\"%u\"} %llu\n", g, (unsigned long long)st->bytes_in);
    family(&o, "msched_evicted_bytes_total", "counter", "Bytes evicted from the device.");
    put(&o, "msched_evicted_bytes_total{gpu=\"%u\"} %llu\n", g, (unsigned long long)st->bytes_out);
    family(&o, "msched_tasks", "gauge", "Registered tasks.");
    put(&o, "msched_tasks{gpu=\"%u\"} %u\n", g, st->ntasks);
    family(&o, "msched_sessions", "gauge", "Open client connections.");
    put(&o, "msched_sessions{gpu=\"%u\"} %zu\n", g, nsessions);
    u = (unsigned long long)ds->sessions_total;
    family(&o, "msched_sessions_total", "counter", "Client connections accepted.");
    put(&o, "msched_sessions_total{gpu=\"%u\"} %llu\n", g, u);
    family(&o, "msched_protocol_errors_total", "counter",
           "Malformed frames and protocol violations.");
    put(&o, "msched_protocol_errors_total{gpu=\"%u\"} %llu\n", g,
        (unsigned long long)ds->protocol_errors);
    family(&o, "msched_slow_clients_dropped_total", "counter",
           "Clients dropped because they did not read their messages.");
    put(&o, "msched_slow_clients_dropped_total{gpu=\"%u\"} %llu\n", g,
        (unsigned long long)ds->slow_dropped);
    family(
        &o, "msched_connections_refused_total", "counter",
        "Connections refused or recycled at a limit (max_conns_per_uid, the total, descriptors).");
    put(&o, "msched_connections_refused_total{gpu=\"%u\"} %llu\n", g,
        (unsigned long long)ds->conns_refused);
    family(&o, "msched_idle_connections_closed_total", "counter",
           "Connections that were not tasks, closed for saying nothing (hello_timeout).");
    put(&o, "msched_idle_connections_closed_total{gpu=\"%u\"} %llu\n", g,
        (unsigned long long)ds->idle_closed);

    static const struct {
        const char *name, *type, *help;
    } per[] = {
        {"msched_task_resident_bytes", "gauge", "Device memory the task holds."},
        {"msched_task_footprint_bytes", "gauge", "Bytes of all the task's allocations."},
        {"msched_task_populated_bytes_total", "counter", "Bytes populated for the task."},
        {"msched_task_evicted_bytes_total", "counter", "Bytes evicted from the task."},
        {"msched_task_slices_total", "counter", "Slices the task was given."},
        {"msched_task_run_seconds_total", "counter", "Time the task held the GPU."},
        {"msched_task_state", "gauge", "1 for the task's current state."},
    };
    for (size_t f = 0; f < MS_ARRAY_LEN(per); f++) {
        family(&o, per[f].name, per[f].type, per[f].help);
        for (uint32_t i = 0; i < st->ntasks; i++) {
            const struct ms_task_status *t = &st->tasks[i];
            char name[2 * MS_PROTO_NAME_MAX + 2];
            char labels[700];
            snprintf(labels, sizeof(labels), "gpu=\"%u\",task=\"%u\",pid=\"%u\",name=\"%s\"", g,
                     t->task, t->pid, esc(t->name, name, sizeof(name)));
            switch (f) {
            case 0:
                put(&o, "%s{%s} %llu\n", per[f].name, labels, (unsigned long long)t->resident);
                break;
            case 1:
                put(&o, "%s{%s} %llu\n", per[f].name, labels, (unsigned long long)t->footprint);
                break;
            case 2:
                put(&o, "%s{%s} %llu\n", per[f].name, labels, (unsigned long long)t->bytes_in);
                break;
            case 3:
                put(&o, "%s{%s} %llu\n", per[f].name, labels, (unsigned long long)t->bytes_out);
                break;
            case 4:
                put(&o, "%s{%s} %llu\n", per[f].name, labels, (unsigned long long)t->switches);
                break;
            case 5: put(&o, "%s{%s} %.6f\n", per[f].name, labels, sec(t->run_ns)); break;
            default:
                put(&o, "%s{%s,state=\"%s\"} 1\n", per[f].name, labels,
                    ms_task_state_name(t->state));
                break;
            }
        }
    }
    if (o.err == MS_E_NOSPACE)
        return MS_OK; /* cut at the last whole line */
    return o.err;
}
