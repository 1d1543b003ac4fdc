/*
 * gpu_sim.c - the simulated GPU behind the seam (see gpu_sim.h for the model).
 *
 * Implementation notes
 *   Streams: each stream is a FIFO of transfers {seq, call-cost ns left, bytes left}. The fluid
 *   engine (fluid_run) moves both heads forward together from the fluid time to a target time,
 *   one "segment" at a time: within a segment neither head changes phase, so each moves at a
 *   constant rate; a segment ends when a head finishes its call cost, finishes its bytes, or the
 *   target is reached. Rates are bytes per ns (GB/s == bytes/ns).
 *   Events: a slot array with generation numbers (token = gen << 32 | slot + 1, never 0). Each
 *   stream keeps a FIFO of the events recorded on it in record order; when a transfer completes,
 *   every event at its head whose seq is covered is marked done with that time.
 *   Physical handles: a slot array with generations too, so a stale or doubled unmap is refused.
 *   Content versions: an open-addressing table va -> version (linear probing, never shrinks).
 */
#include "gpu/sim/gpu_sim.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

struct sim_xfer {
    uint64_t seq;   /* 1-based position in its stream */
    double call_ns; /* fixed call cost still to run before bytes move */
    double bytes;   /* bytes still to move */
};

struct sim_stream {
    struct sim_xfer *q; /* q[head .. head+n) pending, oldest first */
    size_t head, n, cap;
    uint64_t next_seq;     /* seq the next queued transfer gets */
    uint64_t done_seq;     /* highest completed seq (0: none) */
    uint64_t last_done_ns; /* completion time of done_seq */
    double alone_gbps;     /* one-way bandwidth, the other direction idle */
    double shared_gbps;    /* this direction's share while both move data */
    uint32_t *evq;         /* event slots recorded here, not yet done, record order */
    size_t evhead, evn, evcap;
};

struct sim_event {
    uint64_t seq;     /* transfer the event waits for (0: nothing) */
    uint64_t done_ns; /* valid when done */
    uint32_t gen;
    uint8_t stream;
    bool live, done;
};

struct sim_handle {
    uint64_t bytes;
    uint32_t gen;
    bool live;
};

struct ms_gpu_sim {
    const struct ms_cost *cost;
    uint64_t capacity;
    uint64_t clock; /* virtual ns */
    double ftime;   /* fluid time of the streams, <= clock except inside wait */
    struct sim_stream st[2];
    struct sim_event *ev;
    size_t nev, capev;
    uint32_t *evfree;
    size_t nevfree, capevfree;
    struct sim_handle *h;
    size_t nh, caph;
    uint32_t *hfree;
    size_t nhfree, caphfree;
    uint64_t *ckey; /* content table: key va (slot empty when cused[i] == 0) */
    uint64_t *cval;
    uint8_t *cused;
    size_t ccap, ccount;
    struct ms_gpu_sim_stats stats;
    double busy[2], overlap; /* fluid accumulators for stats */
};

static uint64_t ceil_ns(double t)
{
    if (t <= 0)
        return 0;
    double c = ceil(t - 1e-6); /* absorb rounding noise just above an integer */
    return (uint64_t)c;
}

/* ---- content versions ---------------------------------------------------------------------- */

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

static size_t content_find(const struct ms_gpu_sim *s, uint64_t va)
{
    size_t mask = s->ccap - 1;
    size_t i = (size_t)mix64(va) & mask;
    while (s->cused[i] && s->ckey[i] != va)
        i = (i + 1) & mask;
    return i;
}

static int content_grow(struct ms_gpu_sim *s)
{
    size_t ncap = s->ccap ? s->ccap * 2 : 1024;
    uint64_t *k = ms_calloc(ncap, sizeof(*k));
    uint64_t *v = ms_calloc(ncap, sizeof(*v));
    uint8_t *u = ms_calloc(ncap, 1);
    if (!k || !v || !u) {
        ms_free(k);
        ms_free(v);
        ms_free(u);
        return MS_E_NOMEM;
    }
    uint64_t *ok = s->ckey, *ov = s->cval;
    uint8_t *ou = s->cused;
    size_t ocap = s->ccap;
    s->ckey = k;
    s->cval = v;
    s->cused = u;
    s->ccap = ncap;
    for (size_t i = 0; i < ocap; i++) {
        if (!ou[i])
            continue;
        size_t j = content_find(s, ok[i]);
        s->cused[j] = 1;
        s->ckey[j] = ok[i];
        s->cval[j] = ov[i];
    }
    ms_free(ok);
    ms_free(ov);
    ms_free(ou);
    return MS_OK;
}

