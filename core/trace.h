/*
 * trace.h - the trace format: a task's command stream as text, versioned.
 *
 * Design
 *   One record per line, written by the shim's recorder (MSCHED_TRACE=file) and by the built-in
 *   workload generators, read by the simulator. The full grammar, with examples, is in
 *   docs/trace-format.md; this header is the contract of the C interface.
 *
 *   The reader works on bytes already in memory, a line at a time, so it never does I/O and can
 *   be fuzzed directly. The writer formats a record into a caller buffer. Every number is
 *   range-checked; every error says which line and why.
 *
 *   Records (struct ms_trace_rec):
 *     header   first non-comment line: "msched-trace <version>"; versions 1 and 2 are known
 *     task     a task's id, name, priority
 *     alloc    a region: task, address, size, kind
 *     free     task, address
 *     kernel   task, stream, duration (ns), grid and block, name, raw parameter bytes, optional
 *              parameter layout
 *     copy     task, stream, duration, direction, destination, source, bytes
 *     memset   task, stream, duration, destination, bytes
 *     sync     task (the host waits for all of its work)
 *   Version 2 adds (a version-1 trace that uses them is refused):
 *     kernel   optional module hash (mod) and profiling state (prof: seen, opaque)
 *     touch    one byte range the task's latest prof=seen kernel touched, the parameter word it
 *              is attributed to (or none), and whether it was read, written or both
 *   The reader keeps no per-task state: that a touch record follows a prof=seen kernel of its
 *   task is checked by the consumer (core/template.c), not here.
 *
 * Ownership
 *   A parsed record points into storage owned by the reader (name, params, layout), valid until
 *   the next call on that reader. ms_trace_reader_fini frees it.
 */
#ifndef MS_TRACE_H
#define MS_TRACE_H

#include "predict.h"
#include "region.h"

/* The version written by recorders that emit no version-2 records; writers of profiles (mod=,
 * prof=, touch) write MS_TRACE_VERSION_MAX. The reader accepts MS_TRACE_VERSION_MIN..MAX. */
#define MS_TRACE_VERSION 1
#define MS_TRACE_VERSION_MIN 1
#define MS_TRACE_VERSION_MAX 2
#define MS_TRACE_MAX_LINE (1u << 20) /* longest accepted line, bytes */
/* parameter bytes of one launch (CUDA's limit is 32 KiB; 4 KiB is the classic limit) */
#define MS_TRACE_MAX_PARAMS 4096u
#define MS_TRACE_MAX_LAYOUT 1024u
#define MS_TRACE_MAX_NAME 512u

enum ms_trace_kind {
    MS_TR_HEADER = 0,
    MS_TR_TASK,
    MS_TR_ALLOC,
    MS_TR_FREE,
    MS_TR_KERNEL,
    MS_TR_COPY,
    MS_TR_MEMSET,
    MS_TR_SYNC,
    MS_TR_TOUCH, /* version 2 */
};

/* Whether a kernel launch was profiled (version 2, kernel key prof=). */
enum ms_trace_prof {
    MS_PROF_NONE = 0, /* not profiled (key absent) */
    MS_PROF_SEEN,     /* profiled; its touch records follow (none: it touched nothing seen) */
    MS_PROF_OPAQUE,   /* profiled, but its traffic cannot be seen (e.g. TMA); no touch records */
};

/* Access mode bits of a touch record. */
#define MS_TOUCH_R 1u
#define MS_TOUCH_W 2u

enum ms_copy_dir { MS_COPY_H2D = 0, MS_COPY_D2H, MS_COPY_D2D, MS_COPY_H2H };

struct ms_trace_rec {
    enum ms_trace_kind kind;
    uint32_t task;
    uint32_t stream;
    uint64_t dur_ns;
    uint32_t version;           /* HEADER */
    int32_t prio;               /* TASK */
    const char *name;           /* TASK, KERNEL; NUL-terminated */
    uint64_t addr;              /* ALLOC, FREE, MEMSET (destination), TOUCH (first byte) */
    uint64_t size;              /* ALLOC, COPY, MEMSET, TOUCH bytes */
    enum ms_region_kind rkind;  /* ALLOC */
    enum ms_copy_dir dir;       /* COPY */
    uint64_t dst, src;          /* COPY */
    uint32_t grid[3], block[3]; /* KERNEL */
    const uint8_t *params;      /* KERNEL */
    size_t params_len;
    const struct ms_param_layout *layout; /* KERNEL; NULL when absent */
    size_t nlayout;
    uint64_t mod;            /* KERNEL: module hash, 0 = unknown (version 2) */
    enum ms_trace_prof prof; /* KERNEL (version 2) */
    int32_t arg;             /* TOUCH: params byte offset of the pointer word, -1 = none */
    uint8_t mode;            /* TOUCH: MS_TOUCH_R | MS_TOUCH_W, at least one */
};

struct ms_trace_reader {
    uint64_t line; /* 1-based number of the last line given to ms_trace_parse_line */
    bool have_header;
    uint32_t version; /* the header's version, once have_header */
    char err[256];    /* last error, one line: "line N: why" */
    /* storage for the last record */
    char *name;
    size_t name_cap;
    uint8_t *params;
    size_t params_cap;
    struct ms_param_layout *layout;
    size_t layout_cap;
};

void ms_trace_reader_init(struct ms_trace_reader *r);
void ms_trace_reader_fini(struct ms_trace_reader *r);

/*
 * Parse one line (without its newline; len bytes, need not be NUL-terminated).
 * Returns 1 with *out filled for a record, 0 for a blank or comment line (nothing in *out),
 * MS_E_PARSE / MS_E_VERSION / MS_E_NOMEM on error with r->err set. The first record must be the
 * header.
 */
int ms_trace_parse_line(struct ms_trace_reader *r, const char *line, size_t len,
                        struct ms_trace_rec *out);

/*
 * Format a record as one line with its trailing newline into buf (NUL-terminated).
 * Returns the length written (excluding NUL), or MS_E_NOSPACE if cap is too small, MS_E_INVAL
 * for a record that could not be read back.
 */
int ms_trace_format(const struct ms_trace_rec *rec, char *buf, size_t cap);

/* Equal in every field the record's kind uses (names by content; a kernel's layout by entries:
 * none means "unknown layout" whatever the pointer). */
bool ms_trace_rec_equal(const struct ms_trace_rec *a, const struct ms_trace_rec *b);

const char *ms_region_kind_name(enum ms_region_kind k);
const char *ms_copy_dir_name(enum ms_copy_dir d);

#endif /* MS_TRACE_H */
