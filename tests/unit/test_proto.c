/*
 * test_proto.c - the wire protocol (core/proto.h).
 *
 * One sample of every message type is encoded, decoded and compared field by field, and
 * re-encoded to the same bytes (the encoding is canonical). Every prefix of every sample must
 * read as "need more bytes"; every payload cut short or lengthened by one byte must be refused.
 * Hand-built frames check each malformed field: magic, version, type, length, reserved bytes,
 * ranges, strings, array counts larger than the payload. An allocation-failure sweep checks the
 * decoder's out-of-memory paths, and a seeded randomized test mutates valid frames: whatever
 * decodes must re-encode to the same bytes.
 */
#include "core/proto.h"
#include "core/region.h"
#include "core/timeline.h"
#include "tests/support/ms_testutil.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* ---- samples -------------------------------------------------------------------------------- */

static struct ms_run *runs_of(uint32_t n, uint32_t salt)
{
    struct ms_run *r = ms_malloc(n * sizeof(*r));
    assert_non_null(r);
    for (uint32_t i = 0; i < n; i++)
        r[i] = (struct ms_run){.region = salt + i, .first = i * 3, .count = 1 + i % 5};
    return r;
}

/* A sample message of `type` with every field non-trivial. */
static void sample(struct ms_msg *m, unsigned type)
{
    ms_msg_init(m, (enum ms_msg_type)type);
    m->seq = 0x01020304u + type;
    switch (type) {
    case MS_MSG_HELLO:
        m->hello.version = 1;
        m->hello.pid = 4242;
        m->hello.prio = MS_PRIO_RT;
        m->hello.weight = 3;
        m->hello.mem_limit = 5 * MS_GIB;
        m->hello.host_limit = 64 * MS_GIB + 3;
        strcpy(m->hello.name, "python3 serve.py \xc3\xa9");
        break;
    case MS_MSG_WELCOME:
        m->welcome.version = 1;
        m->welcome.task = 7;
        m->welcome.budget = 16 * MS_GIB;
        m->welcome.slice_ns = 100000000;
        break;
    case MS_MSG_ERROR:
        m->error.code = MS_E_VERSION;
        strcpy(m->error.text, "unsupported protocol version 2");
        break;
    case MS_MSG_REGION:
        m->region.op = MS_REGION_ADD;
        m->region.kind = MS_RK_ASYNC;
        m->region.region = 12;
        m->region.base = 0x7f0000000000ull;
        m->region.size = 300 * MS_MIB + 5;
        m->region.chunk_bytes = 64 * MS_MIB;
        break;
    case MS_MSG_DEMAND:
        m->demand.flags = MS_DEMAND_WHOLE;
        m->demand.nnext = 3;
        m->demand.next = runs_of(3, 100);
        m->demand.nrecent = 2;
        m->demand.recent = runs_of(2, 200);
        m->demand.misses = 77;
        m->demand.host_bytes = 3 * MS_GIB + 1;
        m->demand.host_pool = MS_GIB + 5;
        break;
    case MS_MSG_REPORT:
        m->report.misses = 78;
        m->report.host_bytes = 5 * MS_GIB + 2;
        m->report.host_pool = 2 * MS_GIB + 6;
        break;
    case MS_MSG_STARTED:
        m->started.epoch = 98;
        m->started.wait_ns = 3456789;
        break;
    case MS_MSG_PREPARE:
        m->prepare.epoch = 97;
        m->prepare.bytes = 3 * MS_GIB + 64 * MS_MIB;
        break;
    case MS_MSG_RUN:
        m->run.epoch = 99;
        m->run.slice_ns = 20000000;
        break;
    case MS_MSG_STOP: m->stop.epoch = 99; break;
    case MS_MSG_STOPPED:
        m->stopped.epoch = 99;
        m->stopped.gpu_ns = 12345678;
        m->stopped.bytes_moved = 1ull << 33;
        m->stopped.misses = 79;
        m->stopped.host_bytes = 7 * MS_GIB + 3;
        m->stopped.host_pool = 64 * MS_MIB + 7;
        break;
    case MS_MSG_EVICT:
        m->order.epoch = 5;
        m->order.nruns = 4;
        m->order.runs = runs_of(4, 1);
        break;
    case MS_MSG_POPULATE:
        m->order.epoch = 5;
        m->order.credit = 6 * MS_MIB;
        m->order.nruns = 2;
        m->order.runs = runs_of(2, 9);
        break;
    case MS_MSG_EVICTED:
    case MS_MSG_POPULATED:
        m->progress.epoch = 5;
        m->progress.runs_done = 2;
        m->progress.bytes = 4 * MS_MIB;
        break;
    case MS_MSG_CREDIT:
        m->credit.epoch = 5;
        m->credit.credit = 10 * MS_MIB;
        break;
    case MS_MSG_STATUS: {
        struct ms_msg_status *s = &m->status;
        s->budget = 8 * MS_GIB;
        s->resident = 3 * MS_GIB;
        s->uptime_ns = 1000000000ull * 3600;
        s->switches = 17;
        s->switch_ns_total = 170000000;
        s->switch_ns_max = 30000000;
        s->slice_ns = 100000000;
        s->bytes_in = 1ull << 36;
        s->bytes_out = 1ull << 35;
        s->first_ns_total = 90000001;
        s->first_count = 15;
        s->complete_ns_total = 160000002;
        s->complete_count = 16;
        s->run_first_p50_ns = 1200003;
        s->run_first_max_ns = 9000004;
        s->refills = 5;
        s->daemon_pid = 321;
        s->gpu = 1;
        strcpy(s->policy, "adaptive");
        strcpy(s->evict, "opt");
        s->sharing = 1;
        s->ntasks = 2;
        s->tasks = ms_calloc(2, sizeof(*s->tasks));
        assert_non_null(s->tasks);
        for (uint32_t i = 0; i < 2; i++) {
            struct ms_task_status *t = &s->tasks[i];
            t->task = i + 1;
            t->pid = 1000 + i;
            t->prio = i ? MS_PRIO_RT : MS_PRIO_BE;
            t->weight = i;
            t->state = (uint8_t)(i ? MS_TS_RUNNING : MS_TS_WAITING);
            t->resident = MS_GIB * (i + 1);
            t->footprint = 4 * MS_GIB;
            t->limit = i ? 0 : 2 * MS_GIB;
            t->bytes_in = 111 + i;
            t->bytes_out = 222 + i;
            t->switches = 9 + i;
            t->run_ns = 5555 + i;
            t->misses = 40 + i;
            t->host_bytes = MS_GIB * (3 + i);
            t->host_pool = MS_MIB * (2 + i);
            t->host_limit = i ? 0 : 60 * MS_GIB;
            snprintf(t->name, sizeof(t->name), "task%u", i);
        }
        break;
    }
    case MS_MSG_METRICS: {
        const char *text = "# TYPE msched_budget_bytes gauge\nmsched_budget_bytes\t8589934592\n";
        m->metrics.len = (uint32_t)strlen(text);
        m->metrics.text = ms_malloc(m->metrics.len + 1);
        assert_non_null(m->metrics.text);
        memcpy(m->metrics.text, text, m->metrics.len + 1);
        break;
    }
    case MS_MSG_CONFIG_GET: strcpy(m->config.kv.key, "slice"); break;
    case MS_MSG_CONFIG_SET:
        strcpy(m->config.kv.key, "budget");
        strcpy(m->config.kv.value, "12GiB");
        break;
    case MS_MSG_CONFIG:
        m->config.npairs = 3;
        m->config.pairs = ms_calloc(3, sizeof(*m->config.pairs));
        assert_non_null(m->config.pairs);
        strcpy(m->config.pairs[0].key, "slice");
        strcpy(m->config.pairs[0].value, "100ms");
        strcpy(m->config.pairs[1].key, "policy");
        strcpy(m->config.pairs[1].value, "rr");
        strcpy(m->config.pairs[2].key, "note");
        strcpy(m->config.pairs[2].value, "");
        break;
    default: break;
    }
}