int ms_gpu_sim_write(struct ms_gpu_sim *s, uint64_t va)
{
    if ((s->ccount + 1) * 2 > s->ccap) {
        int rc = content_grow(s);
        if (rc)
            return rc;
    }
    size_t i = content_find(s, va);
    if (!s->cused[i]) {
        s->cused[i] = 1;
        s->ckey[i] = va;
        s->cval[i] = 0;
        s->ccount++;
    }
    s->cval[i]++;
    return MS_OK;
}

uint64_t ms_gpu_sim_version(const struct ms_gpu_sim *s, uint64_t va)
{
    if (s->ccap == 0)
        return 0;
    size_t i = content_find(s, va);
    return s->cused[i] ? s->cval[i] : 0;
}

/* ---- the fluid engine ---------------------------------------------------------------------- */

static void stream_complete(struct ms_gpu_sim *s, int si, uint64_t done_ns)
{
    struct sim_stream *st = &s->st[si];
    struct sim_xfer *x = &st->q[st->head];
    st->done_seq = x->seq;
    st->last_done_ns = done_ns;
    st->head++;
    st->n--;
    if (st->n == 0)
        st->head = 0;
    while (st->evn > 0) {
        uint32_t slot = st->evq[st->evhead];
        struct sim_event *e = &s->ev[slot];
        if (e->live && !e->done) {
            if (e->seq > st->done_seq)
                break;
            e->done = true;
            e->done_ns = done_ns;
        }
        st->evhead++;
        st->evn--;
    }
    if (st->evn == 0)
        st->evhead = 0;
}

/*
 * Move both streams forward until fluid time `target`, or (when until_stream >= 0) until that
 * stream has completed seq until_seq, whichever comes first.
 */
static void fluid_run(struct ms_gpu_sim *s, double target, int until_stream, uint64_t until_seq)
{
    for (;;) {
        if (until_stream >= 0 && s->st[until_stream].done_seq >= until_seq)
            return;
        if (until_stream < 0 && s->ftime >= target)
            return;
        bool active[2], moving[2];
        for (int i = 0; i < 2; i++) {
            active[i] = s->st[i].n > 0;
            moving[i] = active[i] && s->st[i].q[s->st[i].head].call_ns <= 0;
        }
        if (!active[0] && !active[1]) {
            if (until_stream < 0)
                s->ftime = target;
            return; /* nothing queued: an awaited seq is already done or was never queued */
        }
        double rate[2] = {0, 0}, dt = INFINITY;
        int ends = -1;
        for (int i = 0; i < 2; i++) {
            if (!active[i])
                continue;
            struct sim_xfer *x = &s->st[i].q[s->st[i].head];
            double d;
            if (!moving[i]) {
                d = x->call_ns;
            } else {
                rate[i] = moving[1 - i] ? s->st[i].shared_gbps : s->st[i].alone_gbps;
                d = x->bytes / rate[i];
            }
            if (d < dt) {
                dt = d;
                ends = i;
            }
        }
        if (until_stream < 0 && s->ftime + dt > target) {
            dt = target - s->ftime;
            ends = -1;
        }
        for (int i = 0; i < 2; i++) {
            if (!active[i])
                continue;
            struct sim_xfer *x = &s->st[i].q[s->st[i].head];
            if (!moving[i]) {
                x->call_ns -= dt;
                if (i == ends || x->call_ns < 1e-9)
                    x->call_ns = 0;
            } else {
                x->bytes -= rate[i] * dt;
                if (i == ends || x->bytes < 1e-6)
                    x->bytes = 0;
                s->busy[i] += dt;
            }
        }
        if (moving[0] && moving[1])
            s->overlap += dt;
        s->ftime += dt;
        for (int i = 0; i < 2; i++) {
            if (!active[i])
                continue;
            struct sim_xfer *x = &s->st[i].q[s->st[i].head];
            if (x->call_ns <= 0 && x->bytes <= 0)
                stream_complete(s, i, ceil_ns(s->ftime));
        }
    }
}

