/*
 * metrics.c - the Prometheus text exposition (format 0.0.4) of the daemon's status.
 *
 * Every family has HELP and TYPE lines; counters end in _total; units are bytes and seconds as
 * Prometheus recommends. Per-task series carry the labels gpu, task, pid, name and uid (the
 * numeric uid of the task's process, from its connection's credentials: a user name would need
 * an NSS lookup that may block the loop); label values are escaped (backslash, double quote,
 * newline) as the format requires. Two histograms cover every switch: its duration and the
 * bytes it moved (evicted plus populated), with cumulative le buckets, _sum and _count. The
 * text is cut at a line boundary if it would exceed one protocol payload (thousands of tasks).
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

/* The histograms' upper bounds (the last bucket is +Inf). */
static const uint64_t switch_le_ns[MS_SWITCH_HIST_BUCKETS - 1] = {
    1000000ull,   5000000ull,   10000000ull,   25000000ull,   50000000ull,   100000000ull,
    250000000ull, 500000000ull, 1000000000ull, 2500000000ull, 5000000000ull, 10000000000ull,
};
static const uint64_t moved_le[MS_MOVED_HIST_BUCKETS - 1] = {
    0,          MS_MIB,     16 * MS_MIB, 64 * MS_MIB, 256 * MS_MIB,
    1 * MS_GIB, 4 * MS_GIB, 16 * MS_GIB, 64 * MS_GIB,
};

void ms_metrics_observe_switch(struct ms_daemon_stats *ds, uint64_t ns, uint64_t bytes)
{
    size_t i = 0;
    while (i < MS_SWITCH_HIST_BUCKETS - 1 && ns > switch_le_ns[i])
        i++;
    ds->switch_hist[i]++;
    size_t k = 0;
    while (k < MS_MOVED_HIST_BUCKETS - 1 && bytes > moved_le[k])
        k++;
    ds->moved_hist[k]++;
    ds->switch_hist_sum_ns += ns;
    ds->moved_hist_sum += bytes;
    ds->switch_hist_count++;
}

static void histograms(struct out *o, unsigned g, const struct ms_daemon_stats *ds)
{
    family(o, "msched_switch_duration_seconds", "histogram",
           "Duration of each context switch (STOP sent to RUN sent).");
    uint64_t cum = 0;
    for (size_t i = 0; i < MS_SWITCH_HIST_BUCKETS; i++) {
        cum += ds->switch_hist[i];
        if (i + 1 < MS_SWITCH_HIST_BUCKETS)
            put(o, "msched_switch_duration_seconds_bucket{gpu=\"%u\",le=\"%g\"} %llu\n", g,
                sec(switch_le_ns[i]), (unsigned long long)cum);
        else
            put(o, "msched_switch_duration_seconds_bucket{gpu=\"%u\",le=\"+Inf\"} %llu\n", g,
                (unsigned long long)cum);
    }
    put(o, "msched_switch_duration_seconds_sum{gpu=\"%u\"} %.6f\n", g, sec(ds->switch_hist_sum_ns));
    put(o, "msched_switch_duration_seconds_count{gpu=\"%u\"} %llu\n", g,
        (unsigned long long)ds->switch_hist_count);
    family(o, "msched_switch_moved_bytes", "histogram",
           "Bytes each context switch moved (evicted plus populated).");
    cum = 0;
    for (size_t i = 0; i < MS_MOVED_HIST_BUCKETS; i++) {
        cum += ds->moved_hist[i];
        if (i + 1 < MS_MOVED_HIST_BUCKETS)
            put(o, "msched_switch_moved_bytes_bucket{gpu=\"%u\",le=\"%llu\"} %llu\n", g,
                (unsigned long long)moved_le[i], (unsigned long long)cum);
        else
            put(o, "msched_switch_moved_bytes_bucket{gpu=\"%u\",le=\"+Inf\"} %llu\n", g,
                (unsigned long long)cum);
    }
    put(o, "msched_switch_moved_bytes_sum{gpu=\"%u\"} %llu\n", g,
        (unsigned long long)ds->moved_hist_sum);
    put(o, "msched_switch_moved_bytes_count{gpu=\"%u\"} %llu\n", g,
        (unsigned long long)ds->switch_hist_count);
}