static void assert_runs_equal(const struct ms_run *a, const struct ms_run *b, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        assert_int_equal(a[i].region, b[i].region);
        assert_int_equal(a[i].first, b[i].first);
        assert_int_equal(a[i].count, b[i].count);
    }
}

static void assert_msg_equal(const struct ms_msg *a, const struct ms_msg *b)
{
    assert_int_equal(a->type, b->type);
    assert_int_equal(a->seq, b->seq);
    switch (a->type) {
    case MS_MSG_HELLO:
        assert_int_equal(a->hello.version, b->hello.version);
        assert_int_equal(a->hello.pid, b->hello.pid);
        assert_int_equal(a->hello.prio, b->hello.prio);
        assert_int_equal(a->hello.weight, b->hello.weight);
        assert_true(a->hello.mem_limit == b->hello.mem_limit);
        assert_true(a->hello.host_limit == b->hello.host_limit);
        assert_string_equal(a->hello.name, b->hello.name);
        break;
    case MS_MSG_WELCOME:
        assert_int_equal(a->welcome.version, b->welcome.version);
        assert_int_equal(a->welcome.task, b->welcome.task);
        assert_true(a->welcome.budget == b->welcome.budget);
        assert_true(a->welcome.slice_ns == b->welcome.slice_ns);
        break;
    case MS_MSG_ERROR:
        assert_int_equal(a->error.code, b->error.code);
        assert_string_equal(a->error.text, b->error.text);
        break;
    case MS_MSG_REGION:
        assert_int_equal(a->region.op, b->region.op);
        assert_int_equal(a->region.kind, b->region.kind);
        assert_int_equal(a->region.region, b->region.region);
        assert_true(a->region.base == b->region.base);
        assert_true(a->region.size == b->region.size);
        assert_true(a->region.chunk_bytes == b->region.chunk_bytes);
        break;
    case MS_MSG_DEMAND:
        assert_int_equal(a->demand.flags, b->demand.flags);
        assert_int_equal(a->demand.nnext, b->demand.nnext);
        assert_int_equal(a->demand.nrecent, b->demand.nrecent);
        assert_runs_equal(a->demand.next, b->demand.next, a->demand.nnext);
        assert_runs_equal(a->demand.recent, b->demand.recent, a->demand.nrecent);
        assert_true(a->demand.misses == b->demand.misses);
        assert_true(a->demand.host_bytes == b->demand.host_bytes);
        assert_true(a->demand.host_pool == b->demand.host_pool);
        break;
    case MS_MSG_REPORT:
        assert_true(a->report.misses == b->report.misses);
        assert_true(a->report.host_bytes == b->report.host_bytes);
        assert_true(a->report.host_pool == b->report.host_pool);
        break;
    case MS_MSG_STARTED:
        assert_int_equal(a->started.epoch, b->started.epoch);
        assert_true(a->started.wait_ns == b->started.wait_ns);
        break;
    case MS_MSG_PREPARE:
        assert_int_equal(a->prepare.epoch, b->prepare.epoch);
        assert_true(a->prepare.bytes == b->prepare.bytes);
        break;
    case MS_MSG_RUN:
        assert_int_equal(a->run.epoch, b->run.epoch);
        assert_true(a->run.slice_ns == b->run.slice_ns);
        break;
    case MS_MSG_STOP: assert_int_equal(a->stop.epoch, b->stop.epoch); break;
    case MS_MSG_STOPPED:
        assert_int_equal(a->stopped.epoch, b->stopped.epoch);
        assert_true(a->stopped.gpu_ns == b->stopped.gpu_ns);
        assert_true(a->stopped.bytes_moved == b->stopped.bytes_moved);
        assert_true(a->stopped.misses == b->stopped.misses);
        assert_true(a->stopped.host_bytes == b->stopped.host_bytes);
        assert_true(a->stopped.host_pool == b->stopped.host_pool);
        break;
    case MS_MSG_EVICT:
    case MS_MSG_POPULATE:
        assert_int_equal(a->order.epoch, b->order.epoch);
        assert_true(a->order.credit == b->order.credit);
        assert_int_equal(a->order.nruns, b->order.nruns);
        assert_runs_equal(a->order.runs, b->order.runs, a->order.nruns);
        break;
    case MS_MSG_EVICTED:
    case MS_MSG_POPULATED:
        assert_int_equal(a->progress.epoch, b->progress.epoch);
        assert_int_equal(a->progress.runs_done, b->progress.runs_done);
        assert_true(a->progress.bytes == b->progress.bytes);
        break;
    case MS_MSG_CREDIT:
        assert_int_equal(a->credit.epoch, b->credit.epoch);
        assert_true(a->credit.credit == b->credit.credit);
        break;
    case MS_MSG_STATUS: {
        const struct ms_msg_status *x = &a->status, *y = &b->status;
        assert_true(x->budget == y->budget && x->resident == y->resident);
        assert_true(x->uptime_ns == y->uptime_ns && x->switches == y->switches);
        assert_true(x->switch_ns_total == y->switch_ns_total);
        assert_true(x->switch_ns_max == y->switch_ns_max && x->slice_ns == y->slice_ns);
        assert_true(x->bytes_in == y->bytes_in && x->bytes_out == y->bytes_out);
        assert_true(x->first_ns_total == y->first_ns_total && x->first_count == y->first_count);
        assert_true(x->complete_ns_total == y->complete_ns_total &&
                    x->complete_count == y->complete_count);
        assert_true(x->run_first_p50_ns == y->run_first_p50_ns &&
                    x->run_first_max_ns == y->run_first_max_ns && x->refills == y->refills);
        assert_int_equal(x->daemon_pid, y->daemon_pid);
        assert_int_equal(x->gpu, y->gpu);
        assert_string_equal(x->policy, y->policy);
        assert_string_equal(x->evict, y->evict);
        assert_int_equal(x->sharing, y->sharing);
        assert_int_equal(x->ntasks, y->ntasks);
        for (uint32_t i = 0; i < x->ntasks; i++) {
            const struct ms_task_status *s = &x->tasks[i], *t = &y->tasks[i];
            assert_int_equal(s->task, t->task);
            assert_int_equal(s->pid, t->pid);
            assert_int_equal(s->prio, t->prio);
            assert_int_equal(s->weight, t->weight);
            assert_int_equal(s->state, t->state);
            assert_true(s->resident == t->resident && s->footprint == t->footprint);
            assert_true(s->limit == t->limit && s->bytes_in == t->bytes_in);
            assert_true(s->bytes_out == t->bytes_out && s->switches == t->switches);
            assert_true(s->run_ns == t->run_ns && s->misses == t->misses);
            assert_true(s->host_bytes == t->host_bytes && s->host_limit == t->host_limit);
            assert_true(s->host_pool == t->host_pool);
            assert_string_equal(s->name, t->name);
        }
        break;
    }
    case MS_MSG_METRICS:
        assert_int_equal(a->metrics.len, b->metrics.len);
        assert_memory_equal(a->metrics.text, b->metrics.text, a->metrics.len);
        assert_int_equal(b->metrics.text[b->metrics.len], '\0');
        break;
    case MS_MSG_CONFIG_GET:
    case MS_MSG_CONFIG_SET:
        assert_string_equal(a->config.kv.key, b->config.kv.key);
        assert_string_equal(a->config.kv.value, b->config.kv.value);
        break;
    case MS_MSG_CONFIG:
        assert_int_equal(a->config.npairs, b->config.npairs);
        for (uint32_t i = 0; i < a->config.npairs; i++) {
            assert_string_equal(a->config.pairs[i].key, b->config.pairs[i].key);
            assert_string_equal(a->config.pairs[i].value, b->config.pairs[i].value);
        }
        break;
    default: break;
    }
}