static void fluid_to_clock(struct ms_gpu_sim *s)
{
    if (s->ftime < (double)s->clock)
        fluid_run(s, (double)s->clock, -1, 0);
}

/* ---- lifetime ------------------------------------------------------------------------------ */

int ms_gpu_sim_create(const struct ms_cost *cost, uint64_t capacity, struct ms_gpu_sim **out)
{
    if (!cost || !out)
        return MS_E_INVAL;
    struct ms_gpu_sim *s = ms_calloc(1, sizeof(*s));
    if (!s)
        return MS_E_NOMEM;
    s->cost = cost;
    s->capacity = capacity;
    s->st[MS_STREAM_OUT].alone_gbps = cost->d2h_gbps;
    s->st[MS_STREAM_IN].alone_gbps = cost->h2d_gbps;
    s->st[MS_STREAM_OUT].shared_gbps = ms_cost_duplex_share_gbps(cost, false);
    s->st[MS_STREAM_IN].shared_gbps = ms_cost_duplex_share_gbps(cost, true);
    for (int i = 0; i < 2; i++) {
        s->st[i].next_seq = 1;
        if (!(s->st[i].alone_gbps > 0) || !(s->st[i].shared_gbps > 0)) {
            ms_free(s);
            return MS_E_INVAL;
        }
    }
    *out = s;
    return MS_OK;
}

void ms_gpu_sim_destroy(struct ms_gpu_sim *s)
{
    if (!s)
        return;
    for (int i = 0; i < 2; i++) {
        ms_free(s->st[i].q);
        ms_free(s->st[i].evq);
    }
    ms_free(s->ev);
    ms_free(s->evfree);
    ms_free(s->h);
    ms_free(s->hfree);
    ms_free(s->ckey);
    ms_free(s->cval);
    ms_free(s->cused);
    ms_free(s);
}

uint64_t ms_gpu_sim_now(const struct ms_gpu_sim *s)
{
    return s->clock;
}

void ms_gpu_sim_advance(struct ms_gpu_sim *s, uint64_t ns)
{
    s->clock += ns;
}

void ms_gpu_sim_cpu(struct ms_gpu_sim *s, uint64_t ns)
{
    s->clock += ns;
}

void ms_gpu_sim_stats(struct ms_gpu_sim *s, struct ms_gpu_sim_stats *out)
{
    fluid_to_clock(s);
    s->stats.busy_ns[0] = (uint64_t)llround(s->busy[0]);
    s->stats.busy_ns[1] = (uint64_t)llround(s->busy[1]);
    s->stats.overlap_ns = (uint64_t)llround(s->overlap);
    *out = s->stats;
}

/* ---- the seam ------------------------------------------------------------------------------ */

static int sim_map(void *impl, struct ms_gpu_chunk *c, size_t n)
{
    struct ms_gpu_sim *s = impl;
    uint64_t total = 0, ns = 0;
    for (size_t i = 0; i < n; i++) {
        if (c[i].bytes == 0 || c[i].bytes % MS_GRAN)
            return MS_E_INVAL;
        total += c[i].bytes;
        ns += ms_cost_map_ns(s->cost, c[i].bytes);
    }
    if (s->capacity != UINT64_MAX &&
        (total > s->capacity || s->stats.mapped_bytes > s->capacity - total))
        return MS_E_GPU; /* all-or-nothing: nothing mapped */
    if (s->nhfree < n) {
        /* make room for every new handle first, so the loop below cannot fail half-way */
        size_t need = s->nh + (n - s->nhfree);
        if (ms_grow((void **)&s->h, &s->caph, need, sizeof(*s->h)))
            return MS_E_NOMEM;
        if (ms_grow((void **)&s->hfree, &s->caphfree, need, sizeof(*s->hfree)))
            return MS_E_NOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        uint32_t slot;
        if (s->nhfree > 0) {
            slot = s->hfree[--s->nhfree];
        } else {
            slot = (uint32_t)s->nh++;
            s->h[slot].gen = 0;
        }
        s->h[slot].gen++;
        s->h[slot].live = true;
        s->h[slot].bytes = c[i].bytes;
        c[i].phys = ((uint64_t)s->h[slot].gen << 32) | (uint64_t)(slot + 1);
    }
    s->stats.mapped_bytes += total;
    if (s->stats.mapped_bytes > s->stats.peak_mapped)
        s->stats.peak_mapped = s->stats.mapped_bytes;
    s->stats.maps += n;
    s->clock += ns;
    return MS_OK;
}

