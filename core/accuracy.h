/*
 * accuracy.h - how well a launch's prediction covered the memory it touched.
 *
 * Design
 *   Pure accounting: the caller (the shim's accuracy probe) gathers the byte ranges it predicted
 *   for a launch and the byte ranges the launch was seen to touch, and this file reduces them to
 *   a tally: the size of each union, the touched bytes inside and outside the predicted union,
 *   and the lowest touched address the prediction missed. No CUDA, threads, getenv or I/O.
 *
 *   A range is the half-open byte interval [addr, addr + bytes). A range whose end would pass
 *   2^64 is clamped to end at UINT64_MAX (so the byte at address UINT64_MAX is never counted); a
 *   range that is empty after clamping (bytes == 0, or addr == UINT64_MAX) is dropped.
 *
 *   Both lists are first normalized in place (qsort by address, then one pass merging
 *   overlapping or adjacent ranges); the intersection is then one linear merge of the two
 *   normalized lists: O((npred + ntouched) log(npred + ntouched)) overall, no allocation.
 *
 * Invariants
 *   - After ms_range_normalize, r[0..n) has no empty range and r[i].addr + r[i].bytes <
 *     r[i + 1].addr: strictly ascending, pairwise disjoint and non-adjacent; no end overflows.
 *   - In a tally: hit_bytes <= pred_bytes, hit_bytes + miss_bytes == touched_bytes,
 *     covered == (miss_bytes == 0), and miss_first == 0 whenever covered (a miss at address 0
 *     also reads 0: use covered to tell them apart).
 *
 * Ownership: the caller owns the range arrays; they are reordered and compacted in place.
 * No locking. Errors: none (nothing here allocates or fails); NULL arrays are fine with n == 0.
 */
#ifndef MS_ACCURACY_H
#define MS_ACCURACY_H

#include "predict.h"

#include <stdbool.h>

struct ms_acc_tally {
    uint64_t pred_bytes;    /* union of the predicted ranges */
    uint64_t touched_bytes; /* union of the touched ranges */
    uint64_t hit_bytes;     /* touched bytes inside the predicted union */
    uint64_t miss_bytes;    /* touched bytes outside it (touched_bytes - hit_bytes) */
    uint64_t miss_first;    /* lowest touched address outside the prediction (0 if none) */
    bool covered;           /* miss_bytes == 0 */
};

/*
 * Sort by address and merge overlapping or adjacent ranges in place, dropping zero-length ones
 * and clamping ranges whose end would overflow 2^64 to end at UINT64_MAX; returns the new count.
 * r[0..return) then holds the normalized list. Entries r[return..n) are left holding (clamped)
 * ranges of the input, each inside the union, so normalizing r[0..n) again gives the same list.
 */
size_t ms_range_normalize(struct ms_range *r, size_t n);

/*
 * Both arrays are normalized in place first (the caller's arrays are reordered). Never fails.
 * Normalizing never changes an array's union (see ms_range_normalize), so one predicted array
 * can be tallied against several touched arrays with the same npred each time.
 */
void ms_acc_tally(struct ms_range *pred, size_t npred, struct ms_range *touched, size_t ntouched,
                  struct ms_acc_tally *out);

#endif /* MS_ACCURACY_H */