static void encode_sample(unsigned type, struct ms_buf *b)
{
    struct ms_msg m;
    sample(&m, type);
    ms_buf_init(b);
    assert_int_equal(ms_msg_encode(&m, b), MS_OK);
    ms_msg_free(&m);
}

/* ---- round trips ---------------------------------------------------------------------------- */

static void test_round_trip_every_type(void **state)
{
    (void)state;
    uint64_t live = ms_alloc_live();
    for (unsigned t = 1; t < MS_MSG_TYPE_END; t++) {
        struct ms_msg m, back;
        struct ms_buf b, b2;
        sample(&m, t);
        ms_buf_init(&b);
        ms_buf_init(&b2);
        assert_int_equal(ms_msg_encode(&m, &b), MS_OK);
        assert_true(b.len >= MS_PROTO_HDR_BYTES);
        assert_memory_equal(b.data, "MSCH", 4);
        size_t used = 0;
        assert_int_equal(ms_msg_decode(b.data, b.len, &back, &used), 1);
        assert_int_equal(used, b.len);
        assert_msg_equal(&m, &back);
        assert_int_equal(ms_msg_encode(&back, &b2), MS_OK);
        assert_int_equal(b2.len, b.len);
        assert_memory_equal(b2.data, b.data, b.len);
        ms_msg_free(&m);
        ms_msg_free(&back);
        ms_msg_free(&back); /* twice is fine: freed messages are zeroed */
        ms_buf_fini(&b);
        ms_buf_fini(&b2);
        assert_string_not_equal(ms_msg_type_name(t), "UNKNOWN");
    }
    assert_string_equal(ms_msg_type_name(0), "UNKNOWN");
    assert_string_equal(ms_msg_type_name(MS_MSG_TYPE_END), "UNKNOWN");
    assert_string_equal(ms_task_state_name(MS_TS_RUNNING), "running");
    assert_string_equal(ms_task_state_name(99), "unknown");
    assert_int_equal(ms_alloc_live(), live);
}

static void test_stream_of_frames(void **state)
{
    (void)state;
    struct ms_buf b;
    ms_buf_init(&b);
    for (unsigned t = 1; t < MS_MSG_TYPE_END; t++) {
        struct ms_msg m;
        sample(&m, t);
        assert_int_equal(ms_msg_encode(&m, &b), MS_OK);
        ms_msg_free(&m);
    }
    size_t off = 0;
    for (unsigned t = 1; t < MS_MSG_TYPE_END; t++) {
        struct ms_msg m;
        size_t used;
        assert_int_equal(ms_msg_decode(b.data + off, b.len - off, &m, &used), 1);
        assert_int_equal(m.type, t);
        off += used;
        ms_msg_free(&m);
    }
    assert_int_equal(off, b.len);
    /* Consuming from the front keeps the rest intact. */
    struct ms_msg m;
    size_t used;
    assert_int_equal(ms_msg_decode(b.data, b.len, &m, &used), 1);
    ms_msg_free(&m);
    ms_buf_consume(&b, used);
    assert_int_equal(ms_msg_decode(b.data, b.len, &m, &used), 1);
    assert_int_equal(m.type, MS_MSG_WELCOME);
    ms_msg_free(&m);
    ms_buf_consume(&b, b.len + 5);
    assert_int_equal(b.len, 0);
    ms_buf_fini(&b);
}

/* ---- truncation ----------------------------------------------------------------------------- */

static void set_len(uint8_t *frame, uint32_t plen)
{
    for (int i = 0; i < 4; i++)
        frame[8 + i] = (uint8_t)(plen >> (8 * i));
}

static void test_truncation_at_every_byte(void **state)
{
    (void)state;
    uint64_t live = ms_alloc_live();
    for (unsigned t = 1; t < MS_MSG_TYPE_END; t++) {
        struct ms_buf b;
        encode_sample(t, &b);
        /* Every prefix of a valid frame is a valid beginning: need more bytes. */
        for (size_t k = 0; k < b.len; k++) {
            uint8_t *copy = ms_malloc(k ? k : 1);
            memcpy(copy, b.data, k);
            struct ms_msg m;
            size_t used = 7;
            assert_int_equal(ms_msg_decode(copy, k, &m, &used), 0);
            assert_int_equal(used, 0);
            ms_free(copy);
        }
        /* A payload cut short (length patched to match) is refused, except free-form text. */
        size_t plen = b.len - MS_PROTO_HDR_BYTES;
        for (size_t k = 0; k < plen; k++) {
            uint8_t *copy = ms_malloc(MS_PROTO_HDR_BYTES + k + 1);
            memcpy(copy, b.data, MS_PROTO_HDR_BYTES + k);
            set_len(copy, (uint32_t)k);
            struct ms_msg m;
            size_t used;
            int rc = ms_msg_decode(copy, MS_PROTO_HDR_BYTES + k, &m, &used);
            if (t == MS_MSG_METRICS) {
                assert_int_equal(rc, 1);
                assert_int_equal(m.metrics.len, k);
            } else {
                assert_int_equal(rc, MS_E_PARSE);
            }
            ms_msg_free(&m);
            /* One byte longer than its fields: trailing garbage. */
            copy[MS_PROTO_HDR_BYTES + k] = 'x';
            set_len(copy, (uint32_t)k + 1);
            rc = ms_msg_decode(copy, MS_PROTO_HDR_BYTES + k + 1, &m, &used);
            (void)rc; /* any outcome but a crash; checked on the full payload below */
            ms_msg_free(&m);
            ms_free(copy);
        }
        uint8_t *longer = ms_malloc(b.len + 1);
        memcpy(longer, b.data, b.len);
        longer[b.len] = 'x';
        set_len(longer, (uint32_t)plen + 1);
        struct ms_msg m;
        size_t used;
        int rc = ms_msg_decode(longer, b.len + 1, &m, &used);
        assert_int_equal(rc, t == MS_MSG_METRICS ? 1 : MS_E_PARSE);
        ms_msg_free(&m);
        ms_free(longer);
        ms_buf_fini(&b);
    }
    assert_int_equal(ms_alloc_live(), live);
}

