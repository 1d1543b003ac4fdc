/*
 * locks.c - the shim's mutexes with their order checked (contract and table: locks.h).
 *
 * Every build keeps, per thread, the locks it holds in acquisition order (a short array: the
 * table has eleven levels, and no lock is taken twice), so exit paths can tell whether their
 * thread holds one. With MS_LOCK_CHECK, taking a lock whose level is not above every held one
 * is a violation.
 */
#include "shim/locks.h"

#include <stdlib.h>

struct ms_lock ms__events_lock = MS_LOCK_INIT(MS_LK_EVENTS, "events");

#define HELD_MAX 16
/* One thread-local block: one TLS address computation per call, not one per variable. */
static _Thread_local struct {
    int n;
    const struct ms_lock *held[HELD_MAX];
} tl;

bool ms_lock_any_held(void)
{
    return tl.n > 0;
}

/* Record l as held by this thread; with MS_LOCK_CHECK, first check the order. Levels of the
 * held locks strictly increase along the list (each was checked against all held before it;
 * dropping one keeps the rest in order), so the last recorded has the highest level and is
 * the only one to compare with. */
static void check_take(const struct ms_lock *l)
{
    int n = tl.n;
#ifdef MS_LOCK_CHECK
    if (n > 0) {
        const struct ms_lock *top = tl.held[(n < HELD_MAX ? n : HELD_MAX) - 1];
        if (top->level >= l->level) {
            ms__shim_say("lock order violated: taking %s (level %d) while holding %s (level %d) "
                         "(shim/locks.h)",
                         l->name, l->level, top->name, top->level);
            abort();
        }
    }
#endif
    if (n < HELD_MAX)
        tl.held[n] = l;
    tl.n = n + 1;
}

static void drop(const struct ms_lock *l)
{
    int n = tl.n, m = n < HELD_MAX ? n : HELD_MAX;
    if (m > 0 && tl.held[m - 1] == l && m == n) { /* the usual case: the last one taken */
        tl.n = n - 1;
        return;
    }
    for (int i = m - 1; i >= 0; i--) {
        if (tl.held[i] == l) {
            for (int k = i; k + 1 < n && k + 1 < HELD_MAX; k++)
                tl.held[k] = tl.held[k + 1];
            tl.n = n - 1;
            return;
        }
    }
}

void ms_lock(struct ms_lock *l)
{
    check_take(l);
    pthread_mutex_lock(&l->mu);
}

void ms_unlock(struct ms_lock *l)
{
    drop(l);
    pthread_mutex_unlock(&l->mu);
}

void ms_lock_wait(pthread_cond_t *c, struct ms_lock *l)
{
    pthread_cond_wait(c, &l->mu);
}

int ms_lock_timedwait(pthread_cond_t *c, struct ms_lock *l, const struct timespec *at)
{
    return pthread_cond_timedwait(c, &l->mu, at);
}

void ms_lock_reset(struct ms_lock *l)
{
    drop(l);
    pthread_mutex_init(&l->mu, NULL);
}