int ms_metrics_text(const struct ms_msg_status *st, const struct ms_daemon_stats *ds,
                    size_t nsessions, const long *uids, struct ms_buf *out)
{
    out->len = 0;
    struct out o = {.b = out, .err = 0};
    unsigned g = st->gpu;
    unsigned long long u;

    family(&o, "msched_up", "gauge", "1: the daemon answers.");
    put(&o, "msched_up{gpu=\"%u\"} 1\n", g);
    family(&o, "msched_budget_bytes", "gauge", "Device memory all tasks together may hold.");
    put(&o, "msched_budget_bytes{gpu=\"%u\"} %llu\n", g, (unsigned long long)st->budget);
    family(&o, "msched_resident_bytes", "gauge", "Device memory the tasks hold now.");
    put(&o, "msched_resident_bytes{gpu=\"%u\"} %llu\n", g, (unsigned long long)st->resident);
    family(&o, "msched_uptime_seconds", "gauge", "Seconds since the daemon started.");
    put(&o, "msched_uptime_seconds{gpu=\"%u\"} %.3f\n", g, sec(st->uptime_ns));
    family(&o, "msched_slice_seconds", "gauge", "Configured base time slice.");
    put(&o, "msched_slice_seconds{gpu=\"%u\"} %.6f\n", g, sec(st->slice_ns));
    family(&o, "msched_sharing", "gauge",
           "1 while the tasks share the GPU (their memory fits), 0 while it is sliced.");
    put(&o, "msched_sharing{gpu=\"%u\"} %u\n", g, (unsigned)st->sharing);
    family(&o, "msched_switches_total", "counter", "Context switches (slices granted).");
    put(&o, "msched_switches_total{gpu=\"%u\"} %llu\n", g, (unsigned long long)st->switches);
    family(&o, "msched_switch_seconds_total", "counter",
           "Time from a switch's start (STOP sent) to RUN, summed.");
    put(&o, "msched_switch_seconds_total{gpu=\"%u\"} %.6f\n", g, sec(st->switch_ns_total));
    family(&o, "msched_switch_seconds_max", "gauge", "Longest context switch so far.");
    put(&o, "msched_switch_seconds_max{gpu=\"%u\"} %.6f\n", g, sec(st->switch_ns_max));
    family(&o, "msched_switch_first_command_seconds_total", "counter",
           "Time from a switch's start to the incoming task's first command, summed over "
           "msched_switch_first_command_total switches.");
    put(&o, "msched_switch_first_command_seconds_total{gpu=\"%u\"} %.6f\n", g,
        sec(st->first_ns_total));
    family(&o, "msched_switch_first_command_total", "counter",
           "Switches whose incoming task reported its first command.");
    put(&o, "msched_switch_first_command_total{gpu=\"%u\"} %llu\n", g,
        (unsigned long long)st->first_count);
    family(&o, "msched_switch_complete_seconds_total", "counter",
           "Time from a switch's start to the incoming task's working set complete (after RUN "
           "under early_run), summed over msched_switch_complete_total switches.");
    put(&o, "msched_switch_complete_seconds_total{gpu=\"%u\"} %.6f\n", g,
        sec(st->complete_ns_total));
    family(&o, "msched_switch_complete_total", "counter",
           "Switches whose incoming task's working set became complete.");
    put(&o, "msched_switch_complete_total{gpu=\"%u\"} %llu\n", g,
        (unsigned long long)st->complete_count);
    family(&o, "msched_run_first_command_median_seconds", "gauge",
           "RUN to the first command admitted, as the shims measure it: the median of the most "
           "recent 64 RUNs.");
    put(&o, "msched_run_first_command_median_seconds{gpu=\"%u\"} %.6f\n", g,
        sec(st->run_first_p50_ns));
    family(&o, "msched_run_first_command_max_seconds", "gauge",
           "RUN to the first command admitted: the longest so far.");
    put(&o, "msched_run_first_command_max_seconds{gpu=\"%u\"} %.6f\n", g,
        sec(st->run_first_max_ns));
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
    family(&o, "msched_refills_total", "counter",
           "Switches that ran the stopped task again for the rest of its slice: it demanded "
           "memory that only evicting its own other chunks could make room for (counted in "
           "msched_switches_total too).");
    put(&o, "msched_refills_total{gpu=\"%u\"} %llu\n", g, (unsigned long long)ds->refills);
    family(&o, "msched_prepare_hints_total", "counter",
           "PREPARE hints sent: a running task told how much of its memory the next switch will "
           "likely evict for the first time (its shim pins host memory for it ahead).");
    put(&o, "msched_prepare_hints_total{gpu=\"%u\"} %llu\n", g, (unsigned long long)ds->prepares);
    family(&o, "msched_prepare_hint_bytes_total", "counter",
           "The bytes those hints named, summed.");
    put(&o, "msched_prepare_hint_bytes_total{gpu=\"%u\"} %llu\n", g,
        (unsigned long long)ds->prepare_bytes);
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
    family(&o, "msched_http_connections_total", "counter",
           "Connections to the HTTP metrics endpoint accepted.");
    put(&o, "msched_http_connections_total{gpu=\"%u\"} %llu\n", g,
        (unsigned long long)ds->http_requests);
    family(&o, "msched_http_connections_refused_total", "counter",
           "Connections to the HTTP metrics endpoint refused (too many at once).");
    put(&o, "msched_http_connections_refused_total{gpu=\"%u\"} %llu\n", g,
        (unsigned long long)ds->http_refused);
    histograms(&o, g, ds);

    static const struct {
        const char *name, *type, *help;
    } per[] = {
        {"msched_task_resident_bytes", "gauge", "Device memory the task holds."},
        {"msched_task_footprint_bytes", "gauge", "Bytes of all the task's allocations."},
        {"msched_task_populated_bytes_total", "counter", "Bytes populated for the task."},
        {"msched_task_evicted_bytes_total", "counter", "Bytes evicted from the task."},
        {"msched_task_slices_total", "counter", "Slices the task was given."},
        {"msched_task_run_seconds_total", "counter", "Time the task held the GPU."},
        {"msched_task_misses_total", "counter",
         "Commands of the task that ran with named chunks off the device."},
        {"msched_task_host_bytes", "gauge",
         "Host memory the task's shim holds pinned for memory off the device."},
        {"msched_task_host_pool_bytes", "gauge",
         "Of that, the free host chunks in its shim's pool (reused, or released at its limit)."},
        {"msched_task_state", "gauge", "1 for the task's current state."},
    };
    for (size_t f = 0; f < MS_ARRAY_LEN(per); f++) {
        family(&o, per[f].name, per[f].type, per[f].help);
        for (uint32_t i = 0; i < st->ntasks; i++) {
            const struct ms_task_status *t = &st->tasks[i];
            char name[2 * MS_PROTO_NAME_MAX + 2];
            char labels[700], uid[32] = "";
            if (uids && uids[i] >= 0)
                snprintf(uid, sizeof(uid), ",uid=\"%ld\"", uids[i]);
            snprintf(labels, sizeof(labels), "gpu=\"%u\",task=\"%u\",pid=\"%u\",name=\"%s\"%s", g,
                     t->task, t->pid, esc(t->name, name, sizeof(name)), uid);
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
            case 6:
                put(&o, "%s{%s} %llu\n", per[f].name, labels, (unsigned long long)t->misses);
                break;
            case 7:
                put(&o, "%s{%s} %llu\n", per[f].name, labels, (unsigned long long)t->host_bytes);
                break;
            case 8:
                put(&o, "%s{%s} %llu\n", per[f].name, labels, (unsigned long long)t->host_pool);
                break;
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
