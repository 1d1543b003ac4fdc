/*
 * hook_capture.c - stream capture begins and ends (cuStreamBeginCapture*, cuStreamEndCapture*):
 * which captures are open, so that nothing msched does disturbs one.
 *
 * Design
 *   While a capture in global or thread-local mode is open, a context synchronization from any
 *   thread (the engine's before a migration, the daemon client's drain before answering STOP or
 *   carrying out EVICT) breaks it: the driver fails the capture with
 *   CUDA_ERROR_STREAM_CAPTURE_INVALIDATED at its end (torch.cuda.graph failed so on the H200).
 *   So the hooks keep a table of open captures, and ms__shim_capture_open() says whether one that
 *   such a call would break is open. A relaxed-mode capture is not counted: it allows those
 *   calls. The legacy cuStreamBeginCapture (no mode) is counted as global, the mode it behaves
 *   as.
 *
 *   A capture ends at its cuStreamEndCapture, whatever that returns (an invalidated capture
 *   ends there too). A program that never ends one would keep the table's entry forever, so
 *   ms__shim_capture_open() asks the driver about every entry it can ask about
 *   (cuStreamIsCapturing): an entry whose stream no longer captures, or whose capture is
 *   already invalidated (nothing left to protect), is dropped. A per-thread default stream's
 *   capture can only be asked about from its own thread, so that entry stays until its end.
 *
 * Invariants (under `lock`): at most MAX_OPEN entries; an entry is (stream handle, thread for
 *   per-thread streams, counted); `counted` equals the number of counted entries. A capture that
 *   does not fit the table (more than MAX_OPEN at once) is counted in `overflow` until any end,
 *   which keeps the answer conservative (open) rather than wrong.
 *   The begin gate: a synchronization that must not break a capture (the daemon client's drain)
 *   holds the gate, waits until no capture is beginning or open, synchronizes and releases; a
 *   begin marks itself as beginning unless the gate is held, and waits for the release if it
 *   is, so a capture never begins just before that synchronization (a begin and a hold that
 *   race: each sets its flag, then reads the other's, so at least one sees the other).
 * Locking: one internal mutex, never held across a driver call other than cuStreamIsCapturing.
 */
#include "shim/shim_int.h"

#include <pthread.h>
#include <string.h>

#define MAX_OPEN 64

