/*
 * gpu_fake.c - the scripted GPU seam (contract: gpu_fake.h).
 *
 * Mappings are kept in an unsorted array (tests map tens of chunks); events in another. Copies
 * complete at once but their completion status is only reported by wait, like a real stream.
 * Host chunks are heap records ({bytes, mem, at}); `at` is the chunk address they are mapped at
 * (0: none). map refuses a chunk whose host chunk is not mapped at its address, unmap maps it
 * back: the seam's contract, checked.
 */
#include "gpu_fake.h"

#include <stdlib.h>
#include <string.h>

struct fmap {
    uint64_t va, bytes, phys;
    uint8_t *mem;
};

struct fhost {
    uint64_t bytes, at;
    uint8_t *mem;
    struct fhost *next, *prev; /* the live list, freed by ms_gpu_fake_free */
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
    struct fhost *hosts; /* live host chunks */
    uint64_t nhosts, host_hits;
};

static struct fhost *fh(const struct ms_gpu_chunk *c)
{
    return (struct fhost *)(uintptr_t)c->hchunk;
}

static struct fhost *host_at(struct ms_gpu_fake *f, uint64_t va)
{
    for (struct fhost *h = f->hosts; h; h = h->next)
        if (h->at && va >= h->at && va - h->at < h->bytes)
            return h;
    return NULL;
}

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
        else if (c[i].hchunk &&
                 (fh(&c[i])->at != (c[i].bare ? 0 : c[i].va) || fh(&c[i])->bytes != c[i].bytes))
            err = MS_E_STATE; /* its host chunk is not where the contract says */
        else if (!c[i].hchunk && host_at(f, c[i].va))
            err = MS_E_STATE; /* a host chunk is mapped there */
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
        if (c[i].hchunk)
            fh(&c[i])->at = 0;
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
        if (c[i].hchunk)
            fh(&c[i])->at = c[i].bare ? 0 : c[i].va; /* always mapped, or left bare */
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
        uint8_t *dev = m->mem + (c[i].va - m->va);
        if (c[i].hchunk) {
            if (fh(&c[i])->bytes != c[i].bytes)
                return MS_E_INVAL;
            if (s == MS_STREAM_OUT)
                memcpy(fh(&c[i])->mem, dev, c[i].bytes);
            else
                memcpy(dev, fh(&c[i])->mem, c[i].bytes);
            continue;
        }
        if (!c[i].host)
            continue;
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
        struct fmap *m = find_map(f, c[i].va); /* device memory only */
        if (!m || c[i].bytes > m->bytes - (c[i].va - m->va))
            return MS_E_INVAL;
        uint8_t *p = m->mem + (c[i].va - m->va);
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

static void host_destroy(struct ms_gpu_fake *f, struct fhost *h)
{
    if (h->prev)
        h->prev->next = h->next;
    else
        f->hosts = h->next;
    if (h->next)
        h->next->prev = h->prev;
    f->nhosts--;
    free(h->mem);
    free(h);
}

static void f_host_free(void *impl, const struct ms_gpu_chunk *c, size_t n)
{
    struct ms_gpu_fake *f = impl;
    for (size_t i = 0; i < n; i++)
        if (c[i].hchunk)
            host_destroy(f, fh(&c[i]));
}

static int f_host_new(void *impl, struct ms_gpu_chunk *c, size_t n)
{
    struct ms_gpu_fake *f = impl;
    int e = tick(f, MS_FAKE_HOST);
    if (e)
        return e;
    for (size_t i = 0; i < n; i++) {
        if (c[i].hchunk)
            continue;
        struct fhost *h = calloc(1, sizeof(*h));
        uint8_t *mem = c[i].bytes ? malloc(c[i].bytes) : NULL;
        if (!h || !mem) {
            free(h);
            free(mem);
            for (size_t k = 0; k < i; k++) /* all-or-nothing: the ones made here are first */
                if (c[k].hchunk && fh(&c[k])->at == UINT64_MAX) {
                    host_destroy(f, fh(&c[k]));
                    c[k].hchunk = 0;
                }
            return MS_E_NOMEM;
        }
        memset(mem, 0x5A, c[i].bytes); /* never zeros */
        *h = (struct fhost){.bytes = c[i].bytes, .at = UINT64_MAX, .mem = mem, .next = f->hosts};
        if (f->hosts)
            f->hosts->prev = h;
        f->hosts = h;
        f->nhosts++;
        c[i].hchunk = (uint64_t)(uintptr_t)h;
    }
    for (struct fhost *h = f->hosts; h; h = h->next)
        if (h->at == UINT64_MAX)
            h->at = 0; /* made here, not mapped anywhere yet */
    return MS_OK;
}

static int f_host_unmap(void *impl, const struct ms_gpu_chunk *c, size_t n)
{
    struct ms_gpu_fake *f = impl;
    int e = tick(f, MS_FAKE_HOST);
    for (size_t i = 0; i < n && e == MS_OK; i++)
        if (!c[i].hchunk || fh(&c[i])->at != c[i].va)
            e = MS_E_INVAL;
    for (size_t i = 0; i < n && e == MS_OK; i++)
        fh(&c[i])->at = 0;
    return e;
}

static int f_host_map(void *impl, const struct ms_gpu_chunk *c, size_t n)
{
    struct ms_gpu_fake *f = impl;
    int e = tick(f, MS_FAKE_HOST);
    for (size_t i = 0; i < n && e == MS_OK; i++)
        if (!c[i].hchunk || fh(&c[i])->at || fh(&c[i])->bytes != c[i].bytes ||
            find_map(f, c[i].va) || host_at(f, c[i].va))
            e = MS_E_INVAL;
    for (size_t i = 0; i < n && e == MS_OK; i++)
        fh(&c[i])->at = c[i].va;
    return e;
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
        .host_new = f_host_new,
        .host_free = f_host_free,
        .host_map = f_host_map,
        .host_unmap = f_host_unmap,
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
    while (f->hosts)
        host_destroy(f, f->hosts);
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
    if (m)
        return len > m->bytes - (va - m->va) ? NULL : m->mem + (va - m->va);
    struct fhost *h = host_at(f, va);
    if (!h || len > h->bytes - (va - h->at))
        return NULL;
    f->host_hits++;
    return h->mem + (va - h->at);
}

uint64_t ms_gpu_fake_host_chunks(const struct ms_gpu_fake *f)
{
    return f->nhosts;
}

uint64_t ms_gpu_fake_host_hits(const struct ms_gpu_fake *f)
{
    return f->host_hits;
}
