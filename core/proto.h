/*
 * proto.h - the wire protocol between shims, the daemon and the CLI: message structs and their
 * encoding into and decoding from byte buffers (no I/O here; ipc/ moves the bytes).
 *
 * Design
 *   Every message is one frame: a fixed 16-byte little-endian header followed by the payload.
 *
 *       offset size field
 *       0      4    magic "MSCH"
 *       4      2    version (MS_PROTO_VERSION)
 *       6      2    type (enum ms_msg_type)
 *       8      4    payload length in bytes (<= MS_PROTO_MAX_PAYLOAD)
 *       12     4    sequence number (the sender's counter; a reply carries its request's)
 *
 *   Payloads are packed little-endian fields with no padding (docs/protocol.md gives each
 *   layout). Strings are a u16 byte length then the bytes: no NUL, no control characters
 *   (0x00-0x1f, 0x7f) except in METRICS text, which may hold '\n' and '\t'. Arrays are a u32
 *   count then the elements; a count is checked against the bytes left in the payload before
 *   anything is allocated, so a frame can never make the decoder allocate more than a small
 *   multiple of its own length. Reserved fields must be zero.
 *
 *   The decoder is strict: a frame decodes only if every field is in range and the payload is
 *   consumed exactly. The encoder applies the same checks before writing, so anything that
 *   encodes also decodes, and decode-then-encode reproduces the input bytes exactly (the
 *   encoding is canonical). Garbage is refused as early as possible: the first bytes are
 *   compared with the magic, the version and the type as soon as they arrive, and a length over
 *   the maximum is refused from the header alone, so a peer cannot make a reader buffer more
 *   than one maximal frame.
 *
 *   Why not a generic serializer (protobuf, TLV)? The message set is small and fixed per version;
 *   hand-written fixed layouts are short, need no dependency in the shim, and are easy to fuzz.
 *   A new version gets a new number; a peer speaking another version is answered with ERROR
 *   (MS_E_VERSION) and closed (docs/protocol.md, "Versions").
 *
 * Glossary
 *   task    a shim's process as the daemon knows it (ids from WELCOME).
 *   region  one allocation of a task, named by the shim's own region id (never reused within a
 *           connection); the daemon mirrors it.
 *   run     (region, first chunk index, count): consecutive chunks of one region.
 *   epoch   the daemon's counter of scheduling decisions; orders carry it and replies echo it.
 *   credit  bytes a populating shim may map, cumulative for one POPULATE order.
 *
 * Ownership
 *   A decoded message owns its arrays (runs, tasks, pairs, metrics text): ms_msg_free releases
 *   them. Encoding only reads the message. ms_buf owns its data. All heap memory is ms_malloc'd.
 *   No locking: callers serialize.
 */
#ifndef MS_PROTO_H
#define MS_PROTO_H

#include "ms.h"

#include <stdbool.h>

#define MS_PROTO_MAGIC "MSCH"
#define MS_PROTO_VERSION 7
#define MS_PROTO_HDR_BYTES 16u
#define MS_PROTO_MAX_PAYLOAD (1u << 20) /* 1 MiB */
#define MS_PROTO_MAX_FRAME (MS_PROTO_HDR_BYTES + MS_PROTO_MAX_PAYLOAD)

#define MS_PROTO_NAME_MAX 255  /* bytes of a process name */
#define MS_PROTO_TEXT_MAX 1023 /* bytes of an error text */
#define MS_PROTO_KEY_MAX 63    /* bytes of a configuration key */
#define MS_PROTO_VALUE_MAX 255 /* bytes of a configuration value */
#define MS_PROTO_WORD_MAX 15   /* bytes of a policy name in STATUS */

#define MS_PROTO_WEIGHT_MAX 1000
#define MS_PROTO_RUN_BYTES 12u /* wire size of one ms_run */

