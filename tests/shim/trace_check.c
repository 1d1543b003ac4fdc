/*
 * trace_check.c - read a trace written by libmsched with the core's reader and summarise it.
 *
 * Usage: trace_check FILE
 * Every line must parse (core/trace.c, ms_trace_parse_line); the first error is printed as
 * "FAIL: <reader's message>" and the exit status is 1. On success prints
 *   COUNT header=N task=N alloc=N free=N kernel=N copy=N memset=N sync=N live=N
 * (live: allocations without a matching free, which must be 0 for the test workload) and one
 *   KERNEL <name> params=<hex> layout=<off:size,...|->
 * line per kernel record, so the tests can compare packed parameters with what the program
 * passed.
 */
#include "core/trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: trace_check FILE\n");
        return 2;
    }
    FILE *f = fopen(argv[1], "r");
    if (!f) {
        printf("FAIL: cannot open %s\n", argv[1]);
        return 1;
    }
    struct ms_trace_reader r;
    ms_trace_reader_init(&r);
    unsigned long count[MS_TR_TOUCH + 1] = {0};
    long live = 0;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int rc = 0;
    while ((len = getline(&line, &cap, f)) >= 0) {
        if (len > 0 && line[len - 1] == '\n')
            len--;
        struct ms_trace_rec rec;
        int got = ms_trace_parse_line(&r, line, (size_t)len, &rec);
        if (got < 0) {
            printf("FAIL: %s\n", r.err);
            rc = 1;
            break;
        }
        if (got == 0)
            continue;
        count[rec.kind]++;
        live += rec.kind == MS_TR_ALLOC;
        live -= rec.kind == MS_TR_FREE;
        if (rec.kind != MS_TR_KERNEL)
            continue;
        printf("KERNEL %s params=", rec.name);
        for (size_t i = 0; i < rec.params_len; i++)
            printf("%02x", rec.params[i]);
        printf(" layout=");
        for (size_t i = 0; rec.layout && i < rec.nlayout; i++)
            printf("%s%u:%u", i ? "," : "", rec.layout[i].offset, rec.layout[i].size);
        printf("%s\n", rec.layout ? "" : "-");
    }
    free(line);
    fclose(f);
    ms_trace_reader_fini(&r);
    if (rc == 0)
        printf("COUNT header=%lu task=%lu alloc=%lu free=%lu kernel=%lu copy=%lu memset=%lu "
               "sync=%lu live=%ld\n",
               count[MS_TR_HEADER], count[MS_TR_TASK], count[MS_TR_ALLOC], count[MS_TR_FREE],
               count[MS_TR_KERNEL], count[MS_TR_COPY], count[MS_TR_MEMSET], count[MS_TR_SYNC],
               live);
    return rc;
}