static struct sim_handle *handle_of(struct ms_gpu_sim *s, uint64_t phys)
{
    uint64_t slot1 = phys & 0xffffffffull;
    if (slot1 == 0 || slot1 > s->nh)
        return NULL;
    struct sim_handle *h = &s->h[slot1 - 1];
    if (!h->live || h->gen != (uint32_t)(phys >> 32))
        return NULL;
    return h;
}

static int sim_unmap(void *impl, struct ms_gpu_chunk *c, size_t n)
{
    struct ms_gpu_sim *s = impl;
    int first = MS_OK;
    for (size_t i = 0; i < n; i++) {
        struct sim_handle *h = handle_of(s, c[i].phys);
        if (!h || h->bytes != c[i].bytes) {
            if (first == MS_OK)
                first = MS_E_INVAL;
            continue;
        }
        h->live = false;
        s->hfree[s->nhfree++] = (uint32_t)(h - s->h); /* capacity reserved at map time */
        s->stats.mapped_bytes -= h->bytes;
        s->stats.unmaps++;
        s->clock += ms_cost_unmap_ns(s->cost, c[i].bytes);
    }
    return first;
}

static int sim_copy(void *impl, enum ms_stream sid, const struct ms_gpu_chunk *c, size_t n)
{
    struct ms_gpu_sim *s = impl;
    if (sid != MS_STREAM_OUT && sid != MS_STREAM_IN)
        return MS_E_INVAL;
    for (size_t i = 0; i < n; i++)
        if (c[i].bytes == 0)
            return MS_E_INVAL;
    if (n == 0)
        return MS_OK;
    fluid_to_clock(s);
    struct sim_stream *st = &s->st[sid];
    if (st->head > 0 && st->head + st->n + n > st->cap) {
        memmove(st->q, st->q + st->head, st->n * sizeof(*st->q));
        st->head = 0;
    }
    if (ms_grow((void **)&st->q, &st->cap, st->head + st->n + n, sizeof(*st->q)))
        return MS_E_NOMEM;
    double call_ns = s->cost->copy_call_us * 1e3;
    for (size_t i = 0; i < n; i++) {
        struct sim_xfer *x = &st->q[st->head + st->n++];
        x->seq = st->next_seq++;
        x->call_ns = i == 0 ? call_ns : 0;
        x->bytes = (double)c[i].bytes;
        if (sid == MS_STREAM_IN)
            s->stats.bytes_h2d += c[i].bytes;
        else
            s->stats.bytes_d2h += c[i].bytes;
    }
    s->stats.copies += n;
    s->stats.copy_calls++;
    return MS_OK;
}

