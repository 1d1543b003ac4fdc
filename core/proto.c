/*
 * proto.c - encoding and decoding of protocol frames (contract and layouts: proto.h,
 * docs/protocol.md).
 *
 * Design
 *   Decoding is two steps. A bounds-checked cursor (struct rd) reads the payload's fields; any
 *   read past the end sets a sticky error, so the per-type code reads straight through and checks
 *   once. Then ms_msg_validate applies the range rules, the same function the encoder runs
 *   before writing: "encodes" and "decodes" are one predicate, and because every byte of a
 *   payload maps to exactly one field (reserved fields must be zero, no trailing bytes),
 *   decode-then-encode gives back the input bytes.
 *
 *   Arrays are allocated only after their count has been checked against the bytes left, with
 *   the element's minimal wire size, so allocations stay proportional to the frame. The
 *   encoder writes the header with a zero length, appends the payload, then patches the length;
 *   on any failure it truncates the buffer back to its old length.
 *
 * Invariants
 *   - ms_msg_decode never reads buf beyond len and never returns 1 for a frame that
 *     ms_msg_validate refuses.
 *   - A message returned with an error is zeroed (nothing to free).
 */
#include "proto.h"

#include "region.h"
#include "timeline.h"

#include <stdio.h>
#include <string.h>

/* ---- buffers ------------------------------------------------------------------------------ */

void ms_buf_init(struct ms_buf *b)
{
    memset(b, 0, sizeof(*b));
}

void ms_buf_fini(struct ms_buf *b)
{
    ms_free(b->data);
    ms_buf_init(b);
}

void ms_buf_consume(struct ms_buf *b, size_t n)
{
    if (n >= b->len) {
        b->len = 0;
        return;
    }
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
}

int ms_buf_append(struct ms_buf *b, const void *p, size_t n)
{
    if (n == 0)
        return MS_OK;
    if (b->len > SIZE_MAX - n)
        return MS_E_NOMEM;
    int e = ms_grow((void **)&b->data, &b->cap, b->len + n, 1);
    if (e)
        return e;
    memcpy(b->data + b->len, p, n);
    b->len += n;
    return MS_OK;
}

/* ---- names -------------------------------------------------------------------------------- */

static const char *const type_names[MS_MSG_TYPE_END] = {
    [MS_MSG_HELLO] = "HELLO",
    [MS_MSG_WELCOME] = "WELCOME",
    [MS_MSG_ERROR] = "ERROR",
    [MS_MSG_REGION] = "REGION",
    [MS_MSG_DEMAND] = "DEMAND",
    [MS_MSG_IDLE] = "IDLE",
    [MS_MSG_RUN] = "RUN",
    [MS_MSG_STOP] = "STOP",
    [MS_MSG_STOPPED] = "STOPPED",
    [MS_MSG_EVICT] = "EVICT",
    [MS_MSG_EVICTED] = "EVICTED",
    [MS_MSG_POPULATE] = "POPULATE",
    [MS_MSG_POPULATED] = "POPULATED",
    [MS_MSG_CREDIT] = "CREDIT",
    [MS_MSG_STATUS_REQ] = "STATUS_REQ",
    [MS_MSG_STATUS] = "STATUS",
    [MS_MSG_METRICS_REQ] = "METRICS_REQ",
    [MS_MSG_METRICS] = "METRICS",
    [MS_MSG_CONFIG_GET] = "CONFIG_GET",
    [MS_MSG_CONFIG_SET] = "CONFIG_SET",
    [MS_MSG_CONFIG] = "CONFIG",
    [MS_MSG_BYE] = "BYE",
    [MS_MSG_REPORT] = "REPORT",
    [MS_MSG_STARTED] = "STARTED",
    [MS_MSG_PREPARE] = "PREPARE",
};

const char *ms_msg_type_name(unsigned type)
{
    if (type == 0 || type >= MS_MSG_TYPE_END)
        return "UNKNOWN";
    return type_names[type];
}

const char *ms_task_state_name(unsigned state)
{
    static const char *const names[MS_TS_COUNT] = {
        [MS_TS_IDLE] = "idle",       [MS_TS_WAITING] = "waiting",   [MS_TS_LOADING] = "loading",
        [MS_TS_RUNNING] = "running", [MS_TS_STOPPING] = "stopping", [MS_TS_DROPPED] = "dropped",
        [MS_TS_STALLED] = "stalled",
    };
    return state < MS_TS_COUNT ? names[state] : "unknown";
}

