/*
 * gpu_fake.c - the scripted GPU seam (contract: gpu_fake.h).
 *
 * Mappings are kept in an unsorted array (tests map tens of chunks); events in another. Copies
 * complete at once but their completion status is only reported by wait, like a real stream.
 */
#include "gpu_fake.h"

#include <stdlib.h>
#include <string.h>

struct fmap {
    uint64_t va, bytes, phys;
    uint8_t *mem;
};

struct fevent {
    uint64_t id;
    int status;
    int live;
};

struct ms_gpu_fake {
    struct ms_gpu_ops ops;
    uint64_t capacity, used;
    uint64_t calls[MS_FAKE_OPS];
    uint64_t total;
    uint64_t fail_countdown, fail_wait_countdown;
    int pending_status[2]; /* status of the last copy on each stream, picked up by record */
    struct fmap *maps;
    size_t nmaps, capmaps;
    struct fevent *events;
    size_t nevents, capevents;
    uint64_t next_phys, next_event, live_events, clock;
};

static int tick(struct ms_gpu_fake *f, enum ms_fake_op op)
{
    f->calls[op]++;
    f->total++;
    f->clock += 1000;
    if (f->fail_countdown && --f->fail_countdown == 0)
        return MS_E_GPU;
    return MS_OK;
}

static int grow(void **arr, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return MS_OK;
    size_t n = *cap ? *cap * 2 : 16;
    while (n < need)
        n *= 2;
    void *p = realloc(*arr, n * elem);
    if (!p)
        return MS_E_NOMEM;
    *arr = p;
    *cap = n;
    return MS_OK;
}

static struct fmap *find_map(struct ms_gpu_fake *f, uint64_t va)
{
    for (size_t i = 0; i < f->nmaps; i++)
        if (va >= f->maps[i].va && va - f->maps[i].va < f->maps[i].bytes)
            return &f->maps[i];
    return NULL;
}

static int unmap_raw(struct ms_gpu_fake *f, struct ms_gpu_chunk *c, size_t n);

static int f_map(void *impl, struct ms_gpu_chunk *c, size_t n)
{
    struct ms_gpu_fake *f = impl;
    int e = tick(f, MS_FAKE_MAP);
    if (e)
        return e;
    for (size_t i = 0; i < n; i++) {
        int err = MS_OK;
        if (c[i].bytes == 0 || c[i].bytes % MS_GRAN || c[i].va % MS_GRAN)
            err = MS_E_INVAL;
        else if (find_map(f, c[i].va) || find_map(f, c[i].va + c[i].bytes - 1))
            err = MS_E_STATE;
        else if (f->used + c[i].bytes > f->capacity)
            err = MS_E_NOSPACE;
        else if (grow((void **)&f->maps, &f->capmaps, f->nmaps + 1, sizeof(*f->maps)))
            err = MS_E_NOMEM;
        uint8_t *mem = NULL;
        if (!err) {
            mem = malloc(c[i].bytes);
            if (!mem)
                err = MS_E_NOMEM;
        }
        if (err) {
            unmap_raw(f, c, i); /* all-or-nothing */
            return err;
        }
        memset(mem, 0xA5, c[i].bytes); /* fresh memory holds garbage, never zeros */
        c[i].phys = ++f->next_phys;
        f->maps[f->nmaps++] = (struct fmap){c[i].va, c[i].bytes, c[i].phys, mem};
        f->used += c[i].bytes;
    }
    return MS_OK;
}

static int f_unmap(void *impl, struct ms_gpu_chunk *c, size_t n)
{
    struct ms_gpu_fake *f = impl;
    int e = tick(f, MS_FAKE_UNMAP);
    if (e)
        return e;
    return unmap_raw(f, c, n);
}

static int unmap_raw(struct ms_gpu_fake *f, struct ms_gpu_chunk *c, size_t n)
{
    int first = MS_OK;
    for (size_t i = 0; i < n; i++) {
        struct fmap *m = find_map(f, c[i].va);
        if (!m || m->va != c[i].va || m->phys != c[i].phys) {
            if (!first)
                first = MS_E_INVAL;
            continue;
        }
        f->used -= m->bytes;
        free(m->mem);
        *m = f->maps[--f->nmaps];
    }
    return first;
}

static int f_copy(void *impl, enum ms_stream s, const struct ms_gpu_chunk *c, size_t n)
{
    struct ms_gpu_fake *f = impl;
    int e = tick(f, MS_FAKE_COPY);
    if (e)
        return e;
    for (size_t i = 0; i < n; i++) {
        struct fmap *m = find_map(f, c[i].va);
        if (!m || c[i].va + c[i].bytes > m->va + m->bytes)
            return MS_E_INVAL;
        if (!c[i].host)
            continue;
        uint8_t *dev = m->mem + (c[i].va - m->va);
        if (s == MS_STREAM_OUT)
            memcpy(c[i].host, dev, c[i].bytes);
        else
            memcpy(dev, c[i].host, c[i].bytes);
    }
    return MS_OK;
}