static int sim_record(void *impl, enum ms_stream sid, uint64_t *out_event)
{
    struct ms_gpu_sim *s = impl;
    if ((sid != MS_STREAM_OUT && sid != MS_STREAM_IN) || !out_event)
        return MS_E_INVAL;
    struct sim_stream *st = &s->st[sid];
    if (st->evhead > 0 && st->evhead + st->evn + 1 > st->evcap) {
        memmove(st->evq, st->evq + st->evhead, st->evn * sizeof(*st->evq));
        st->evhead = 0;
    }
    if (ms_grow((void **)&st->evq, &st->evcap, st->evhead + st->evn + 1, sizeof(*st->evq)))
        return MS_E_NOMEM;
    uint32_t slot;
    if (s->nevfree > 0) {
        slot = s->evfree[--s->nevfree];
    } else {
        if (ms_grow((void **)&s->ev, &s->capev, s->nev + 1, sizeof(*s->ev)))
            return MS_E_NOMEM;
        if (ms_grow((void **)&s->evfree, &s->capevfree, s->nev + 1, sizeof(*s->evfree)))
            return MS_E_NOMEM;
        slot = (uint32_t)s->nev++;
        s->ev[slot].gen = 0;
    }
    struct sim_event *e = &s->ev[slot];
    e->gen++;
    e->live = true;
    e->stream = (uint8_t)sid;
    e->seq = st->next_seq - 1;
    if (e->seq <= st->done_seq) {
        e->done = true;
        e->done_ns = e->seq == 0 ? 0 : st->last_done_ns;
    } else {
        e->done = false;
        st->evq[st->evhead + st->evn++] = slot; /* room reserved above */
    }
    *out_event = ((uint64_t)e->gen << 32) | (uint64_t)(slot + 1);
    return MS_OK;
}

static struct sim_event *event_of(struct ms_gpu_sim *s, uint64_t token)
{
    uint64_t slot1 = token & 0xffffffffull;
    if (slot1 == 0 || slot1 > s->nev)
        return NULL;
    struct sim_event *e = &s->ev[slot1 - 1];
    if (!e->live || e->gen != (uint32_t)(token >> 32))
        return NULL;
    return e;
}

static int sim_wait(void *impl, uint64_t token)
{
    struct ms_gpu_sim *s = impl;
    struct sim_event *e = event_of(s, token);
    if (!e)
        return MS_E_INVAL;
    if (!e->done) {
        fluid_run(s, INFINITY, e->stream, e->seq);
        if (!e->done) { /* cannot happen: the transfer was queued, so it completes */
            e->done = true;
            e->done_ns = s->st[e->stream].last_done_ns;
        }
    }
    if (e->done_ns > s->clock)
        s->clock = e->done_ns;
    return MS_OK;
}

static void sim_release_event(void *impl, uint64_t token)
{
    struct ms_gpu_sim *s = impl;
    struct sim_event *e = event_of(s, token);
    if (!e)
        return;
    e->live = false;
    /* a pending entry in its stream's event FIFO is skipped when reached */
    s->evfree[s->nevfree++] = (uint32_t)(e - s->ev);
}

static int sim_hash(void *impl, const struct ms_gpu_chunk *c, size_t n, uint64_t *out)
{
    struct ms_gpu_sim *s = impl;
    for (size_t i = 0; i < n; i++) {
        uint64_t v = ms_gpu_sim_version(s, c[i].va);
        uint64_t hsh = mix64(c[i].va ^ mix64(v + 0x9e3779b97f4a7c15ull));
        out[i] = hsh ? hsh : 1;
        s->clock += ms_cost_hash_ns(s->cost, c[i].bytes);
    }
    s->stats.hashes += n;
    return MS_OK;
}

static int sim_info(void *impl, struct ms_gpu_info *out)
{
    struct ms_gpu_sim *s = impl;
    out->total_bytes = s->capacity;
    out->free_bytes = s->capacity == UINT64_MAX ? UINT64_MAX : s->capacity - s->stats.mapped_bytes;
    return MS_OK;
}

static uint64_t sim_now(void *impl)
{
    return ((struct ms_gpu_sim *)impl)->clock;
}

void ms_gpu_sim_ops(struct ms_gpu_sim *s, struct ms_gpu_ops *out)
{
    memset(out, 0, sizeof(*out));
    out->name = "sim";
    out->impl = s;
    out->map = sim_map;
    out->unmap = sim_unmap;
    out->copy = sim_copy;
    out->record = sim_record;
    out->wait = sim_wait;
    out->release_event = sim_release_event;
    out->hash = sim_hash;
    out->info = sim_info;
    out->now_ns = sim_now;
}