uint64_t ms_runs_chunks(const struct ms_run *runs, uint32_t n)
{
    uint64_t sum = 0;
    for (uint32_t i = 0; i < n; i++)
        sum += runs[i].count;
    return sum;
}

/* ---- messages ----------------------------------------------------------------------------- */

void ms_msg_init(struct ms_msg *m, enum ms_msg_type type)
{
    memset(m, 0, sizeof(*m));
    m->type = (uint16_t)type;
}

void ms_msg_free(struct ms_msg *m)
{
    if (!m)
        return;
    switch (m->type) {
    case MS_MSG_DEMAND:
        ms_free(m->demand.next);
        ms_free(m->demand.recent);
        break;
    case MS_MSG_EVICT:
    case MS_MSG_POPULATE: ms_free(m->order.runs); break;
    case MS_MSG_STATUS: ms_free(m->status.tasks); break;
    case MS_MSG_METRICS: ms_free(m->metrics.text); break;
    case MS_MSG_CONFIG: ms_free(m->config.pairs); break;
    default: break;
    }
    memset(m, 0, sizeof(*m));
}

/* ---- validation --------------------------------------------------------------------------- */

#define VFAIL(...)                                                                                 \
    do {                                                                                           \
        if (why && whylen)                                                                         \
            snprintf(why, whylen, __VA_ARGS__);                                                    \
        return MS_E_INVAL;                                                                         \
    } while (0)

static bool byte_ok(uint8_t c, bool text)
{
    if (text && (c == '\n' || c == '\t'))
        return true;
    return c >= 0x20 && c != 0x7f;
}

/* A NUL-terminated string within an array of cap bytes, at most max bytes, allowed bytes only. */
static bool str_ok(const char *s, size_t cap, size_t max)
{
    const char *nul = memchr(s, '\0', cap);
    size_t n = nul ? (size_t)(nul - s) : cap;
    if (n == cap || n > max)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!byte_ok((uint8_t)s[i], false))
            return false;
    return true;
}

#define STR_OK(arr, max) str_ok((arr), sizeof(arr), (max))

static bool runs_ok(const struct ms_run *runs, uint32_t n)
{
    if (n > 0 && !runs)
        return false;
    for (uint32_t i = 0; i < n; i++)
        if (runs[i].count == 0 || (uint64_t)runs[i].first + runs[i].count > UINT32_MAX + 1ull)
            return false;
    return true;
}

static bool prio_ok(int32_t p)
{
    return p >= MS_PRIO_BE && p <= MS_PRIO_RT;
}

static int validate_status(const struct ms_msg_status *s, char *why, size_t whylen)
{
    if (!STR_OK(s->policy, MS_PROTO_WORD_MAX) || !STR_OK(s->evict, MS_PROTO_WORD_MAX))
        VFAIL("STATUS: bad policy name");
    if (s->sharing > 1)
        VFAIL("STATUS: sharing %u", s->sharing);
    if (s->ntasks > 0 && !s->tasks)
        VFAIL("STATUS: no task array");
    for (uint32_t i = 0; i < s->ntasks; i++) {
        const struct ms_task_status *t = &s->tasks[i];
        if (t->state >= MS_TS_COUNT)
            VFAIL("STATUS: task %u has state %u", i, t->state);
        if (!prio_ok(t->prio) || t->weight > MS_PROTO_WEIGHT_MAX)
            VFAIL("STATUS: task %u has priority %d weight %u", i, t->prio, t->weight);
        if (!STR_OK(t->name, MS_PROTO_NAME_MAX))
            VFAIL("STATUS: task %u has a bad name", i);
        if (t->host_pool > t->host_bytes)
            VFAIL("STATUS: task %u has more pooled host bytes than pinned", i);
    }
    return MS_OK;
}

