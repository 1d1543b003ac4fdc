/*
 * status_json.c - a STATUS reply as one line of JSON: what `msched status --json` prints and
 * `msched top --json` streams, one object per frame.
 *
 * Design
 *   The object carries the reply's fields under stable names with their units in the name
 *   (_bytes, _ns), plus when the sample was taken; the schema is docs/status.schema.json,
 *   versioned by "version" (1): a field may be added within a version, never renamed, removed
 *   or given another meaning. A frame of `top` adds its number and, from the second frame on,
 *   rates over the interval since the previous sample (top level and per task present in
 *   both). Only what the daemon sends is printed; nothing is derived but the rates.
 *   Strings are escaped for JSON; bytes that are not valid UTF-8 become U+FFFD, so the
 *   output always parses.
 *
 * Ownership: reads its arguments, writes to f. Errors: MS_E_IO when f reports an error.
 */
#include "cli/status_json.h"

#include <inttypes.h>
#include <string.h>
#include <time.h>

/* Length of the valid UTF-8 sequence at s (1-4), or 0 when s does not start one. */
static size_t utf8_len(const unsigned char *s)
{
    if (s[0] < 0x80)
        return 1;
    size_t n;
    uint32_t min, cp;
    if ((s[0] & 0xe0) == 0xc0) {
        n = 2, min = 0x80, cp = s[0] & 0x1f;
    } else if ((s[0] & 0xf0) == 0xe0) {
        n = 3, min = 0x800, cp = s[0] & 0x0f;
    } else if ((s[0] & 0xf8) == 0xf0) {
        n = 4, min = 0x10000, cp = s[0] & 0x07;
    } else {
        return 0;
    }
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n;
}

void ms_json_string(FILE *f, const char *s)
{
    fputc('"', f);
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        if (*p == '"' || *p == '\\') {
            fprintf(f, "\\%c", *p++);
        } else if (*p < 0x20 || *p == 0x7f) {
            fprintf(f, "\\u%04x", *p++);
        } else {
            size_t n = utf8_len(p);
            if (n == 0) {
                fputs("\\ufffd", f);
                p++;
            } else {
                fwrite(p, 1, n, f);
                p += n;
            }
        }
    }
    fputc('"', f);
}

static const struct ms_task_status *find(const struct ms_msg_status *st, uint32_t task)
{
    for (uint32_t i = 0; st && i < st->ntasks; i++)
        if (st->tasks[i].task == task)
            return &st->tasks[i];
    return NULL;
}

/* Bytes (or events) per second between two counters; 0 when the counter went back. */
static double per_s(uint64_t now, uint64_t before, double dt)
{
    return now >= before ? (double)(now - before) / dt : 0.0;
}

int ms_status_json(const struct ms_msg_status *st, const struct ms_json_frame *fr, FILE *f)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    fprintf(f, "{\"schema\":\"msched-status\",\"version\":%d,\"time_unix_ns\":%" PRIu64,
            MS_STATUS_JSON_VERSION, now);
    bool rates = fr && fr->prev && fr->interval_s > 0;
    if (fr) {
        fprintf(f, ",\"frame\":%" PRIu64, fr->frame);
        if (rates)
            fprintf(f, ",\"interval_s\":%.6f", fr->interval_s);
    }
    fprintf(f, ",\"gpu\":%" PRIu32 ",\"daemon_pid\":%" PRIu32 ",\"uptime_ns\":%" PRIu64, st->gpu,
            st->daemon_pid, st->uptime_ns);
    fputs(",\"policy\":", f);
    ms_json_string(f, st->policy);
    fputs(",\"evict\":", f);
    ms_json_string(f, st->evict);
    fprintf(f, ",\"mode\":\"%s\"", st->sharing ? "shared" : "sliced");
    fprintf(f,
            ",\"slice_ns\":%" PRIu64 ",\"budget_bytes\":%" PRIu64 ",\"resident_bytes\":%" PRIu64
            ",\"switches\":%" PRIu64 ",\"switch_ns_total\":%" PRIu64 ",\"switch_ns_max\":%" PRIu64
            ",\"bytes_in\":%" PRIu64 ",\"bytes_out\":%" PRIu64,
            st->slice_ns, st->budget, st->resident, st->switches, st->switch_ns_total,
            st->switch_ns_max, st->bytes_in, st->bytes_out);
    fprintf(f,
            ",\"switch_first_ns_total\":%" PRIu64 ",\"switch_first_count\":%" PRIu64
            ",\"switch_complete_ns_total\":%" PRIu64 ",\"switch_complete_count\":%" PRIu64
            ",\"run_first_p50_ns\":%" PRIu64 ",\"run_first_max_ns\":%" PRIu64
            ",\"refills\":%" PRIu64,
            st->first_ns_total, st->first_count, st->complete_ns_total, st->complete_count,
            st->run_first_p50_ns, st->run_first_max_ns, st->refills);
    if (rates) {
        const struct ms_msg_status *pv = fr->prev;
        double dt = fr->interval_s;
        fprintf(f,
                ",\"rates\":{\"bytes_in_per_s\":%.1f,\"bytes_out_per_s\":%.1f,"
                "\"switches_per_s\":%.3f}",
                per_s(st->bytes_in, pv->bytes_in, dt), per_s(st->bytes_out, pv->bytes_out, dt),
                per_s(st->switches, pv->switches, dt));
    }
    fputs(",\"tasks\":[", f);
    for (uint32_t i = 0; i < st->ntasks; i++) {
        const struct ms_task_status *t = &st->tasks[i];
        fprintf(f, "%s{\"task\":%" PRIu32 ",\"pid\":%" PRIu32 ",\"name\":", i ? "," : "", t->task,
                t->pid);
        ms_json_string(f, t->name);
        fputs(",\"state\":", f);
        ms_json_string(f, ms_task_state_name(t->state));
        fprintf(f,
                ",\"priority\":%" PRId32 ",\"weight\":%" PRIu32 ",\"resident_bytes\":%" PRIu64
                ",\"footprint_bytes\":%" PRIu64 ",\"limit_bytes\":%" PRIu64 ",\"bytes_in\":%" PRIu64
                ",\"bytes_out\":%" PRIu64 ",\"slices\":%" PRIu64 ",\"gpu_time_ns\":%" PRIu64
                ",\"misses\":%" PRIu64 ",\"host_bytes\":%" PRIu64 ",\"host_pool_bytes\":%" PRIu64
                ",\"host_limit_bytes\":%" PRIu64,
                t->prio, t->weight, t->resident, t->footprint, t->limit, t->bytes_in, t->bytes_out,
                t->switches, t->run_ns, t->misses, t->host_bytes, t->host_pool, t->host_limit);
        const struct ms_task_status *p = rates ? find(fr->prev, t->task) : NULL;
        if (p)
            fprintf(f, ",\"rates\":{\"bytes_in_per_s\":%.1f,\"bytes_out_per_s\":%.1f}",
                    per_s(t->bytes_in, p->bytes_in, fr->interval_s),
                    per_s(t->bytes_out, p->bytes_out, fr->interval_s));
        fputc('}', f);
    }
    fputs("]}\n", f);
    return ferror(f) ? MS_E_IO : MS_OK;
}