/* ---- malformed frames ----------------------------------------------------------------------- */

/* A hand-built frame: header fields and a payload. */
struct fb {
    uint8_t d[4096];
    size_t n;
};

static void fb_bytes(struct fb *f, const void *p, size_t n)
{
    assert_true(f->n + n <= sizeof(f->d));
    memcpy(f->d + f->n, p, n);
    f->n += n;
}

static void fb_le(struct fb *f, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++) {
        uint8_t c = i < 8 ? (uint8_t)(v >> (8 * i)) : 0; /* wider fields: zero bytes */
        fb_bytes(f, &c, 1);
    }
}

static void fb_str(struct fb *f, const char *s, size_t n)
{
    fb_le(f, n, 2);
    fb_bytes(f, s, n);
}

static void fb_start(struct fb *f, unsigned type)
{
    f->n = 0;
    fb_bytes(f, "MSCH", 4);
    fb_le(f, MS_PROTO_VERSION, 2);
    fb_le(f, type, 2);
    fb_le(f, 0, 4);
    fb_le(f, 77, 4);
}

static int fb_decode(struct fb *f)
{
    set_len(f->d, (uint32_t)(f->n - MS_PROTO_HDR_BYTES));
    struct ms_msg m;
    size_t used;
    uint64_t live = ms_alloc_live();
    int rc = ms_msg_decode(f->d, f->n, &m, &used);
    if (rc == 1) {
        assert_int_equal(used, f->n);
        /* canonical: re-encoding gives the same bytes */
        struct ms_buf b;
        ms_buf_init(&b);
        assert_int_equal(ms_msg_encode(&m, &b), MS_OK);
        assert_int_equal(b.len, f->n);
        assert_memory_equal(b.data, f->d, f->n);
        ms_buf_fini(&b);
    } else {
        assert_int_equal(used, 0);
    }
    ms_msg_free(&m);
    assert_int_equal(ms_alloc_live(), live);
    return rc;
}

static void hello(struct fb *f, uint16_t version, uint16_t rsv, int32_t prio, uint32_t weight,
                  const char *name, size_t namelen)
{
    fb_start(f, MS_MSG_HELLO);
    fb_le(f, version, 2);
    fb_le(f, rsv, 2);
    fb_le(f, 1234, 4);
    fb_le(f, (uint32_t)prio, 4);
    fb_le(f, weight, 4);
    fb_le(f, 0, 8); /* memory limit */
    fb_le(f, 0, 8); /* host limit */
    fb_str(f, name, namelen);
}

static void test_malformed_header(void **state)
{
    (void)state;
    struct fb f;
    hello(&f, 1, 0, 0, 1, "ok", 2);
    assert_int_equal(fb_decode(&f), 1);

    /* Each magic byte, refused from the first bytes on. */
    for (int i = 0; i < 4; i++) {
        uint8_t bad[MS_PROTO_HDR_BYTES];
        memcpy(bad, f.d, sizeof(bad));
        bad[i] ^= 0x20;
        struct ms_msg m;
        size_t used;
        for (size_t k = (size_t)i + 1; k <= sizeof(bad); k++)
            assert_int_equal(ms_msg_decode(bad, k, &m, &used), MS_E_PARSE);
    }
    /* Version: 0, 1 (before the misses counts), 2 (before the host bytes), 3 (before STARTED
     * and the switch split), 4 (before PREPARE), 5 (before the host pool), 6 (before the
     * refills in STATUS), 8, 0xffff are another protocol, known from six bytes. */
    uint16_t versions[] = {0, 1, 2, 3, 4, 5, 6, 8, 0x0100, 0xffff};
    for (size_t i = 0; i < MS_ARRAY_LEN(versions); i++) {
        uint8_t bad[6] = {'M', 'S', 'C', 'H', (uint8_t)versions[i], (uint8_t)(versions[i] >> 8)};
        struct ms_msg m;
        size_t used;
        assert_int_equal(ms_msg_decode(bad, 6, &m, &used), MS_E_VERSION);
    }
    /* Types 0, TYPE_END, 0xffff: refused from eight bytes. */
    unsigned types[] = {0, MS_MSG_TYPE_END, 0x100, 0xffff};
    for (size_t i = 0; i < MS_ARRAY_LEN(types); i++) {
        uint8_t bad[8] = {
            'M', 'S', 'C', 'H', MS_PROTO_VERSION, 0, (uint8_t)types[i], (uint8_t)(types[i] >> 8)};
        struct ms_msg m;
        size_t used;
        assert_int_equal(ms_msg_decode(bad, 8, &m, &used), MS_E_PARSE);
    }
    /* A length over the maximum is refused from the header alone. */
    uint8_t hdr[MS_PROTO_HDR_BYTES];
    memcpy(hdr, f.d, sizeof(hdr));
    set_len(hdr, MS_PROTO_MAX_PAYLOAD + 1);
    struct ms_msg m;
    size_t used;
    assert_int_equal(ms_msg_decode(hdr, 12, &m, &used), MS_E_PARSE);
    set_len(hdr, UINT32_MAX);
    assert_int_equal(ms_msg_decode(hdr, sizeof(hdr), &m, &used), MS_E_PARSE);
    set_len(hdr, MS_PROTO_MAX_PAYLOAD);
    assert_int_equal(ms_msg_decode(hdr, sizeof(hdr), &m, &used), 0);
    /* Bad arguments. */
    assert_int_equal(ms_msg_decode(NULL, 0, &m, &used), 0);
    assert_int_equal(ms_msg_decode(NULL, 4, &m, &used), MS_E_INVAL);
    assert_int_equal(ms_msg_decode(hdr, 4, NULL, &used), MS_E_INVAL);
    assert_int_equal(ms_msg_decode(hdr, 4, &m, NULL), MS_E_INVAL);
}