int ms_msg_validate(const struct ms_msg *m, char *why, size_t whylen)
{
    if (why && whylen)
        why[0] = '\0';
    if (!m)
        VFAIL("no message");
    switch (m->type) {
    case MS_MSG_HELLO: {
        const struct ms_msg_hello *h = &m->hello;
        if (h->version < 1)
            VFAIL("HELLO: version 0");
        if (!prio_ok(h->prio))
            VFAIL("HELLO: priority %d outside %d..%d", h->prio, MS_PRIO_BE, MS_PRIO_RT);
        if (h->weight > MS_PROTO_WEIGHT_MAX)
            VFAIL("HELLO: weight %u over %u", h->weight, MS_PROTO_WEIGHT_MAX);
        if (!STR_OK(h->name, MS_PROTO_NAME_MAX))
            VFAIL("HELLO: bad name");
        return MS_OK;
    }
    case MS_MSG_WELCOME:
        if (m->welcome.version < 1 || m->welcome.slice_ns == 0)
            VFAIL("WELCOME: version %u slice %llu", m->welcome.version,
                  (unsigned long long)m->welcome.slice_ns);
        return MS_OK;
    case MS_MSG_ERROR:
        if (m->error.code >= 0 || m->error.code < -32767)
            VFAIL("ERROR: code %d is not a negative error code", m->error.code);
        if (!STR_OK(m->error.text, MS_PROTO_TEXT_MAX))
            VFAIL("ERROR: bad text");
        return MS_OK;
    case MS_MSG_REGION: {
        const struct ms_msg_region *r = &m->region;
        if (r->op == MS_REGION_FREE) {
            if (r->kind || r->base || r->size || r->chunk_bytes)
                VFAIL("REGION free: non-zero fields");
            return MS_OK;
        }
        if (r->op != MS_REGION_ADD)
            VFAIL("REGION: op %u", r->op);
        if (r->kind >= MS_RK_COUNT)
            VFAIL("REGION: kind %u", r->kind);
        if (r->size == 0 || r->size > (1ull << 50))
            VFAIL("REGION: size %llu outside 1..2^50", (unsigned long long)r->size);
        if (r->chunk_bytes % MS_GRAN != 0 || r->chunk_bytes > (1ull << 40))
            VFAIL("REGION: chunk size %llu", (unsigned long long)r->chunk_bytes);
        if (r->base > UINT64_MAX - MS_ROUND_UP(r->size, MS_GRAN))
            VFAIL("REGION: address range wraps");
        return MS_OK;
    }
    case MS_MSG_DEMAND:
        if (m->demand.flags & ~MS_DEMAND_FLAGS_ALL)
            VFAIL("DEMAND: unknown flags 0x%x", m->demand.flags);
        if (!runs_ok(m->demand.next, m->demand.nnext) ||
            !runs_ok(m->demand.recent, m->demand.nrecent))
            VFAIL("DEMAND: bad run");
        if (m->demand.host_pool > m->demand.host_bytes)
            VFAIL("DEMAND: more pooled host bytes than pinned");
        return MS_OK;
    case MS_MSG_RUN:
        if (m->run.slice_ns == 0)
            VFAIL("RUN: zero slice");
        return MS_OK;
    case MS_MSG_PREPARE:
        if (m->prepare.bytes == 0)
            VFAIL("PREPARE: zero bytes");
        return MS_OK;
    case MS_MSG_EVICT:
    case MS_MSG_POPULATE:
        if (m->order.nruns == 0 || !runs_ok(m->order.runs, m->order.nruns))
            VFAIL("%s: bad or no runs", ms_msg_type_name(m->type));
        if (m->type == MS_MSG_EVICT && m->order.credit != 0)
            VFAIL("EVICT: credit must be 0");
        return MS_OK;
    case MS_MSG_STATUS: return validate_status(&m->status, why, whylen);
    case MS_MSG_METRICS:
        if (m->metrics.len > 0 && !m->metrics.text)
            VFAIL("METRICS: no text");
        for (uint32_t i = 0; i < m->metrics.len; i++)
            if (!byte_ok((uint8_t)m->metrics.text[i], true))
                VFAIL("METRICS: byte 0x%02x at %u", (uint8_t)m->metrics.text[i], i);
        return MS_OK;
    case MS_MSG_CONFIG_GET:
        if (!STR_OK(m->config.kv.key, MS_PROTO_KEY_MAX))
            VFAIL("CONFIG_GET: bad key");
        return MS_OK;
    case MS_MSG_CONFIG_SET:
        if (!STR_OK(m->config.kv.key, MS_PROTO_KEY_MAX) || m->config.kv.key[0] == '\0')
            VFAIL("CONFIG_SET: bad or empty key");
        if (!STR_OK(m->config.kv.value, MS_PROTO_VALUE_MAX))
            VFAIL("CONFIG_SET: bad value");
        return MS_OK;
    case MS_MSG_CONFIG:
        if (m->config.npairs > 0 && !m->config.pairs)
            VFAIL("CONFIG: no pairs");
        for (uint32_t i = 0; i < m->config.npairs; i++) {
            const struct ms_kv *kv = &m->config.pairs[i];
            if (!STR_OK(kv->key, MS_PROTO_KEY_MAX) || kv->key[0] == '\0' ||
                !STR_OK(kv->value, MS_PROTO_VALUE_MAX))
                VFAIL("CONFIG: bad pair %u", i);
        }
        return MS_OK;
    case MS_MSG_STOPPED:
        if (m->stopped.host_pool > m->stopped.host_bytes)
            VFAIL("STOPPED: more pooled host bytes than pinned");
        return MS_OK;
    case MS_MSG_REPORT:
        if (m->report.host_pool > m->report.host_bytes)
            VFAIL("REPORT: more pooled host bytes than pinned");
        return MS_OK;
    case MS_MSG_STOP:
    case MS_MSG_EVICTED:
    case MS_MSG_POPULATED:
    case MS_MSG_CREDIT:
    case MS_MSG_IDLE:
    case MS_MSG_STATUS_REQ:
    case MS_MSG_METRICS_REQ:
    case MS_MSG_STARTED:
    case MS_MSG_BYE: return MS_OK;
    default: VFAIL("unknown type %u", m->type);
    }
}

