/*
 * history.h - what a task used, in order, and the future that predicts: "a program repeats
 * itself" (decode steps, training iterations).
 *
 * Design
 *   A ring of the chunk ids recent commands used, appended as each command is admitted (an id
 *   that appeared among the last 8 appended is skipped: a kernel sequence that keeps touching
 *   its activations does not flood the ring). The prediction is one rule, used two ways:
 *
 *     Locate. Where is the program now? At the most recent earlier use of a chunk the current
 *     command needs and that is not resident-and-settled (a chunk resident now, such as the
 *     activations every command uses, says nothing about where the program is). With
 *     `any_needed`, a needed chunk of any state answers when no missing one does. The future
 *     is then what followed that use, continuing from the oldest retained entry at the ring's
 *     newest end (a loop reuses first what it used first). Not found: the future is the
 *     history from its oldest end, and nothing is prefetched.
 *
 *     ms_history_plan_sets (the engine running alone): ws[0] = the needed chunks plus the next
 *     non-resident chunks of the future up to `prefetch` bytes (populated in that order), then
 *     the rest of the future in groups of `group` ids, ws[1..], for OPT's next-use distances.
 *     OPT reads those only for resident chunks, first use first: the future stops once every
 *     resident chunk was seen (or is needed) and the prefetch is taken, which gives the plan
 *     the whole future would (tests/unit/test_history.c checks it against the full walk).
 *
 *     ms_history_predict (the daemon client): out_next = the needed chunks (all of them), then
 *     the future's distinct chunks up to next_cap bytes; out_recent = the distinct chunks used
 *     most recently, up to recent_cap bytes, oldest first. With nothing needed, out_next is
 *     the most recent chunks (the program will go on with what it just did).
 *
 *   Ids of chunks freed since (ms_chunk_get is NULL) are skipped wherever they come up.
 *
 * Invariants: ring holds the last min(seq, cap) ids appended; ring[s % cap] is the id with
 * sequence number s for every retained s (seq - min(seq, cap) <= s < seq).
 *
 * Ownership: the history owns its ring (ms_history_fini frees it); the chunk sets are the
 * caller's. ms_history_predict and ms_history_plan_sets use the chunks' marks (region.h:
 * scratch; plan_sets stamps them with a value above 2^63 from the table's clock).
 * No locking: the caller serializes. Errors: MS_E_NOMEM from growing a set; nothing else.
 */
#ifndef MS_HISTORY_H
#define MS_HISTORY_H

#include "predict.h"
#include "region.h"

#include <stdbool.h>
#include <stdint.h>

#define MS_HISTORY_RECENT_SKIP 8 /* an id among the last this many appended is not appended */

struct ms_history {
    ms_chunk_id *ring;
    uint32_t cap;
    uint64_t seq; /* ids ever appended */
};

/* cap ids remembered (at least 1). MS_E_NOMEM, MS_E_INVAL. */
int ms_history_init(struct ms_history *h, uint32_t cap);
void ms_history_fini(struct ms_history *h);
/* Forget everything (the ring is kept). */
void ms_history_clear(struct ms_history *h);

/* Append the ids of s in order (see Design for what is skipped). */
void ms_history_append(struct ms_history *h, const struct ms_chunk_set *s);

/* How many ids are retained. */
uint64_t ms_history_len(const struct ms_history *h);

/*
 * Locate (see Design): *start is the sequence number the future begins at. Returns true when a
 * use was found; false leaves *start at the oldest retained entry.
 */
bool ms_history_locate(const struct ms_history *h, struct ms_rtable *rt,
                       const struct ms_chunk_set *need, bool any_needed, uint64_t *start);

/* The k-th id of the future that begins at start (0 <= k < ms_history_len), wrapping from
 * the newest retained entry to the oldest. */
ms_chunk_id ms_history_future(const struct ms_history *h, uint64_t start, uint64_t k);

/*
 * The engine's working sets for OPT (see Design). *ws is a growable array of *capws sets
 * (ms_chunk_sets_reserve); on success *nws sets are filled. need: normalized.
 */
int ms_history_plan_sets(const struct ms_history *h, struct ms_rtable *rt,
                         const struct ms_chunk_set *need, uint64_t prefetch, uint32_t group,
                         struct ms_chunk_set **ws, size_t *capws, size_t *nws);

/* The daemon's wanted sets (see Design). Uses and clears the table's marks. */
int ms_history_predict(const struct ms_history *h, struct ms_rtable *rt,
                       const struct ms_chunk_set *need, uint64_t next_cap,
                       struct ms_chunk_set *out_next, uint64_t recent_cap,
                       struct ms_chunk_set *out_recent);

#endif /* MS_HISTORY_H */