static void test_malformed_hello_fields(void **state)
{
    (void)state;
    struct fb f;
    hello(&f, 1, 1, 0, 1, "x", 1); /* reserved */
    assert_int_equal(fb_decode(&f), MS_E_PARSE);
    hello(&f, 0, 0, 0, 1, "x", 1); /* version 0 */
    assert_int_equal(fb_decode(&f), MS_E_PARSE);
    hello(&f, 7, 0, 0, 1, "x", 1); /* a newer shim: the payload still decodes */
    assert_int_equal(fb_decode(&f), 1);
    hello(&f, 1, 0, MS_PRIO_RT + 1, 1, "x", 1);
    assert_int_equal(fb_decode(&f), MS_E_PARSE);
    hello(&f, 1, 0, -1, 1, "x", 1);
    assert_int_equal(fb_decode(&f), MS_E_PARSE);
    hello(&f, 1, 0, MS_PRIO_RT, MS_PROTO_WEIGHT_MAX, "x", 1);
    assert_int_equal(fb_decode(&f), 1);
    hello(&f, 1, 0, 0, MS_PROTO_WEIGHT_MAX + 1, "x", 1);
    assert_int_equal(fb_decode(&f), MS_E_PARSE);
    hello(&f, 1, 0, 0, 1, "a\0b", 3); /* NUL inside */
    assert_int_equal(fb_decode(&f), MS_E_PARSE);
    hello(&f, 1, 0, 0, 1, "a\nb", 3); /* control character */
    assert_int_equal(fb_decode(&f), MS_E_PARSE);
    hello(&f, 1, 0, 0, 1, "a\x7f", 2);
    assert_int_equal(fb_decode(&f), MS_E_PARSE);
    char longname[MS_PROTO_NAME_MAX + 2];
    memset(longname, 'n', sizeof(longname));
    hello(&f, 1, 0, 0, 1, longname, MS_PROTO_NAME_MAX);
    assert_int_equal(fb_decode(&f), 1);
    hello(&f, 1, 0, 0, 1, longname, MS_PROTO_NAME_MAX + 1);
    assert_int_equal(fb_decode(&f), MS_E_PARSE);
    /* A string length pointing past the payload. */
    hello(&f, 1, 0, 0, 1, "abc", 3);
    f.n -= 1;
    assert_int_equal(fb_decode(&f), MS_E_PARSE);
    hello(&f, 1, 0, 0, 1, "", 0);
    assert_int_equal(fb_decode(&f), 1);
}

static void region(struct fb *f, uint8_t op, uint8_t kind, uint16_t rsv, uint64_t base,
                   uint64_t size, uint64_t cb)
{
    fb_start(f, MS_MSG_REGION);
    fb_le(f, op, 1);
    fb_le(f, kind, 1);
    fb_le(f, rsv, 2);
    fb_le(f, 3, 4);
    fb_le(f, base, 8);
    fb_le(f, size, 8);
    fb_le(f, cb, 8);
}

static void test_malformed_region(void **state)
{
    (void)state;
    struct fb f;
    region(&f, MS_REGION_ADD, MS_RK_DEVICE, 0, 0x1000, 4096, 0);
    assert_int_equal(fb_decode(&f), 1);
    region(&f, MS_REGION_ADD, MS_RK_DEVICE, 1, 0x1000, 4096, 0);
    assert_int_equal(fb_decode(&f), MS_E_PARSE);
    region(&f, 0, MS_RK_DEVICE, 0, 0x1000, 4096, 0);
    assert_int_equal(fb_decode(&f), MS_E_PARSE);
    region(&f, 3, MS_RK_DEVICE, 0, 0x1000, 4096, 0);
    assert_int_equal(fb_decode(&f), MS_E_PARSE);
    region(&f, MS_REGION_ADD, MS_RK_COUNT, 0, 0x1000, 4096, 0);
    assert_int_equal(fb_decode(&f), MS_E_PARSE);
    region(&f, MS_REGION_ADD, MS_RK_DEVICE, 0, 0x1000, 0, 0);
    assert_int_equal(fb_decode(&f), MS_E_PARSE);
    region(&f, MS_REGION_ADD, MS_RK_DEVICE, 0, 0x1000, (1ull << 50) + 1, 0);
    assert_int_equal(fb_decode(&f), MS_E_PARSE);
    region(&f, MS_REGION_ADD, MS_RK_DEVICE, 0, 0x1000, 1ull << 50, 0);
    assert_int_equal(fb_decode(&f), 1);
    region(&f, MS_REGION_ADD, MS_RK_DEVICE, 0, 0x1000, 4096, MS_MIB);
    assert_int_equal(fb_decode(&f), MS_E_PARSE);
    region(&f, MS_REGION_ADD, MS_RK_DEVICE, 0, 0x1000, 4096, (1ull << 40) + MS_GRAN);
    assert_int_equal(fb_decode(&f), MS_E_PARSE);
    region(&f, MS_REGION_ADD, MS_RK_DEVICE, 0, UINT64_MAX - MS_GRAN + 1, 4096, 0);
    assert_int_equal(fb_decode(&f), MS_E_PARSE);
    region(&f, MS_REGION_ADD, MS_RK_DEVICE, 0, UINT64_MAX - 2 * MS_GRAN + 1, 4096, 0);
    assert_int_equal(fb_decode(&f), 1);
    region(&f, MS_REGION_FREE, 0, 0, 0, 0, 0);
    assert_int_equal(fb_decode(&f), 1);
    region(&f, MS_REGION_FREE, 0, 0, 0, 4096, 0);
    assert_int_equal(fb_decode(&f), MS_E_PARSE);
    region(&f, MS_REGION_FREE, 1, 0, 0, 0, 0);
    assert_int_equal(fb_decode(&f), MS_E_PARSE);
}

static void order(struct fb *f, unsigned type, uint32_t nruns, uint64_t credit,
                  const struct ms_run *runs, size_t nwire)
{
    fb_start(f, type);
    fb_le(f, 1, 4);
    fb_le(f, nruns, 4);
    if (type == MS_MSG_POPULATE)
        fb_le(f, credit, 8);
    for (size_t i = 0; i < nwire; i++) {
        fb_le(f, runs[i].region, 4);
        fb_le(f, runs[i].first, 4);
        fb_le(f, runs[i].count, 4);
    }
}