/* ---- encoding ----------------------------------------------------------------------------- */

struct wr {
    struct ms_buf *b;
    int err;
};

static void put(struct wr *w, const void *p, size_t n)
{
    if (!w->err)
        w->err = ms_buf_append(w->b, p, n);
}

static void put_u8(struct wr *w, uint8_t v)
{
    put(w, &v, 1);
}

static void put_u16(struct wr *w, uint16_t v)
{
    uint8_t b[2] = {(uint8_t)v, (uint8_t)(v >> 8)};
    put(w, b, 2);
}

static void put_u32(struct wr *w, uint32_t v)
{
    uint8_t b[4];
    for (int i = 0; i < 4; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    put(w, b, 4);
}

static void put_u64(struct wr *w, uint64_t v)
{
    uint8_t b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    put(w, b, 8);
}

static void put_str(struct wr *w, const char *s)
{
    size_t n = strlen(s); /* validated: short and terminated */
    put_u16(w, (uint16_t)n);
    put(w, s, n);
}

static void put_runs(struct wr *w, const struct ms_run *runs, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        put_u32(w, runs[i].region);
        put_u32(w, runs[i].first);
        put_u32(w, runs[i].count);
    }
}

static void put_payload(struct wr *w, const struct ms_msg *m)
{
    switch (m->type) {
    case MS_MSG_HELLO:
        put_u16(w, m->hello.version);
        put_u16(w, 0);
        put_u32(w, m->hello.pid);
        put_u32(w, (uint32_t)m->hello.prio);
        put_u32(w, m->hello.weight);
        put_u64(w, m->hello.mem_limit);
        put_u64(w, m->hello.host_limit);
        put_str(w, m->hello.name);
        break;
    case MS_MSG_WELCOME:
        put_u16(w, m->welcome.version);
        put_u16(w, 0);
        put_u32(w, m->welcome.task);
        put_u64(w, m->welcome.budget);
        put_u64(w, m->welcome.slice_ns);
        break;
    case MS_MSG_ERROR:
        put_u32(w, (uint32_t)m->error.code);
        put_str(w, m->error.text);
        break;
    case MS_MSG_REGION:
        put_u8(w, m->region.op);
        put_u8(w, m->region.kind);
        put_u16(w, 0);
        put_u32(w, m->region.region);
        put_u64(w, m->region.base);
        put_u64(w, m->region.size);
        put_u64(w, m->region.chunk_bytes);
        break;
    case MS_MSG_DEMAND:
        put_u32(w, m->demand.flags);
        put_u32(w, m->demand.nnext);
        put_u32(w, m->demand.nrecent);
        put_u64(w, m->demand.misses);
        put_u64(w, m->demand.host_bytes);
        put_u64(w, m->demand.host_pool);
        put_runs(w, m->demand.next, m->demand.nnext);
        put_runs(w, m->demand.recent, m->demand.nrecent);
        break;
    case MS_MSG_RUN:
        put_u32(w, m->run.epoch);
        put_u32(w, 0);
        put_u64(w, m->run.slice_ns);
        break;
    case MS_MSG_STOP: put_u32(w, m->stop.epoch); break;
    case MS_MSG_REPORT:
        put_u64(w, m->report.misses);
        put_u64(w, m->report.host_bytes);
        put_u64(w, m->report.host_pool);
        break;
    case MS_MSG_STARTED:
        put_u32(w, m->started.epoch);
        put_u32(w, 0);
        put_u64(w, m->started.wait_ns);
        break;
    case MS_MSG_PREPARE:
        put_u32(w, m->prepare.epoch);
        put_u32(w, 0);
        put_u64(w, m->prepare.bytes);
        break;
    case MS_MSG_STOPPED:
        put_u32(w, m->stopped.epoch);
        put_u32(w, 0);
        put_u64(w, m->stopped.gpu_ns);
        put_u64(w, m->stopped.bytes_moved);
        put_u64(w, m->stopped.misses);
        put_u64(w, m->stopped.host_bytes);
        put_u64(w, m->stopped.host_pool);
        break;
    case MS_MSG_EVICT:
        put_u32(w, m->order.epoch);
        put_u32(w, m->order.nruns);
        put_runs(w, m->order.runs, m->order.nruns);
        break;
    case MS_MSG_POPULATE:
        put_u32(w, m->order.epoch);
        put_u32(w, m->order.nruns);
        put_u64(w, m->order.credit);
        put_runs(w, m->order.runs, m->order.nruns);
        break;
    case MS_MSG_EVICTED:
    case MS_MSG_POPULATED:
        put_u32(w, m->progress.epoch);
        put_u32(w, m->progress.runs_done);
        put_u64(w, m->progress.bytes);
        break;
    case MS_MSG_CREDIT:
        put_u32(w, m->credit.epoch);
        put_u32(w, 0);
        put_u64(w, m->credit.credit);
        break;
    case MS_MSG_STATUS: {
        const struct ms_msg_status *s = &m->status;
        put_u64(w, s->budget);
        put_u64(w, s->resident);
        put_u64(w, s->uptime_ns);
        put_u64(w, s->switches);
        put_u64(w, s->switch_ns_total);
        put_u64(w, s->switch_ns_max);
        put_u64(w, s->slice_ns);
        put_u64(w, s->bytes_in);
        put_u64(w, s->bytes_out);
        put_u64(w, s->first_ns_total);
        put_u64(w, s->first_count);
        put_u64(w, s->complete_ns_total);
        put_u64(w, s->complete_count);
        put_u64(w, s->run_first_p50_ns);
        put_u64(w, s->run_first_max_ns);
        put_u64(w, s->refills);
        put_u32(w, s->daemon_pid);
        put_u32(w, s->gpu);
        put_str(w, s->policy);
        put_str(w, s->evict);
        put_u8(w, s->sharing);
        put_u8(w, 0);
        put_u16(w, 0);
        put_u32(w, s->ntasks);
        for (uint32_t i = 0; i < s->ntasks; i++) {
            const struct ms_task_status *t = &s->tasks[i];
            put_u32(w, t->task);
            put_u32(w, t->pid);
            put_u32(w, (uint32_t)t->prio);
            put_u32(w, t->weight);
            put_u8(w, t->state);
            put_u8(w, 0);
            put_u16(w, 0);
            put_u64(w, t->resident);
            put_u64(w, t->footprint);
            put_u64(w, t->limit);
            put_u64(w, t->bytes_in);
            put_u64(w, t->bytes_out);
            put_u64(w, t->switches);
            put_u64(w, t->run_ns);
            put_u64(w, t->misses);
            put_u64(w, t->host_bytes);
            put_u64(w, t->host_pool);
            put_u64(w, t->host_limit);
            put_str(w, t->name);
        }
        break;
    }
    case MS_MSG_METRICS: put(w, m->metrics.text, m->metrics.len); break;
    case MS_MSG_CONFIG_GET: put_str(w, m->config.kv.key); break;
    case MS_MSG_CONFIG_SET:
        put_str(w, m->config.kv.key);
        put_str(w, m->config.kv.value);
        break;
    case MS_MSG_CONFIG:
        put_u32(w, m->config.npairs);
        for (uint32_t i = 0; i < m->config.npairs; i++) {
            put_str(w, m->config.pairs[i].key);
            put_str(w, m->config.pairs[i].value);
        }
        break;
    default: break; /* no payload */
    }
}

