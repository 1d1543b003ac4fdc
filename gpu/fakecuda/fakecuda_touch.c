/*
 * fakecuda_touch.c - what fake kernels say they touch, and who watches launches: the fake's
 * stand-in for a device-side memory-access instrumentation (contract: fakecuda.h).
 *
 * Design
 *   A fake kernel is a host function, so nothing can watch its loads and stores; instead it
 *   declares them with ms_fake_touch (a pointer, a byte count, read/write, or a bulk/TMA copy
 *   the real patch cannot see). Each declaration is appended to one log (TOUCH_EVENTS entries;
 *   older unread ones are dropped and counted), with the sequence number of the launch running
 *   in that thread (0 outside a launch). A launch observer (ms_fake_set_launch_observer; one
 *   at a time) is called in the launching thread just before the kernel function runs and just
 *   after it returned, as the real driver calls a Sanitizer subscriber's LAUNCH_BEGIN and
 *   LAUNCH_END: a stand-in for libsanitizer drains the log at the end and turns it into what
 *   its device patch would have marked.
 *
 * Invariants
 *   - The observer is called without ms__fk_lock held (it may call back into the driver).
 *   - Entries come out of ms_fake_touch_drain in the order they were logged.
 */
#include "gpu/fakecuda/fakecuda_int.h"

#define TOUCH_EVENTS 65536u

static struct ms_fake_touch ring[TOUCH_EVENTS];
static uint64_t ring_w, ring_r, ring_dropped; /* under ms__fk_lock */
static uint64_t next_launch = 1;              /* under ms__fk_lock */
static _Thread_local uint64_t cur_launch;
static ms_fake_launch_observer_fn observer; /* under ms__fk_lock */
static void *observer_user;

MS_FK_EXPORT void ms_fake_touch(const void *p, size_t bytes, int mode)
{
    pthread_mutex_lock(&ms__fk_lock);
    if (ring_w - ring_r == TOUCH_EVENTS) {
        ring_r++;
        ring_dropped++;
    }
    ring[ring_w++ % TOUCH_EVENTS] = (struct ms_fake_touch){
        .launch = cur_launch, .addr = (uint64_t)(uintptr_t)p, .bytes = bytes, .mode = mode};
    pthread_mutex_unlock(&ms__fk_lock);
}

MS_FK_EXPORT size_t ms_fake_touch_drain(struct ms_fake_touch *out, size_t max)
{
    pthread_mutex_lock(&ms__fk_lock);
    size_t n = 0;
    while (n < max && ring_r < ring_w)
        out[n++] = ring[ring_r++ % TOUCH_EVENTS];
    pthread_mutex_unlock(&ms__fk_lock);
    return n;
}

MS_FK_EXPORT uint64_t ms_fake_touch_dropped(void)
{
    pthread_mutex_lock(&ms__fk_lock);
    uint64_t d = ring_dropped;
    pthread_mutex_unlock(&ms__fk_lock);
    return d;
}

MS_FK_EXPORT void ms_fake_set_launch_observer(ms_fake_launch_observer_fn fn, void *user)
{
    pthread_mutex_lock(&ms__fk_lock);
    observer = fn;
    observer_user = user;
    pthread_mutex_unlock(&ms__fk_lock);
}

uint64_t ms__fk_observe(int phase, const struct ms_fake_launch *l, CUfunction f, uint64_t seq)
{
    pthread_mutex_lock(&ms__fk_lock);
    ms_fake_launch_observer_fn fn = observer;
    void *user = observer_user;
    if (phase == MS_FAKE_LAUNCH_BEGIN)
        seq = next_launch++;
    pthread_mutex_unlock(&ms__fk_lock);
    cur_launch = phase == MS_FAKE_LAUNCH_BEGIN ? seq : 0;
    if (fn)
        fn(user, phase, seq, f, l);
    return seq;
}
