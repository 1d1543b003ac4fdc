/*
 * recorder.h - the trace recorder's state and functions, shared by events.c (the events) and
 * recorder.c (the trace: stream ids, records, kernel timing). Not an interface of anything else;
 * the design is events.c's. Everything here is under the events lock (shim/locks.h) unless said.
 * Layering: events.c calls recorder.c, never the other way.
 */
#ifndef MS_SHIM_RECORDER_H
#define MS_SHIM_RECORDER_H

#include "shim/locks.h"
#include "shim/shim_events.h"
#include "shim/shim_int.h"

#include "core/trace.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct stream_id {
    const void *handle; /* NULL: free slot */
    uint32_t id;
};

struct ms_rec_trace {
    char path[4096]; /* empty: no trace */
    bool configured; /* ms__shim_events_init ran (path is final) */
    int fd;          /* -1 until opened, or after a failure */
    bool opened;     /* an open was attempted (success or not) */
    char *buf;       /* pending output */
    size_t len;
    char *line; /* one formatted record */
    uint32_t task;
};

/* Records waiting for their kernel's end event, in order (ms__events_lock held). */
struct pend {
    struct ms_trace_rec rec; /* name, params, layout: owned copies */
    CUevent ev0, ev1;        /* timed: recorded around the real launch */
    uint64_t seq;
    bool timed, ended; /* ended: nothing more will be recorded for it */
};
struct ms_rec_queue {
    struct pend *v;
    size_t head, n, cap;
    uint64_t next_seq;
    bool draining;
    CUevent *pool; /* idle timing events */
    size_t npool, cappool;
};

struct ms_rec_thread {
    uint64_t seq; /* this thread's launch awaiting its events (0: none) */
    CUevent ev0, ev1;
    CUstream stream;
};

#define PQ_DRAIN 4096 /* queued records that start a non-blocking drain */
#define PQ_MAX 65536  /* ... and a blocking one */

#define TRACE_BUF_BYTES (256u * 1024u) /* written out when this much is pending */
#define TRACE_LINE_BYTES (48u * 1024u) /* longest record the shim writes is about 32 KiB */

extern MS_HIDDEN struct ms_shim_counters ms__rec_ctr; /* the events' counters */
extern MS_HIDDEN struct stream_id *ms__rec_sids;
extern MS_HIDDEN size_t ms__rec_nsids, ms__rec_capsids; /* capsids: 0 or a power of two */
extern MS_HIDDEN uint32_t ms__rec_next_sid;
extern MS_HIDDEN _Thread_local uint32_t ms__rec_ptds_sid;
extern MS_HIDDEN struct ms_rec_trace ms__rec_tr;
extern MS_HIDDEN struct ms_rec_queue ms__rec_pq;
extern MS_HIDDEN bool ms__rec_timing_on; /* the trace is open: time kernels (atomic) */
extern MS_HIDDEN _Thread_local struct ms_rec_thread ms__rec_tl;

MS_HIDDEN size_t ms__rec_sid_hash(const void *h, size_t cap);
MS_HIDDEN uint32_t ms__rec_stream_id(struct ms_shim_stream s);
MS_HIDDEN void ms__rec_trace_fail(const char *what);
MS_HIDDEN void ms__rec_trace_flush(void);
MS_HIDDEN struct pend *ms__rec_pq_find(uint64_t seq);
MS_HIDDEN struct pend *ms__rec_pq_push(const struct ms_trace_rec *rec);
MS_HIDDEN void ms__rec_pend_free(struct pend *p);
MS_HIDDEN void ms__rec_pool_put(CUevent e);
MS_HIDDEN void ms__rec_trace_put(const struct ms_trace_rec *rec);
MS_HIDDEN void ms__rec_trace_drain(bool wait);
MS_HIDDEN void ms__rec_trace_put_now(const struct ms_trace_rec *rec);
MS_HIDDEN bool ms__rec_expand_path(const char *path, char *out, size_t cap);
MS_HIDDEN bool ms__rec_trace_ready(void);
MS_HIDDEN void ms__rec_trace_launch(const struct ms_shim_launch *l, bool timed);
MS_HIDDEN bool ms__rec_timing_prepare(struct ms_shim_stream s);
MS_HIDDEN void ms__rec_timing_start(int gate);
MS_HIDDEN void ms__rec_timing_end(void);

#endif /* MS_SHIM_RECORDER_H */