int ms_msg_encode(const struct ms_msg *m, struct ms_buf *out)
{
    if (!out)
        return MS_E_INVAL;
    int rc = ms_msg_validate(m, NULL, 0);
    if (rc)
        return rc;
    size_t start = out->len;
    struct wr w = {.b = out, .err = 0};
    put(&w, MS_PROTO_MAGIC, 4);
    put_u16(&w, MS_PROTO_VERSION);
    put_u16(&w, m->type);
    put_u32(&w, 0); /* length, patched below */
    put_u32(&w, m->seq);
    put_payload(&w, m);
    if (w.err) {
        out->len = start;
        return w.err;
    }
    size_t plen = out->len - start - MS_PROTO_HDR_BYTES;
    if (plen > MS_PROTO_MAX_PAYLOAD) {
        out->len = start;
        return MS_E_NOSPACE;
    }
    for (int i = 0; i < 4; i++)
        out->data[start + 8 + i] = (uint8_t)(plen >> (8 * i));
    return MS_OK;
}

/* ---- decoding ----------------------------------------------------------------------------- */

struct rd {
    const uint8_t *p;
    size_t n, off;
    bool bad; /* a read went past the end or a reserved field was not zero */
};

static bool take(struct rd *r, size_t n)
{
    if (r->bad || n > r->n - r->off) {
        r->bad = true;
        return false;
    }
    return true;
}