struct open_capture {
    CUstream stream;
    pthread_t thread; /* meaningful for per-thread streams only */
    bool per_thread;
    bool counted; /* global or thread-local mode */
    bool live;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct open_capture open_tab[MAX_OPEN];
static unsigned counted, overflow;

/* The begin gate (ms__shim_capture_hold): `held` while a synchronization is coming, `beginning`
 * counts begins in progress; a begin waits on `unheld` (under `lock`) while held. */
static int held;
static unsigned beginning;
static pthread_cond_t unheld = PTHREAD_COND_INITIALIZER;

/* Before a begin: mark it as beginning, unless a synchronization is coming (then wait for it). */
static void begin_enter(void)
{
    for (;;) {
        __atomic_add_fetch(&beginning, 1, __ATOMIC_SEQ_CST);
        if (!__atomic_load_n(&held, __ATOMIC_SEQ_CST))
            return; /* a holder that comes now waits for this begin to be recorded */
        __atomic_sub_fetch(&beginning, 1, __ATOMIC_SEQ_CST);
        pthread_mutex_lock(&lock);
        while (__atomic_load_n(&held, __ATOMIC_SEQ_CST))
            pthread_cond_wait(&unheld, &lock);
        pthread_mutex_unlock(&lock);
    }
}

void ms__shim_capture_hold(void)
{
    __atomic_store_n(&held, 1, __ATOMIC_SEQ_CST);
}

bool ms__shim_capture_quiet(void)
{
    return __atomic_load_n(&beginning, __ATOMIC_SEQ_CST) == 0 && !ms__shim_capture_open();
}

void ms__shim_capture_atfork_child(void)
{
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t fresh_cond = PTHREAD_COND_INITIALIZER;
    lock = fresh;
    unheld = fresh_cond;
    held = 0;
    beginning = 0;
    counted = overflow = 0;
    memset(open_tab, 0, sizeof open_tab);
}

void ms__shim_capture_release(void)
{
    pthread_mutex_lock(&lock);
    __atomic_store_n(&held, 0, __ATOMIC_SEQ_CST);
    pthread_cond_broadcast(&unheld);
    pthread_mutex_unlock(&lock);
}

static bool is_per_thread(CUstream s, bool ptsz)
{
    return s == CU_STREAM_PER_THREAD || (!s && ptsz);
}

static struct open_capture *find(CUstream s, bool per_thread)
{
    for (int i = 0; i < MAX_OPEN; i++) {
        struct open_capture *o = &open_tab[i];
        if (o->live && o->stream == s && o->per_thread == per_thread &&
            (!per_thread || pthread_equal(o->thread, pthread_self())))
            return o;
    }
    return NULL;
}

static void record(CUstream s, bool ptsz, bool counts);

/* After a begin (each hook called begin_enter before it): record it, then let a holder that
 * waits for beginning captures go on. */
static void began(CUresult rc, CUstream s, bool ptsz, bool counts)
{
    if (rc == CUDA_SUCCESS)
        record(s, ptsz, counts);
    __atomic_sub_fetch(&beginning, 1, __ATOMIC_SEQ_CST);
}

static void record(CUstream s, bool ptsz, bool counts)
{
    bool pt = is_per_thread(s, ptsz);
    pthread_mutex_lock(&lock);
    struct open_capture *o = find(s, pt);
    for (int i = 0; !o && i < MAX_OPEN; i++)
        if (!open_tab[i].live)
            o = &open_tab[i];
    if (!o) {
        if (counts)
            overflow++;
    } else {
        if (o->live && o->counted)
            counted--;
        *o = (struct open_capture){s, pthread_self(), pt, counts, true};
        if (counts)
            counted++;
    }
    pthread_mutex_unlock(&lock);
}

static void ended(CUstream s, bool ptsz)
{
    bool pt = is_per_thread(s, ptsz);
    pthread_mutex_lock(&lock);
    struct open_capture *o = find(s, pt);
    if (o) {
        if (o->counted)
            counted--;
        o->live = false;
    }
    overflow = 0; /* conservative until any capture ends, then trusted again */
    pthread_mutex_unlock(&lock);
}

bool ms__shim_capture_open(void)
{
    pthread_mutex_lock(&lock);
    for (int i = 0; counted && i < MAX_OPEN; i++) {
        struct open_capture *o = &open_tab[i];
        if (!o->live || !o->counted || o->per_thread)
            continue;
        CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_ACTIVE;
        if (MS_REAL(cuStreamIsCapturing)(o->stream, &st) == CUDA_SUCCESS &&
            st != CU_STREAM_CAPTURE_STATUS_ACTIVE) {
            o->live = false;
            counted--;
        }
    }
    bool open = counted > 0 || overflow > 0;
    pthread_mutex_unlock(&lock);
    return open;
}

static bool mode_counts(CUstreamCaptureMode mode)
{
    return mode != CU_STREAM_CAPTURE_MODE_RELAXED;
}

CUresult CUDAAPI cuStreamBeginCapture(CUstream hStream)
{
    begin_enter();
    CUresult rc = MS_REAL(cuStreamBeginCapture)(hStream);
    began(rc, hStream, false, true);
    return rc;
}

CUresult CUDAAPI cuStreamBeginCapture_ptsz(CUstream hStream)
{
    begin_enter();
    CUresult rc = MS_REAL(cuStreamBeginCapture_ptsz)(hStream);
    began(rc, hStream, true, true);
    return rc;
}

CUresult CUDAAPI cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
    begin_enter();
    CUresult rc = MS_REAL(cuStreamBeginCapture_v2)(hStream, mode);
    began(rc, hStream, false, mode_counts(mode));
    return rc;
}

CUresult CUDAAPI cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode)
{
    begin_enter();
    CUresult rc = MS_REAL(cuStreamBeginCapture_v2_ptsz)(hStream, mode);
    began(rc, hStream, true, mode_counts(mode));
    return rc;
}

CUresult CUDAAPI cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph,
                                             const CUgraphNode *dependencies,
                                             const CUgraphEdgeData *dependencyData,
                                             size_t numDependencies, CUstreamCaptureMode mode)
{
    begin_enter();
    CUresult rc = MS_REAL(cuStreamBeginCaptureToGraph)(hStream, hGraph, dependencies,
                                                       dependencyData, numDependencies, mode);
    began(rc, hStream, false, mode_counts(mode));
    return rc;
}

CUresult CUDAAPI cuStreamBeginCaptureToGraph_ptsz(CUstream hStream, CUgraph hGraph,
                                                  const CUgraphNode *dependencies,
                                                  const CUgraphEdgeData *dependencyData,
                                                  size_t numDependencies, CUstreamCaptureMode mode)
{
    begin_enter();
    CUresult rc = MS_REAL(cuStreamBeginCaptureToGraph_ptsz)(hStream, hGraph, dependencies,
                                                            dependencyData, numDependencies, mode);
    began(rc, hStream, true, mode_counts(mode));
    return rc;
}

CUresult CUDAAPI cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
    CUresult rc = MS_REAL(cuStreamEndCapture)(hStream, phGraph);
    ended(hStream, false);
    return rc;
}

CUresult CUDAAPI cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph)
{
    CUresult rc = MS_REAL(cuStreamEndCapture_ptsz)(hStream, phGraph);
    ended(hStream, true);
    return rc;
}