static void test_malformed_runs(void **state)
{
    (void)state;
    struct fb f;
    struct ms_run ok[2] = {{1, 0, 1}, {2, UINT32_MAX, 1}};
    order(&f, MS_MSG_EVICT, 2, 0, ok, 2);
    assert_int_equal(fb_decode(&f), 1);
    order(&f, MS_MSG_POPULATE, 2, 123, ok, 2);
    assert_int_equal(fb_decode(&f), 1);
    order(&f, MS_MSG_EVICT, 0, 0, ok, 0); /* no runs */
    assert_int_equal(fb_decode(&f), MS_E_PARSE);
    struct ms_run zero_count[1] = {{1, 0, 0}};
    order(&f, MS_MSG_EVICT, 1, 0, zero_count, 1);
    assert_int_equal(fb_decode(&f), MS_E_PARSE);
    struct ms_run wrap[1] = {{1, UINT32_MAX, 2}};
    order(&f, MS_MSG_EVICT, 1, 0, wrap, 1);
    assert_int_equal(fb_decode(&f), MS_E_PARSE);
    /* Counts larger than the payload: refused before allocating. */
    uint64_t live = ms_alloc_live();
    order(&f, MS_MSG_EVICT, UINT32_MAX, 0, ok, 2);
    ms_alloc_fail_after(1); /* an allocation here would fail the test's expectation */
    assert_int_equal(fb_decode(&f), MS_E_PARSE);
    ms_alloc_fail_after(0);
    order(&f, MS_MSG_EVICT, 3, 0, ok, 2);
    assert_int_equal(fb_decode(&f), MS_E_PARSE);
    order(&f, MS_MSG_EVICT, 1, 0, ok, 2); /* trailing run */
    assert_int_equal(fb_decode(&f), MS_E_PARSE);
    assert_int_equal(ms_alloc_live(), live);

    /* DEMAND: counts, flags. */
    fb_start(&f, MS_MSG_DEMAND);
    fb_le(&f, 0, 4);
    fb_le(&f, 1, 4);
    fb_le(&f, 1, 4);
    fb_le(&f, 7, 8); /* misses */
    fb_le(&f, 9, 8); /* host bytes */
    fb_le(&f, 4, 8); /* of those, pooled */
    fb_le(&f, 1, 4), fb_le(&f, 0, 4), fb_le(&f, 1, 4);
    fb_le(&f, 2, 4), fb_le(&f, 0, 4), fb_le(&f, 1, 4);
    assert_int_equal(fb_decode(&f), 1);
    f.d[MS_PROTO_HDR_BYTES] = 0x2; /* unknown flag */
    assert_int_equal(fb_decode(&f), MS_E_PARSE);
    f.d[MS_PROTO_HDR_BYTES] = 0;
    f.d[MS_PROTO_HDR_BYTES + 8] = 2; /* nrecent 2, only 1 present */
    assert_int_equal(fb_decode(&f), MS_E_PARSE);
    f.d[MS_PROTO_HDR_BYTES + 8] = 0xff, f.d[MS_PROTO_HDR_BYTES + 11] = 0xff;
    f.d[MS_PROTO_HDR_BYTES + 4] = 0xff, f.d[MS_PROTO_HDR_BYTES + 7] = 0xff; /* sum overflows */
    assert_int_equal(fb_decode(&f), MS_E_PARSE);
    fb_start(&f, MS_MSG_DEMAND); /* empty demand: the task has work but no prediction */
    fb_le(&f, 0, 36);
    assert_int_equal(fb_decode(&f), 1);
    fb_start(&f, MS_MSG_DEMAND); /* the misses count cut short */
    fb_le(&f, 0, 16);
    assert_int_equal(fb_decode(&f), MS_E_PARSE);
    fb_start(&f, MS_MSG_DEMAND); /* the host bytes cut short */
    fb_le(&f, 0, 24);
    assert_int_equal(fb_decode(&f), MS_E_PARSE);
    fb_start(&f, MS_MSG_DEMAND); /* the pooled bytes cut short */
    fb_le(&f, 0, 32);
    assert_int_equal(fb_decode(&f), MS_E_PARSE);
}

static void test_malformed_other_fields(void **state)
{
    (void)state;
    struct fb f;
    /* RUN: reserved and zero slice. */
    fb_start(&f, MS_MSG_RUN);
    fb_le(&f, 1, 4), fb_le(&f, 0, 4), fb_le(&f, 5, 8);
    assert_int_equal(fb_decode(&f), 1);
    f.d[MS_PROTO_HDR_BYTES + 4] = 1;
    assert_int_equal(fb_decode(&f), MS_E_PARSE);
    fb_start(&f, MS_MSG_RUN);
    fb_le(&f, 1, 4), fb_le(&f, 0, 4), fb_le(&f, 0, 8);
    assert_int_equal(fb_decode(&f), MS_E_PARSE);
    /* STARTED: its reserved word; a well-formed one decodes. */
    fb_start(&f, MS_MSG_STARTED);
    fb_le(&f, 7, 4), fb_le(&f, 0, 4), fb_le(&f, 1000, 8);
    assert_int_equal(fb_decode(&f), 1);
    f.d[MS_PROTO_HDR_BYTES + 5] = 1;
    assert_int_equal(fb_decode(&f), MS_E_PARSE);
    /* PREPARE: its reserved word, and zero bytes is no hint. */
    fb_start(&f, MS_MSG_PREPARE);
    fb_le(&f, 7, 4), fb_le(&f, 0, 4), fb_le(&f, 64 << 20, 8);
    assert_int_equal(fb_decode(&f), 1);
    f.d[MS_PROTO_HDR_BYTES + 6] = 1;
    assert_int_equal(fb_decode(&f), MS_E_PARSE);
    fb_start(&f, MS_MSG_PREPARE);
    fb_le(&f, 7, 4), fb_le(&f, 0, 4), fb_le(&f, 0, 8);
    assert_int_equal(fb_decode(&f), MS_E_PARSE);
    /* STOPPED: the pool's bytes are part of the pinned bytes. */
    fb_start(&f, MS_MSG_STOPPED);
    fb_le(&f, 1, 4), fb_le(&f, 0, 4), fb_le(&f, 2, 8), fb_le(&f, 0, 8), fb_le(&f, 0, 8);
    fb_le(&f, 6, 8), fb_le(&f, 6, 8);
    assert_int_equal(fb_decode(&f), 1);
    f.d[f.n - 8] = 7;
    assert_int_equal(fb_decode(&f), MS_E_PARSE);
    /* STOPPED and CREDIT reserved words. */
    fb_start(&f, MS_MSG_STOPPED);
    fb_le(&f, 1, 4), fb_le(&f, 9, 4), fb_le(&f, 0, 16);
    assert_int_equal(fb_decode(&f), MS_E_PARSE);
    fb_start(&f, MS_MSG_CREDIT);
    fb_le(&f, 1, 4), fb_le(&f, 9, 4), fb_le(&f, 0, 8);
    assert_int_equal(fb_decode(&f), MS_E_PARSE);
    /* WELCOME with a zero slice. */
    fb_start(&f, MS_MSG_WELCOME);
    fb_le(&f, 1, 4), fb_le(&f, 1, 4), fb_le(&f, 1, 8), fb_le(&f, 0, 8);
    assert_int_equal(fb_decode(&f), MS_E_PARSE);
    /* ERROR codes must be negative. */
    fb_start(&f, MS_MSG_ERROR);
    fb_le(&f, 0, 4), fb_str(&f, "x", 1);
    assert_int_equal(fb_decode(&f), MS_E_PARSE);
    fb_start(&f, MS_MSG_ERROR);
    fb_le(&f, (uint32_t)-5, 4), fb_str(&f, "bad", 3);
    assert_int_equal(fb_decode(&f), 1);
    /* Empty messages take no payload. */
    fb_start(&f, MS_MSG_BYE);
    assert_int_equal(fb_decode(&f), 1);
    fb_le(&f, 0, 1);
    assert_int_equal(fb_decode(&f), MS_E_PARSE);
    fb_start(&f, MS_MSG_IDLE);
    fb_le(&f, 0, 4);
    assert_int_equal(fb_decode(&f), MS_E_PARSE);
    /* METRICS: NUL and control characters. */
    fb_start(&f, MS_MSG_METRICS);
    fb_bytes(&f, "a 1\n", 4);
    assert_int_equal(fb_decode(&f), 1);
    fb_bytes(&f, "\0", 1);
    assert_int_equal(fb_decode(&f), MS_E_PARSE);
    fb_start(&f, MS_MSG_METRICS);
    fb_bytes(&f, "a\x1b[2J", 5);
    assert_int_equal(fb_decode(&f), MS_E_PARSE);
    fb_start(&f, MS_MSG_METRICS);
    assert_int_equal(fb_decode(&f), 1);
    /* CONFIG_SET: empty key; CONFIG_GET empty key means all. */
    fb_start(&f, MS_MSG_CONFIG_SET);
    fb_str(&f, "", 0), fb_str(&f, "v", 1);
    assert_int_equal(fb_decode(&f), MS_E_PARSE);
    fb_start(&f, MS_MSG_CONFIG_GET);
    fb_str(&f, "", 0);
    assert_int_equal(fb_decode(&f), 1);
    char longkey[MS_PROTO_KEY_MAX + 1];
    memset(longkey, 'k', sizeof(longkey));
    fb_start(&f, MS_MSG_CONFIG_GET);
    fb_str(&f, longkey, sizeof(longkey));
    assert_int_equal(fb_decode(&f), MS_E_PARSE);
    /* CONFIG: pair count larger than the payload, pair with an empty key. */
    fb_start(&f, MS_MSG_CONFIG);
    fb_le(&f, 1000000, 4), fb_str(&f, "a", 1), fb_str(&f, "b", 1);
    assert_int_equal(fb_decode(&f), MS_E_PARSE);
    fb_start(&f, MS_MSG_CONFIG);
    fb_le(&f, 1, 4), fb_str(&f, "", 0), fb_str(&f, "b", 1);
    assert_int_equal(fb_decode(&f), MS_E_PARSE);
    fb_start(&f, MS_MSG_CONFIG);
    fb_le(&f, 0, 4);
    assert_int_equal(fb_decode(&f), 1);
}