static int f_record(void *impl, enum ms_stream s, uint64_t *out)
{
    struct ms_gpu_fake *f = impl;
    (void)s;
    int e = tick(f, MS_FAKE_RECORD);
    if (e)
        return e;
    if (grow((void **)&f->events, &f->capevents, f->nevents + 1, sizeof(*f->events)))
        return MS_E_NOMEM;
    *out = ++f->next_event;
    f->events[f->nevents++] = (struct fevent){*out, MS_OK, 1};
    f->live_events++;
    return MS_OK;
}

static struct fevent *find_event(struct ms_gpu_fake *f, uint64_t id)
{
    for (size_t i = 0; i < f->nevents; i++)
        if (f->events[i].id == id && f->events[i].live)
            return &f->events[i];
    return NULL;
}

static int f_wait(void *impl, uint64_t id)
{
    struct ms_gpu_fake *f = impl;
    int e = tick(f, MS_FAKE_WAIT);
    if (e)
        return e;
    struct fevent *ev = find_event(f, id);
    if (!ev)
        return MS_E_INVAL;
    if (f->fail_wait_countdown && --f->fail_wait_countdown == 0)
        ev->status = MS_E_GPU;
    return ev->status;
}

static void f_release(void *impl, uint64_t id)
{
    struct ms_gpu_fake *f = impl;
    struct fevent *ev = find_event(f, id);
    if (!ev)
        return;
    ev->live = 0;
    f->live_events--;
    *ev = f->events[--f->nevents];
}

static int f_hash(void *impl, const struct ms_gpu_chunk *c, size_t n, uint64_t *out)
{
    struct ms_gpu_fake *f = impl;
    int e = tick(f, MS_FAKE_HASH);
    if (e)
        return e;
    for (size_t i = 0; i < n; i++) {
        uint8_t *p = ms_gpu_fake_access(f, c[i].va, c[i].bytes);
        if (!p)
            return MS_E_INVAL;
        uint64_t h = 1469598103934665603ull; /* FNV-1a */
        for (uint64_t k = 0; k < c[i].bytes; k++)
            h = (h ^ p[k]) * 1099511628211ull;
        out[i] = h ? h : 1;
    }
    return MS_OK;
}

static int f_info(void *impl, struct ms_gpu_info *out)
{
    struct ms_gpu_fake *f = impl;
    out->total_bytes = f->capacity;
    out->free_bytes = f->capacity - f->used;
    return MS_OK;
}

static uint64_t f_now(void *impl)
{
    return ((struct ms_gpu_fake *)impl)->clock;
}

struct ms_gpu_fake *ms_gpu_fake_new(uint64_t capacity)
{
    struct ms_gpu_fake *f = calloc(1, sizeof(*f));
    if (!f)
        return NULL;
    f->capacity = capacity;
    f->ops = (struct ms_gpu_ops){
        .name = "fake",
        .impl = f,
        .map = f_map,
        .unmap = f_unmap,
        .copy = f_copy,
        .record = f_record,
        .wait = f_wait,
        .release_event = f_release,
        .hash = f_hash,
        .info = f_info,
        .now_ns = f_now,
    };
    return f;
}

void ms_gpu_fake_free(struct ms_gpu_fake *f)
{
    if (!f)
        return;
    for (size_t i = 0; i < f->nmaps; i++)
        free(f->maps[i].mem);
    free(f->maps);
    free(f->events);
    free(f);
}

const struct ms_gpu_ops *ms_gpu_fake_ops(struct ms_gpu_fake *f)
{
    return &f->ops;
}
void ms_gpu_fake_fail_after(struct ms_gpu_fake *f, uint64_t n)
{
    f->fail_countdown = n;
}
void ms_gpu_fake_fail_wait_after(struct ms_gpu_fake *f, uint64_t n)
{
    f->fail_wait_countdown = n;
}
uint64_t ms_gpu_fake_calls(const struct ms_gpu_fake *f, enum ms_fake_op op)
{
    return f->calls[op];
}
uint64_t ms_gpu_fake_total_calls(const struct ms_gpu_fake *f)
{
    return f->total;
}
uint64_t ms_gpu_fake_live_maps(const struct ms_gpu_fake *f)
{
    return f->nmaps;
}
uint64_t ms_gpu_fake_live_events(const struct ms_gpu_fake *f)
{
    return f->live_events;
}
uint64_t ms_gpu_fake_used(const struct ms_gpu_fake *f)
{
    return f->used;
}

void *ms_gpu_fake_access(struct ms_gpu_fake *f, uint64_t va, uint64_t len)
{
    struct fmap *m = find_map(f, va);
    if (!m || len > m->bytes - (va - m->va))
        return NULL;
    return m->mem + (va - m->va);
}