enum ms_msg_type {
    MS_MSG_HELLO = 1,   /* shim -> daemon: register this process as a task */
    MS_MSG_WELCOME,     /* daemon -> shim: registered */
    MS_MSG_ERROR,       /* either way: a request failed or the peer misbehaved */
    MS_MSG_REGION,      /* shim -> daemon: a region was added or freed */
    MS_MSG_DEMAND,      /* shim -> daemon: queued work and its predicted working set */
    MS_MSG_IDLE,        /* shim -> daemon: no queued work */
    MS_MSG_RUN,         /* daemon -> shim: may submit GPU work */
    MS_MSG_STOP,        /* daemon -> shim: stop submitting, drain, reply STOPPED */
    MS_MSG_STOPPED,     /* shim -> daemon */
    MS_MSG_EVICT,       /* daemon -> shim: evict these chunks */
    MS_MSG_EVICTED,     /* shim -> daemon: progress of an EVICT (possibly partial) */
    MS_MSG_POPULATE,    /* daemon -> shim: make these chunks resident, within credit */
    MS_MSG_POPULATED,   /* shim -> daemon: progress of a POPULATE (possibly partial) */
    MS_MSG_CREDIT,      /* daemon -> shim: the POPULATE's credit grew */
    MS_MSG_STATUS_REQ,  /* client -> daemon */
    MS_MSG_STATUS,      /* daemon -> client */
    MS_MSG_METRICS_REQ, /* client -> daemon */
    MS_MSG_METRICS,     /* daemon -> client: Prometheus text exposition */
    MS_MSG_CONFIG_GET,  /* client -> daemon: one key, or all when the key is empty */
    MS_MSG_CONFIG_SET,  /* client -> daemon */
    MS_MSG_CONFIG,      /* daemon -> client: key/value pairs */
    MS_MSG_BYE,         /* either way: orderly goodbye; the sender closes next */
    MS_MSG_REPORT,      /* shim -> daemon: counters for status (version 2) */
    MS_MSG_STARTED,     /* shim -> daemon: a RUN's first command was admitted (version 4) */
    MS_MSG_PREPARE,     /* daemon -> shim: make host memory ready for an eviction (version 5) */
    MS_MSG_TYPE_END
};

/* Task states as reported in STATUS. */
enum ms_task_state {
    MS_TS_IDLE = 0, /* no queued work */
    MS_TS_WAITING,  /* queued work, waiting for its turn */
    MS_TS_LOADING,  /* its working set is being populated for its next slice */
    MS_TS_RUNNING,  /* holds the GPU (RUN) */
    MS_TS_STOPPING, /* told to STOP, not yet STOPPED */
    MS_TS_DROPPED,  /* disconnected by the daemon; its memory stays charged until it exits */
    MS_TS_STALLED,  /* did not answer STOP in time: out of the schedule, its memory set aside */
    MS_TS_COUNT
};

enum ms_region_op { MS_REGION_ADD = 1, MS_REGION_FREE = 2 };

/* DEMAND flags */
#define MS_DEMAND_WHOLE 0x1u /* the shim cannot bound its accesses: keep its whole footprint */
#define MS_DEMAND_FLAGS_ALL MS_DEMAND_WHOLE

/* Consecutive chunks [first, first + count) of the sender's region `region`; count >= 1. */
struct ms_run {
    uint32_t region;
    uint32_t first;
    uint32_t count;
};

struct ms_msg_hello {
    uint16_t version;    /* highest protocol version the shim speaks, >= 1 */
    uint32_t pid;        /* the application's pid (informational: the daemon asks the kernel) */
    int32_t prio;        /* MS_PRIO_BE .. MS_PRIO_RT */
    uint32_t weight;     /* slice multiplier, 0 .. MS_PROTO_WEIGHT_MAX (0 = 1) */
    uint64_t mem_limit;  /* bytes this task may hold resident, 0 = no limit beyond the budget */
    uint64_t host_limit; /* host bytes its shim may pin for memory off the device, 0 = none */
    char name[MS_PROTO_NAME_MAX + 1];
};

struct ms_msg_welcome {
    uint16_t version;  /* the version the daemon will speak */
    uint32_t task;     /* the task id the daemon gave this process */
    uint64_t budget;   /* device bytes all tasks together may hold */
    uint64_t slice_ns; /* base time slice */
};

struct ms_msg_error {
    int32_t code; /* a negative MS_E_* value */
    char text[MS_PROTO_TEXT_MAX + 1];
};

struct ms_msg_region {
    uint8_t op;           /* enum ms_region_op */
    uint8_t kind;         /* enum ms_region_kind (ADD); 0 for FREE */
    uint32_t region;      /* the shim's id; ADD ids strictly increase within a connection */
    uint64_t base;        /* ADD: first virtual address; FREE: 0 */
    uint64_t size;        /* ADD: bytes asked for, 1 .. 2^50; FREE: 0 */
    uint64_t chunk_bytes; /* ADD: chunk size (a multiple of 2 MiB) or 0 for the default rule */
};