static uint64_t get_le(struct rd *r, size_t n)
{
    if (!take(r, n))
        return 0;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v |= (uint64_t)r->p[r->off + i] << (8 * i);
    r->off += n;
    return v;
}

static uint8_t get_u8(struct rd *r)
{
    return (uint8_t)get_le(r, 1);
}

static uint16_t get_u16(struct rd *r)
{
    return (uint16_t)get_le(r, 2);
}

static uint32_t get_u32(struct rd *r)
{
    return (uint32_t)get_le(r, 4);
}

static uint64_t get_u64(struct rd *r)
{
    return get_le(r, 8);
}

static int32_t get_i32(struct rd *r)
{
    uint32_t v = get_u32(r);
    int32_t s;
    memcpy(&s, &v, sizeof(s));
    return s;
}

static void zero(struct rd *r, size_t n)
{
    if (get_le(r, n) != 0)
        r->bad = true;
}

static size_t left(const struct rd *r)
{
    return r->bad ? 0 : r->n - r->off;
}

/* A string into dst[cap]; longer than max bytes or containing NUL is bad. */
static void get_str(struct rd *r, char *dst, size_t cap, size_t max)
{
    uint16_t n = get_u16(r);
    if (n > max || n >= cap || !take(r, n)) {
        r->bad = true;
        dst[0] = '\0';
        return;
    }
    if (memchr(r->p + r->off, '\0', n))
        r->bad = true;
    memcpy(dst, r->p + r->off, n);
    dst[n] = '\0';
    r->off += n;
}

#define GET_STR(r, arr, max) get_str((r), (arr), sizeof(arr), (max))

/* n runs into a fresh array (NULL when n == 0). Returns 0, MS_E_PARSE or MS_E_NOMEM. */
static int get_runs(struct rd *r, uint32_t n, struct ms_run **out)
{
    *out = NULL;
    if (n == 0)
        return MS_OK;
    if ((uint64_t)n * MS_PROTO_RUN_BYTES > left(r)) {
        r->bad = true;
        return MS_E_PARSE;
    }
    struct ms_run *runs = ms_malloc((size_t)n * sizeof(*runs));
    if (!runs)
        return MS_E_NOMEM;
    for (uint32_t i = 0; i < n; i++) {
        runs[i].region = get_u32(r);
        runs[i].first = get_u32(r);
        runs[i].count = get_u32(r);
    }
    *out = runs;
    return MS_OK;
}

/* Minimal wire bytes of one STATUS task entry (empty name). */
#define TASK_WIRE_MIN (4 + 4 + 4 + 4 + 4 + 8 * 10 + 2)
/* Minimal wire bytes of one CONFIG pair (two empty strings). */
#define PAIR_WIRE_MIN 4

