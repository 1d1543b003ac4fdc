/*
 * locks.h - every mutex of libmsched, what it protects, and the order they may be taken in.
 *
 * The table (a thread holding a lock may take only locks further down; never one above it,
 * never the same one twice):
 *
 *   level  lock                     file         protects
 *   1      pieces                   graph_       the graphs launched in pieces, their clones
 *                                   pieces.c     and pieces (held to build them, not across a
 *                                                launch's gates)
 *   2      vmm                      hook_vmm.c   the virtual handles and the adopted mappings
 *   3      engine                   engine*.c    the region table, the history, the pointer
 *                                   client*.c    tables, graph reach, statistics; and the daemon
 *                                                client's state (client.h): the gate's waits and
 *                                                the service thread's orders are condition waits
 *                                                on it, and it is held across a migration
 *   4      acc                      accuracy.c   one measurement at a time
 *   5      acc_rec                  accuracy.c   CUPTI's records, buffers and counts
 *   6      prof                     profile.c    one profiled launch at a time, the profile file,
 *                                                its region table and sampling counts
 *   7      prof_rec                 profile_san.c the touch source's module table (Sanitizer
 *                                                callbacks, which may come inside a launch)
 *   8      host_gate                hostmem.c    the migration gate (pins vs. migrations)
 *   9      host                     hostmem.c    the host stores and their statistics
 *   10     events                   events.c,    counters, the allocation list, streams, the
 *                                   trace.c,     trace recorder, the kernel-facts cache
 *                                   funcinfo.c
 *   11     tmap                     tensormap.c  the tensor maps the program encoded
 *
 *   No lock is held across a call into the driver that may take long (pinning, unpinning,
 *   synchronizing with the GPU) except the engine's across a migration, by design: the
 *   service thread and every launch wait for a migration anyway.
 *
 * Checking: in builds with MS_LOCK_CHECK (the default `make`; `make LOCKCHECK=0` leaves it
 * out), every ms_lock records the lock in a per-thread list and an out-of-order or recursive
 * acquisition prints both locks and aborts: a bug that would otherwise be a rare deadlock.
 * Condition waits keep the lock recorded (the thread holds it again when the wait returns).
 *
 * Fork: the child starts with one thread; ms_lock_reset re-initialises a lock that the
 * fork's prepare handler held and drops it from the thread's list.
 */
#ifndef MS_SHIM_LOCKS_H
#define MS_SHIM_LOCKS_H

#include "shim/log.h"

#include <pthread.h>
#include <time.h>

enum ms_lock_level {
    MS_LK_PIECES = 1,
    MS_LK_VMM,
    MS_LK_ENGINE,
    MS_LK_ACC,
    MS_LK_ACC_REC,
    MS_LK_PROF,
    MS_LK_PROF_REC,
    MS_LK_HOST_GATE,
    MS_LK_HOST,
    MS_LK_EVENTS,
    MS_LK_TMAP,
};

struct ms_lock {
    pthread_mutex_t mu;
    int level;        /* enum ms_lock_level */
    const char *name; /* as in the table above */
};

#define MS_LOCK_INIT(lvl, nm)                                                                      \
    {                                                                                              \
        PTHREAD_MUTEX_INITIALIZER, (lvl), (nm)                                                     \
    }

MS_HIDDEN void ms_lock(struct ms_lock *l);
MS_HIDDEN void ms_unlock(struct ms_lock *l);
/* pthread_cond_wait / _timedwait on l (held); the lock stays recorded as held. */
MS_HIDDEN void ms_lock_wait(pthread_cond_t *c, struct ms_lock *l);
MS_HIDDEN int ms_lock_timedwait(pthread_cond_t *c, struct ms_lock *l, const struct timespec *at);
/* In a forked child: l is re-initialised (unlocked) and no longer recorded as held. */
MS_HIDDEN void ms_lock_reset(struct ms_lock *l);

/* This thread holds some shim lock now (tracked in every build). Exit paths use it:
 * exit() called from a signal handler that interrupted the shim must not wait for a lock its
 * own thread holds (shim.c, engine.c). */
MS_HIDDEN bool ms_lock_any_held(void);

/* The events lock (level 9), shared by events.c, trace.c, funcinfo.c and the fork handlers. */
extern MS_HIDDEN struct ms_lock ms__events_lock;

#endif /* MS_SHIM_LOCKS_H */