static void test_malformed_status(void **state)
{
    (void)state;
    struct ms_buf b;
    encode_sample(MS_MSG_STATUS, &b);
    size_t sharing_off = MS_PROTO_HDR_BYTES + 16 * 8 + 8 + (2 + 8) + (2 + 3);
    size_t task0 = sharing_off + 4 + 4; /* sharing and 3 reserved bytes, the task count */
    /* Offsets inside the first task entry. */
    size_t state_off = task0 + 16, rsv_off = task0 + 17, prio_off = task0 + 8;
    struct ms_msg m;
    size_t used;
    assert_int_equal(ms_msg_decode(b.data, b.len, &m, &used), 1);
    assert_int_equal(m.status.sharing, 1);
    ms_msg_free(&m);
    b.data[sharing_off] = 2; /* a flag: 0 or 1 */
    assert_int_equal(ms_msg_decode(b.data, b.len, &m, &used), MS_E_PARSE);
    b.data[sharing_off] = 1;
    b.data[sharing_off + 1] = 1; /* reserved */
    assert_int_equal(ms_msg_decode(b.data, b.len, &m, &used), MS_E_PARSE);
    b.data[sharing_off + 1] = 0;
    b.data[state_off] = MS_TS_COUNT;
    assert_int_equal(ms_msg_decode(b.data, b.len, &m, &used), MS_E_PARSE);
    b.data[state_off] = MS_TS_IDLE;
    b.data[rsv_off] = 1;
    assert_int_equal(ms_msg_decode(b.data, b.len, &m, &used), MS_E_PARSE);
    b.data[rsv_off] = 0;
    b.data[prio_off] = MS_PRIO_RT + 1;
    assert_int_equal(ms_msg_decode(b.data, b.len, &m, &used), MS_E_PARSE);
    b.data[prio_off] = MS_PRIO_BE;
    assert_int_equal(ms_msg_decode(b.data, b.len, &m, &used), 1);
    ms_msg_free(&m);
    /* A task count far beyond the payload. */
    b.data[task0 - 1] = 0x7f;
    assert_int_equal(ms_msg_decode(b.data, b.len, &m, &used), MS_E_PARSE);
    ms_buf_fini(&b);
}

/* ---- encoder errors ------------------------------------------------------------------------- */

static void test_encode_refuses(void **state)
{
    (void)state;
    struct ms_buf b;
    ms_buf_init(&b);
    struct ms_msg m;
    sample(&m, MS_MSG_RUN);
    assert_int_equal(ms_msg_encode(&m, &b), MS_OK);
    size_t len = b.len;
    char why[128];

    m.run.slice_ns = 0;
    assert_int_equal(ms_msg_validate(&m, why, sizeof(why)), MS_E_INVAL);
    assert_true(strlen(why) > 0);
    assert_int_equal(ms_msg_encode(&m, &b), MS_E_INVAL);
    assert_int_equal(b.len, len);

    ms_msg_init(&m, MS_MSG_TYPE_END);
    assert_int_equal(ms_msg_encode(&m, &b), MS_E_INVAL);
    ms_msg_init(&m, MS_MSG_HELLO);
    m.hello.version = 1;
    memset(m.hello.name, 'a', sizeof(m.hello.name)); /* unterminated */
    assert_int_equal(ms_msg_encode(&m, &b), MS_E_INVAL);
    m.hello.name[MS_PROTO_NAME_MAX] = '\0';
    assert_int_equal(ms_msg_encode(&m, &b), MS_OK);
    ms_msg_init(&m, MS_MSG_ERROR);
    m.error.code = 3;
    assert_int_equal(ms_msg_encode(&m, &b), MS_E_INVAL);
    /* More of the pinned host bytes pooled than pinned. */
    sample(&m, MS_MSG_REPORT);
    m.report.host_pool = m.report.host_bytes + 1;
    assert_int_equal(ms_msg_encode(&m, &b), MS_E_INVAL);
    sample(&m, MS_MSG_DEMAND);
    m.demand.host_pool = m.demand.host_bytes + 1;
    assert_int_equal(ms_msg_encode(&m, &b), MS_E_INVAL);
    ms_msg_free(&m);
    ms_msg_init(&m, MS_MSG_EVICT);
    assert_int_equal(ms_msg_encode(&m, &b), MS_E_INVAL); /* no runs */
    m.order.nruns = 1;
    assert_int_equal(ms_msg_encode(&m, &b), MS_E_INVAL); /* NULL array */

    /* Over the payload limit: NOSPACE, buffer unchanged. */
    len = b.len;
    uint32_t n = MS_PROTO_MAX_PAYLOAD / MS_PROTO_RUN_BYTES + 1;
    sample(&m, MS_MSG_EVICT);
    ms_free(m.order.runs);
    m.order.runs = runs_of(n, 0);
    m.order.nruns = n;
    assert_int_equal(ms_msg_encode(&m, &b), MS_E_NOSPACE);
    assert_int_equal(b.len, len);
    /* Exactly at the limit (8 bytes of header fields + runs). */
    m.order.nruns = (MS_PROTO_MAX_PAYLOAD - 8) / MS_PROTO_RUN_BYTES;
    assert_int_equal(ms_msg_encode(&m, &b), MS_OK);
    struct ms_msg back;
    size_t used;
    assert_int_equal(ms_msg_decode(b.data + len, b.len - len, &back, &used), 1);
    assert_int_equal(back.order.nruns, m.order.nruns);
    ms_msg_free(&back);
    ms_msg_free(&m);
    assert_int_equal(ms_msg_encode(NULL, &b), MS_E_INVAL);
    ms_buf_fini(&b);
}