static int get_payload(struct rd *r, struct ms_msg *m)
{
    int rc = MS_OK;
    switch (m->type) {
    case MS_MSG_HELLO:
        m->hello.version = get_u16(r);
        zero(r, 2);
        m->hello.pid = get_u32(r);
        m->hello.prio = get_i32(r);
        m->hello.weight = get_u32(r);
        m->hello.mem_limit = get_u64(r);
        m->hello.host_limit = get_u64(r);
        GET_STR(r, m->hello.name, MS_PROTO_NAME_MAX);
        break;
    case MS_MSG_WELCOME:
        m->welcome.version = get_u16(r);
        zero(r, 2);
        m->welcome.task = get_u32(r);
        m->welcome.budget = get_u64(r);
        m->welcome.slice_ns = get_u64(r);
        break;
    case MS_MSG_ERROR:
        m->error.code = get_i32(r);
        GET_STR(r, m->error.text, MS_PROTO_TEXT_MAX);
        break;
    case MS_MSG_REGION:
        m->region.op = get_u8(r);
        m->region.kind = get_u8(r);
        zero(r, 2);
        m->region.region = get_u32(r);
        m->region.base = get_u64(r);
        m->region.size = get_u64(r);
        m->region.chunk_bytes = get_u64(r);
        break;
    case MS_MSG_DEMAND:
        m->demand.flags = get_u32(r);
        m->demand.nnext = get_u32(r);
        m->demand.nrecent = get_u32(r);
        m->demand.misses = get_u64(r);
        m->demand.host_bytes = get_u64(r);
        m->demand.host_pool = get_u64(r);
        if (r->bad)
            break;
        if ((uint64_t)m->demand.nnext + m->demand.nrecent > left(r) / MS_PROTO_RUN_BYTES) {
            r->bad = true;
            break;
        }
        rc = get_runs(r, m->demand.nnext, &m->demand.next);
        if (!rc)
            rc = get_runs(r, m->demand.nrecent, &m->demand.recent);
        break;
    case MS_MSG_RUN:
        m->run.epoch = get_u32(r);
        zero(r, 4);
        m->run.slice_ns = get_u64(r);
        break;
    case MS_MSG_STOP: m->stop.epoch = get_u32(r); break;
    case MS_MSG_REPORT:
        m->report.misses = get_u64(r);
        m->report.host_bytes = get_u64(r);
        m->report.host_pool = get_u64(r);
        break;
    case MS_MSG_STARTED:
        m->started.epoch = get_u32(r);
        zero(r, 4);
        m->started.wait_ns = get_u64(r);
        break;
    case MS_MSG_PREPARE:
        m->prepare.epoch = get_u32(r);
        zero(r, 4);
        m->prepare.bytes = get_u64(r);
        break;
    case MS_MSG_STOPPED:
        m->stopped.epoch = get_u32(r);
        zero(r, 4);
        m->stopped.gpu_ns = get_u64(r);
        m->stopped.bytes_moved = get_u64(r);
        m->stopped.misses = get_u64(r);
        m->stopped.host_bytes = get_u64(r);
        m->stopped.host_pool = get_u64(r);
        break;
    case MS_MSG_EVICT:
        m->order.epoch = get_u32(r);
        m->order.nruns = get_u32(r);
        if (!r->bad)
            rc = get_runs(r, m->order.nruns, &m->order.runs);
        break;
    case MS_MSG_POPULATE:
        m->order.epoch = get_u32(r);
        m->order.nruns = get_u32(r);
        m->order.credit = get_u64(r);
        if (!r->bad)
            rc = get_runs(r, m->order.nruns, &m->order.runs);
        break;
    case MS_MSG_EVICTED:
    case MS_MSG_POPULATED:
        m->progress.epoch = get_u32(r);
        m->progress.runs_done = get_u32(r);
        m->progress.bytes = get_u64(r);
        break;
    case MS_MSG_CREDIT:
        m->credit.epoch = get_u32(r);
        zero(r, 4);
        m->credit.credit = get_u64(r);
        break;
    case MS_MSG_STATUS: {
        struct ms_msg_status *s = &m->status;
        s->budget = get_u64(r);
        s->resident = get_u64(r);
        s->uptime_ns = get_u64(r);
        s->switches = get_u64(r);
        s->switch_ns_total = get_u64(r);
        s->switch_ns_max = get_u64(r);
        s->slice_ns = get_u64(r);
        s->bytes_in = get_u64(r);
        s->bytes_out = get_u64(r);
        s->first_ns_total = get_u64(r);
        s->first_count = get_u64(r);
        s->complete_ns_total = get_u64(r);
        s->complete_count = get_u64(r);
        s->run_first_p50_ns = get_u64(r);
        s->run_first_max_ns = get_u64(r);
        s->refills = get_u64(r);
        s->daemon_pid = get_u32(r);
        s->gpu = get_u32(r);
        GET_STR(r, s->policy, MS_PROTO_WORD_MAX);
        GET_STR(r, s->evict, MS_PROTO_WORD_MAX);
        s->sharing = get_u8(r);
        zero(r, 3);
        if (s->sharing > 1)
            r->bad = true;
        uint32_t n = get_u32(r);
        if (r->bad || n == 0)
            break;
        if (n > left(r) / TASK_WIRE_MIN) {
            r->bad = true;
            break;
        }
        s->tasks = ms_calloc(n, sizeof(*s->tasks));
        if (!s->tasks) {
            rc = MS_E_NOMEM;
            break;
        }
        s->ntasks = n;
        for (uint32_t i = 0; i < n && !r->bad; i++) {
            struct ms_task_status *t = &s->tasks[i];
            t->task = get_u32(r);
            t->pid = get_u32(r);
            t->prio = get_i32(r);
            t->weight = get_u32(r);
            t->state = get_u8(r);
            zero(r, 3);
            t->resident = get_u64(r);
            t->footprint = get_u64(r);
            t->limit = get_u64(r);
            t->bytes_in = get_u64(r);
            t->bytes_out = get_u64(r);
            t->switches = get_u64(r);
            t->run_ns = get_u64(r);
            t->misses = get_u64(r);
            t->host_bytes = get_u64(r);
            t->host_pool = get_u64(r);
            t->host_limit = get_u64(r);
            GET_STR(r, t->name, MS_PROTO_NAME_MAX);
        }
        break;
    }
    case MS_MSG_METRICS: {
        size_t n = left(r);
        m->metrics.text = ms_malloc(n + 1);
        if (!m->metrics.text) {
            rc = MS_E_NOMEM;
            break;
        }
        memcpy(m->metrics.text, r->p + r->off, n);
        m->metrics.text[n] = '\0';
        m->metrics.len = (uint32_t)n;
        r->off += n;
        if (memchr(m->metrics.text, '\0', n))
            r->bad = true;
        break;
    }
    case MS_MSG_CONFIG_GET: GET_STR(r, m->config.kv.key, MS_PROTO_KEY_MAX); break;
    case MS_MSG_CONFIG_SET:
        GET_STR(r, m->config.kv.key, MS_PROTO_KEY_MAX);
        GET_STR(r, m->config.kv.value, MS_PROTO_VALUE_MAX);
        break;
    case MS_MSG_CONFIG: {
        uint32_t n = get_u32(r);
        if (r->bad || n == 0)
            break;
        if (n > left(r) / PAIR_WIRE_MIN) {
            r->bad = true;
            break;
        }
        m->config.pairs = ms_calloc(n, sizeof(*m->config.pairs));
        if (!m->config.pairs) {
            rc = MS_E_NOMEM;
            break;
        }
        m->config.npairs = n;
        for (uint32_t i = 0; i < n && !r->bad; i++) {
            GET_STR(r, m->config.pairs[i].key, MS_PROTO_KEY_MAX);
            GET_STR(r, m->config.pairs[i].value, MS_PROTO_VALUE_MAX);
        }
        break;
    }
    default: break; /* no payload */
    }
    if (rc)
        return rc;
    if (r->bad || r->off != r->n)
        return MS_E_PARSE;
    return MS_OK;
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int ms_msg_decode(const uint8_t *buf, size_t len, struct ms_msg *out, size_t *consumed)
{
    if (!out || !consumed)
        return MS_E_INVAL;
    memset(out, 0, sizeof(*out));
    *consumed = 0;
    if (len == 0)
        return 0;
    if (!buf)
        return MS_E_INVAL;
    /* Refuse garbage from its first bytes on. */
    size_t k = MS_MIN(len, (size_t)4);
    if (memcmp(buf, MS_PROTO_MAGIC, k) != 0)
        return MS_E_PARSE;
    if (len < 6)
        return 0;
    uint16_t version = (uint16_t)(buf[4] | buf[5] << 8);
    if (version != MS_PROTO_VERSION)
        return MS_E_VERSION;
    if (len < 8)
        return 0;
    uint16_t type = (uint16_t)(buf[6] | buf[7] << 8);
    if (type == 0 || type >= MS_MSG_TYPE_END)
        return MS_E_PARSE;
    if (len < 12)
        return 0;
    uint32_t plen = le32(buf + 8);
    if (plen > MS_PROTO_MAX_PAYLOAD)
        return MS_E_PARSE;
    if (len < MS_PROTO_HDR_BYTES + (size_t)plen)
        return 0;

    out->type = type;
    out->seq = le32(buf + 12);
    struct rd r = {.p = buf + MS_PROTO_HDR_BYTES, .n = plen, .off = 0, .bad = false};
    int rc = get_payload(&r, out);
    if (!rc && ms_msg_validate(out, NULL, 0) != MS_OK)
        rc = MS_E_PARSE;
    if (rc) {
        ms_msg_free(out);
        return rc;
    }
    *consumed = MS_PROTO_HDR_BYTES + (size_t)plen;
    return 1;
}
