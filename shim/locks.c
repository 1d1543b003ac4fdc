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
static _Thread_local const struct ms_lock *held[HELD_MAX];
static _Thread_local int nheld;

bool ms_lock_any_held(void)
{
    return nheld > 0;
}

/* Record l as held by this thread; with MS_LOCK_CHECK, first check the order. */
static void check_take(const struct ms_lock *l)
{
#ifdef MS_LOCK_CHECK
    for (int i = 0; i < nheld && i < HELD_MAX; i++) {
        if (held[i]->level >= l->level) {
            ms__shim_say("lock order violated: taking %s (level %d) while holding %s (level %d) "
                         "(shim/locks.h)",
                         l->name, l->level, held[i]->name, held[i]->level);
            abort();
        }
    }
#endif
    if (nheld < HELD_MAX)
        held[nheld] = l;
    nheld++;
}

static void drop(const struct ms_lock *l)
{
    for (int i = (nheld < HELD_MAX ? nheld : HELD_MAX) - 1; i >= 0; i--) {
        if (held[i] == l) {
            for (int k = i; k + 1 < nheld && k + 1 < HELD_MAX; k++)
                held[k] = held[k + 1];
            nheld--;
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