struct ms_msg_demand {
    uint32_t flags;      /* MS_DEMAND_* */
    uint64_t misses;     /* commands so far that ran with named chunks off the device */
    uint64_t host_bytes; /* host bytes the shim holds pinned now (host chunks, pool, stores) */
    uint64_t host_pool;  /* of those, the pool's: free host chunks, reused or released at the
                          * host limit before any new pinning (version 6) */
    struct ms_run *next; /* predicted working set of the next slice, in access order */
    uint32_t nnext;
    struct ms_run *recent; /* what the most recent slice touched */
    uint32_t nrecent;
};

struct ms_msg_report {
    uint64_t misses;     /* commands so far that ran with named chunks off the device */
    uint64_t host_bytes; /* host bytes the shim holds pinned now */
    uint64_t host_pool;  /* of those, the pool's (as in DEMAND) */
};

/* STARTED: sent once per RUN, when the first command after it is admitted (submitted). */
struct ms_msg_started {
    uint32_t epoch;   /* the RUN's epoch */
    uint64_t wait_ns; /* from the RUN's arrival to that admission, on the shim's clock */
};

/* PREPARE: a hint, never an order. When this RUN ends the daemon expects to evict about `bytes`
 * of the task's device memory that was never evicted before (its first eviction needs new host
 * memory, which takes long to pin): the shim may make that host memory now, while it runs. */
struct ms_msg_prepare {
    uint32_t epoch; /* the RUN's epoch */
    uint64_t bytes; /* > 0 */
};

struct ms_msg_run {
    uint32_t epoch;
    uint64_t slice_ns; /* the slice the daemon intends; STOP ends it */
};

struct ms_msg_stop {
    uint32_t epoch; /* the RUN's epoch */
};

struct ms_msg_stopped {
    uint32_t epoch;
    uint64_t gpu_ns;      /* GPU time the task used in the slice */
    uint64_t bytes_moved; /* bytes the shim moved on its own in the slice (launch faults) */
    uint64_t misses;      /* commands so far that ran with named chunks off the device */
    uint64_t host_bytes;  /* host bytes the shim holds pinned now */
    uint64_t host_pool;   /* of those, the pool's (as in DEMAND) */
};

/* EVICT and POPULATE orders. */
struct ms_msg_order {
    uint32_t epoch;
    uint64_t credit; /* POPULATE only: cumulative bytes that may be mapped now (0 for EVICT) */
    struct ms_run *runs;
    uint32_t nruns;
};

/* EVICTED and POPULATED progress: cumulative, non-decreasing within one order. */
struct ms_msg_progress {
    uint32_t epoch;
    uint32_t runs_done; /* the first runs_done runs of the order are complete */
    uint64_t bytes;     /* bytes released (EVICTED) or mapped (POPULATED) so far */
};

struct ms_msg_credit {
    uint32_t epoch;
    uint64_t credit; /* new cumulative credit of the epoch's POPULATE order */
};

struct ms_task_status {
    uint32_t task;
    uint32_t pid;
    int32_t prio;
    uint32_t weight;
    uint8_t state;       /* enum ms_task_state */
    uint64_t resident;   /* bytes resident now (daemon's accounting) */
    uint64_t footprint;  /* bytes of all its regions */
    uint64_t limit;      /* mem_limit, 0 = none */
    uint64_t bytes_in;   /* bytes populated for it, total */
    uint64_t bytes_out;  /* bytes evicted from it, total */
    uint64_t switches;   /* slices it was given */
    uint64_t run_ns;     /* time it held the GPU */
    uint64_t misses;     /* its commands that ran with named chunks off the device (its shim's
                          * count, as of its last DEMAND or STOPPED) */
    uint64_t host_bytes; /* host bytes its shim holds pinned (as of its last report) */
    uint64_t host_pool;  /* of those, its pool's free host chunks */
    uint64_t host_limit; /* the most its shim may pin (HELLO), 0 = none */
    char name[MS_PROTO_NAME_MAX + 1];
};

struct ms_msg_status {
    uint64_t budget;
    uint64_t resident;
    uint64_t uptime_ns;
    uint64_t switches;        /* context switches performed */
    uint64_t switch_ns_total; /* sum of switch times (STOP sent .. RUN sent) */
    uint64_t switch_ns_max;
    uint64_t slice_ns;  /* configured base slice */
    uint64_t bytes_in;  /* all populations */
    uint64_t bytes_out; /* all evictions */
    /* The switches split (version 4): from STOP sent to the incoming task's first command
     * (its STARTED), and to its working set complete (its population done), summed over the
     * switches that reached that point (the counts); RUN to first command as the shims
     * measure it, the median and the longest of the most recent switches. */
    uint64_t first_ns_total, first_count;
    uint64_t complete_ns_total, complete_count;
    uint64_t run_first_p50_ns, run_first_max_ns;
    uint64_t refills; /* (version 7) switches that ran the stopped task again, among switches */
    uint32_t daemon_pid;
    uint32_t gpu;
    char policy[MS_PROTO_WORD_MAX + 1]; /* "rr", "prio", "adaptive" */
    char evict[MS_PROTO_WORD_MAX + 1];  /* "opt", "lru", "whole" */
    uint8_t sharing;                    /* 1: tasks share the GPU; 0: it is sliced */
    struct ms_task_status *tasks;
    uint32_t ntasks;
};

