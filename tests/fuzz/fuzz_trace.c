/*
 * fuzz_trace.c - libFuzzer target for the trace reader and writer (core/trace.c).
 *
 * The input is a trace file: it is cut into lines at '\n' and each line is given to one reader,
 * in order, so the header rules are exercised as in a real file. For every line that parses to
 * a record, the record is formatted and the text is parsed again by a second reader; the two
 * records must be equal and the writer's text must be canonical (formatting the re-parsed record
 * gives the same bytes); the second reader reads version 2, which accepts every version-1 record.
 * Every failure must leave a one-line "line N: ..." message. After the input the readers are
 * finished and ms_alloc_live() must be back at its starting value.
 *
 * A second pass replays the same input with an allocation failure injected at a position chosen
 * from the input's length, to reach the out-of-memory paths; only crashes and leaks matter there.
 *
 * Any broken property calls abort(), which both libFuzzer and the replay runner report.
 */
#include "core/trace.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FMT_CAP 65536

static char fmt1[FMT_CAP], fmt2[FMT_CAP];

static void check_err(const struct ms_trace_reader *r, int rc)
{
    if (rc != MS_E_PARSE && rc != MS_E_VERSION && rc != MS_E_NOMEM)
        abort();
    if (strncmp(r->err, "line ", 5) != 0 || strchr(r->err, '\n') || strlen(r->err) < 8)
        abort();
}

/* Format rec, parse it back with r2, compare; r2 has read a header already. */
static void round_trip(struct ms_trace_reader *r2, const struct ms_trace_rec *rec)
{
    struct ms_trace_rec back;
    int n = ms_trace_format(rec, fmt1, sizeof fmt1);
    if (n <= 0 || fmt1[n - 1] != '\n' || strlen(fmt1) != (size_t)n)
        abort();
    if (memchr(fmt1, '\n', (size_t)n - 1))
        abort();
    if (rec->kind == MS_TR_HEADER) {
        /* A second header would be refused by r2; check the text instead. */
        if (strcmp(fmt1, rec->version == 1 ? "msched-trace 1\n" : "msched-trace 2\n") != 0)
            abort();
        return;
    }
    int rc = ms_trace_parse_line(r2, fmt1, (size_t)n - 1, &back);
    if (rc == MS_E_NOMEM)
        return;
    if (rc != 1 || !ms_trace_rec_equal(rec, &back))
        abort();
    int n2 = ms_trace_format(&back, fmt2, sizeof fmt2);
    if (n2 != n || memcmp(fmt1, fmt2, (size_t)n) != 0)
        abort();
    /* One byte short must be refused, never truncated. */
    if (ms_trace_format(rec, fmt2, (size_t)n) != MS_E_NOSPACE)
        abort();
}

static void run(const uint8_t *data, size_t size, int check_round_trip)
{
    struct ms_trace_reader r, r2;
    struct ms_trace_rec rec;
    ms_trace_reader_init(&r);
    ms_trace_reader_init(&r2);
    /* version 2 reads every version-1 record too */
    if (ms_trace_parse_line(&r2, "msched-trace 2", 14, &rec) != 1 && check_round_trip)
        abort();
    const char *p = (const char *)data;
    size_t left = size;
    while (left > 0) {
        const char *nl = memchr(p, '\n', left);
        size_t len = nl ? (size_t)(nl - p) : left;
        int rc = ms_trace_parse_line(&r, p, len, &rec);
        if (rc < 0)
            check_err(&r, rc);
        else if (r.err[0] != '\0')
            abort();
        if (rc == 1 && check_round_trip)
            round_trip(&r2, &rec);
        if (!nl)
            break;
        p = nl + 1;
        left -= len + 1;
    }
    ms_trace_reader_fini(&r);
    ms_trace_reader_fini(&r2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint64_t base = ms_alloc_live();
    run(data, size, 1);
    if (ms_alloc_live() != base)
        abort();

    ms_alloc_fail_after(1 + size % 7);
    run(data, size, 0);
    ms_alloc_fail_after(0);
    if (ms_alloc_live() != base)
        abort();
    return 0;
}
