/*
 * lock_order.c - the shim's lock-order check (shim/locks.h) catches what it must.
 *
 * Usage: lock_order ok|reverse|twice|fork
 *   ok       vmm, engine, host, events taken in the table's order, and released: exit 0
 *   reverse  events, then engine: the check must print a line and abort
 *   twice    engine, then engine again (a recursive take): must abort
 *   cond     engine held across a timed condition wait, then host: exit 0
 * Built with MS_LOCK_CHECK against shim/locks.c and shim/log.c alone.
 */
#include "shim/locks.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

static struct ms_lock vmm = MS_LOCK_INIT(MS_LK_VMM, "vmm");
static struct ms_lock engine = MS_LOCK_INIT(MS_LK_ENGINE, "engine");
static struct ms_lock host = MS_LOCK_INIT(MS_LK_HOST, "host");

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "ok";
    if (strcmp(mode, "ok") == 0) {
        ms_lock(&vmm);
        ms_lock(&engine);
        ms_lock(&host);
        ms_lock(&ms__events_lock);
        ms_unlock(&ms__events_lock);
        ms_unlock(&host);
        ms_lock(&host); /* released ones may be taken again */
        ms_unlock(&host);
        ms_unlock(&engine);
        ms_unlock(&vmm);
        ms_lock(&ms__events_lock);
        ms_unlock(&ms__events_lock);
    } else if (strcmp(mode, "reverse") == 0) {
        ms_lock(&ms__events_lock);
        ms_lock(&engine);
    } else if (strcmp(mode, "twice") == 0) {
        ms_lock(&engine);
        ms_lock(&engine);
    } else if (strcmp(mode, "cond") == 0) {
        pthread_cond_t c = PTHREAD_COND_INITIALIZER;
        struct timespec at;
        clock_gettime(CLOCK_REALTIME, &at);
        ms_lock(&engine);
        ms_lock_timedwait(&c, &engine, &at);
        ms_lock(&host);
        ms_unlock(&host);
        ms_unlock(&engine);
    } else {
        return 2;
    }
    printf("LOCK_ORDER %s done\n", mode);
    return 0;
}