/* ---- allocation failures -------------------------------------------------------------------- */

static void test_alloc_failures(void **state)
{
    (void)state;
    unsigned types[] = {MS_MSG_DEMAND, MS_MSG_EVICT,   MS_MSG_POPULATE,
                        MS_MSG_STATUS, MS_MSG_METRICS, MS_MSG_CONFIG};
    for (size_t i = 0; i < MS_ARRAY_LEN(types); i++) {
        struct ms_buf b;
        encode_sample(types[i], &b);
        uint64_t live = ms_alloc_live();
        int failures = 0;
        for (uint64_t n = 1;; n++) {
            struct ms_msg m;
            size_t used;
            ms_alloc_fail_after(n);
            int rc = ms_msg_decode(b.data, b.len, &m, &used);
            ms_alloc_fail_after(0);
            if (rc == 1) {
                ms_msg_free(&m);
                break;
            }
            assert_int_equal(rc, MS_E_NOMEM);
            assert_int_equal(ms_alloc_live(), live);
            failures++;
            assert_true(n < 10);
        }
        assert_true(failures >= 1);
        assert_int_equal(ms_alloc_live(), live);
        /* The encoder too: a fresh buffer must grow. */
        struct ms_msg m;
        sample(&m, types[i]);
        for (uint64_t n = 1;; n++) {
            struct ms_buf out;
            ms_buf_init(&out);
            ms_alloc_fail_after(n);
            int rc = ms_msg_encode(&m, &out);
            ms_alloc_fail_after(0);
            if (rc == MS_OK) {
                assert_int_equal(out.len, b.len);
                ms_buf_fini(&out);
                break;
            }
            assert_int_equal(rc, MS_E_NOMEM);
            assert_int_equal(out.len, 0);
            ms_buf_fini(&out);
            assert_true(n < 40);
        }
        ms_msg_free(&m);
        ms_buf_fini(&b);
    }
}

/* ---- randomized mutations ------------------------------------------------------------------- */

static void test_random_mutations(void **state)
{
    (void)state;
    struct ms_rng rng;
    ms_rng_seed(&rng, ms_test_seed(0x9e0707));
    uint64_t live = ms_alloc_live();
    unsigned accepted = 0, refused = 0;
    for (int iter = 0; iter < 20000; iter++) {
        unsigned t = 1 + (unsigned)ms_rng_below(&rng, MS_MSG_TYPE_END - 1);
        struct ms_buf b;
        encode_sample(t, &b);
        int nmut = 1 + (int)ms_rng_below(&rng, 3);
        for (int k = 0; k < nmut; k++) {
            size_t pos = (size_t)ms_rng_below(&rng, b.len);
            switch (ms_rng_below(&rng, 3)) {
            case 0: b.data[pos] ^= (uint8_t)(1u << ms_rng_below(&rng, 8)); break;
            case 1: b.data[pos] = (uint8_t)ms_rng_next(&rng); break;
            default: b.len = pos > MS_PROTO_HDR_BYTES ? pos : b.len; break;
            }
        }
        struct ms_msg m;
        size_t used = 0;
        int rc = ms_msg_decode(b.data, b.len, &m, &used);
        if (rc == 1) {
            accepted++;
            assert_true(used <= b.len);
            struct ms_buf again;
            ms_buf_init(&again);
            assert_int_equal(ms_msg_encode(&m, &again), MS_OK);
            assert_int_equal(again.len, used);
            assert_memory_equal(again.data, b.data, used);
            ms_buf_fini(&again);
        } else {
            assert_true(rc == 0 || rc == MS_E_PARSE || rc == MS_E_VERSION);
            assert_int_equal(used, 0);
            refused++;
        }
        ms_msg_free(&m);
        ms_buf_fini(&b);
    }
    assert_true(accepted > 0 && refused > 0);
    assert_int_equal(ms_alloc_live(), live);
}

/* ---- the fuzz corpus's seeds ---------------------------------------------------------------- */

/* tests/fuzz/corpus/proto/msg_<type> is the sample of every type, encoded as now: a version or
 * layout change that leaves the seeds behind would leave the fuzzer starting from frames the
 * decoder refuses at the header. MS_PROTO_WRITE_SEEDS=1 writes them (run from the repository's
 * root, as `make test` does). */
static void test_corpus_seeds_current(void **state)
{
    (void)state;
    const char *write = getenv("MS_PROTO_WRITE_SEEDS");
    for (unsigned t = 1; t < MS_MSG_TYPE_END; t++) {
        char path[128], name[64];
        snprintf(name, sizeof(name), "%s", ms_msg_type_name(t));
        for (char *c = name; *c; c++)
            *c = (char)(*c >= 'A' && *c <= 'Z' ? *c - 'A' + 'a' : *c);
        snprintf(path, sizeof(path), "tests/fuzz/corpus/proto/msg_%s", name);
        struct ms_buf b;
        encode_sample(t, &b);
        if (write && write[0] == '1') {
            FILE *f = fopen(path, "wb");
            assert_non_null(f);
            assert_int_equal(fwrite(b.data, 1, b.len, f), b.len);
            assert_int_equal(fclose(f), 0);
        }
        FILE *f = fopen(path, "rb");
        if (!f)
            fail_msg("no seed %s (run from the repository's root)", path);
        uint8_t seed[1 << 16];
        size_t n = fread(seed, 1, sizeof(seed), f);
        fclose(f);
        if (n != b.len || memcmp(seed, b.data, n) != 0)
            fail_msg("seed %s is not the current encoding of the %s sample (%zu bytes, now %zu): "
                     "MS_PROTO_WRITE_SEEDS=1 %s",
                     path, ms_msg_type_name(t), n, b.len, "build/tests/test_proto");
        ms_buf_fini(&b);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_every_type),
        cmocka_unit_test(test_stream_of_frames),
        cmocka_unit_test(test_truncation_at_every_byte),
        cmocka_unit_test(test_malformed_header),
        cmocka_unit_test(test_malformed_hello_fields),
        cmocka_unit_test(test_malformed_region),
        cmocka_unit_test(test_malformed_runs),
        cmocka_unit_test(test_malformed_other_fields),
        cmocka_unit_test(test_malformed_status),
        cmocka_unit_test(test_encode_refuses),
        cmocka_unit_test(test_alloc_failures),
        cmocka_unit_test(test_random_mutations),
        cmocka_unit_test(test_corpus_seeds_current),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