struct ms_msg_metrics {
    char *text; /* NUL-terminated; len bytes before the NUL, no NUL inside */
    uint32_t len;
};

struct ms_kv {
    char key[MS_PROTO_KEY_MAX + 1];
    char value[MS_PROTO_VALUE_MAX + 1];
};

struct ms_msg_config {
    struct ms_kv *pairs; /* CONFIG: the pairs; CONFIG_GET: none */
    uint32_t npairs;
    struct ms_kv kv; /* CONFIG_GET: kv.key (empty = all); CONFIG_SET: kv.key and kv.value */
};

struct ms_msg {
    uint16_t type; /* enum ms_msg_type */
    uint32_t seq;
    union {
        struct ms_msg_hello hello;
        struct ms_msg_welcome welcome;
        struct ms_msg_error error;
        struct ms_msg_region region;
        struct ms_msg_demand demand;
        struct ms_msg_run run;
        struct ms_msg_stop stop;
        struct ms_msg_stopped stopped;
        struct ms_msg_report report;
        struct ms_msg_started started;
        struct ms_msg_prepare prepare;
        struct ms_msg_order order;       /* EVICT, POPULATE */
        struct ms_msg_progress progress; /* EVICTED, POPULATED */
        struct ms_msg_credit credit;
        struct ms_msg_status status;
        struct ms_msg_metrics metrics;
        struct ms_msg_config config; /* CONFIG_GET, CONFIG_SET, CONFIG */
    };
    /* IDLE, STATUS_REQ, METRICS_REQ, BYE have no payload. */
};

/* A growable byte buffer. */
struct ms_buf {
    uint8_t *data;
    size_t len, cap;
};

void ms_buf_init(struct ms_buf *b);
void ms_buf_fini(struct ms_buf *b);
/* Drop the first n bytes (n <= len). */
void ms_buf_consume(struct ms_buf *b, size_t n);
/* Append bytes. Errors: MS_E_NOMEM (b unchanged). */
int ms_buf_append(struct ms_buf *b, const void *p, size_t n);

/* Zero a message (no arrays): safe to free, ready to fill. */
void ms_msg_init(struct ms_msg *m, enum ms_msg_type type);
/* Free the arrays a message owns and zero it. NULL and zeroed messages are fine. */
void ms_msg_free(struct ms_msg *m);

/*
 * Check every field of m against the rules above. Returns 0 or MS_E_INVAL; why (may be NULL)
 * gets a one-line reason.
 */
int ms_msg_validate(const struct ms_msg *m, char *why, size_t whylen);

/*
 * Append m as one frame to out. Errors: MS_E_INVAL (m breaks a rule: see ms_msg_validate),
 * MS_E_NOSPACE (payload over MS_PROTO_MAX_PAYLOAD), MS_E_NOMEM. On error out is unchanged.
 */
int ms_msg_encode(const struct ms_msg *m, struct ms_buf *out);

/*
 * Decode the frame at the start of buf[0..len). Returns 1 when a frame was decoded (*out
 * filled, the caller frees it with ms_msg_free; *consumed = the frame's bytes), 0 when the
 * bytes so far are a valid beginning but the frame is incomplete, or an error: MS_E_PARSE
 * (not a frame, a field out of range, trailing bytes), MS_E_VERSION (another protocol version),
 * MS_E_NOMEM. On 0 and on errors *out is zeroed (nothing to free) and *consumed is 0. After an
 * error the stream cannot be resynchronized: close it. out and consumed must not be NULL.
 */
int ms_msg_decode(const uint8_t *buf, size_t len, struct ms_msg *out, size_t *consumed);

/* "HELLO", "RUN", ...; "UNKNOWN" for anything else. Static, never NULL. */
const char *ms_msg_type_name(unsigned type);
const char *ms_task_state_name(unsigned state);

/* Number of chunks a run list names (the sum of the counts; overlaps count twice). */
uint64_t ms_runs_chunks(const struct ms_run *runs, uint32_t n);

#endif /* MS_PROTO_H */
