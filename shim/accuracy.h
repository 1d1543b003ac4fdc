/*
 * accuracy.h - measuring the launch predictor against what kernels really touch.
 *
 * Design
 *   A measurement mode of the engine, for the evaluation only: MSCHED_ACCURACY=<file> with
 *   MSCHED_ENGINE=demand, no daemon, and a budget above the footprint (the engine then never
 *   evicts by itself). Every region is managed memory the GPU faults in. Before each measured
 *   launch every live region is prefetched back to the host (not only those the reports named:
 *   a region touched without a report would stay resident and hide every later touch), so the
 *   launch starts with none of the footprint on the device; the launch runs alone (the context
 *   is synchronized before and after), and the driver's unified-memory reports (CUPTI: GPU
 *   page faults, host-to-device migrations) timestamped inside its window are what it touched.
 *   core/accuracy.h compares them with the chunks the engine would have made resident for it
 *   (the prediction, prefetch excluded).
 *
 *   Every region a kernel touches starts on the host, so the driver must fault or migrate some
 *   of it in (or map it remotely, below): a touched region outside the prediction is seen. A
 *   launch is covered when every byte reported faulted, migrated or remotely mapped in its
 *   window lies in the prediction (strict: the driver's speculative prefetch of a neighbouring
 *   chunk of the same allocation counts as a miss). The touched bytes are bounded: faulted
 *   4 KiB pages from below (the driver migrates more than the faulting page and reports only
 *   some faults), faults plus migrated bytes from above (the driver's speculative prefetch,
 *   inside the same allocation). A report delivered after its launch's window closed is
 *   counted as late, not attributed; the bytes of other reports delivered during a measurement
 *   but stamped before or after its window are counted ("before", "after"), so an offset
 *   between CUPTI's clock and the reports' shows, and so are the device-to-host bytes the
 *   driver reported for each launch's eviction ("evicted": how much of the footprint was on
 *   the device, the ceiling of what the launch before it reached).
 *
 *   The probe bounces every page between host and GPU, which the driver's thrashing detection
 *   may answer by pinning pages and mapping them remotely, so that they neither fault nor
 *   migrate: 2 ms pass between the eviction and the launch (the detection's lapse is 500 us in
 *   NVIDIA's open kernel modules), remote mappings reported in the window count as touched, and
 *   the summary counts the driver's thrashing and throttling reports.
 *
 *   Output: one JSON object per measured launch, and a summary object at exit, to the file.
 *   MSCHED_ACCURACY_MAX (default 2000) measured launches; later ones run unmeasured.
 *   CUPTI is loaded with dlopen (MSCHED_CUPTI=<path>, else libcupti.so.13 / libcupti.so from
 *   the library path or /usr/local/cuda); without it the mode says so once and stays off.
 *   CUPTI starts at cuInit; the summary counts every record and buffer it delivered
 *   ("reports", "buffers"), so a driver that sends none shows, and the records CUPTI says it
 *   dropped ("dropped"; -1 when this CUPTI cannot tell).
 *
 * Locking: one measurement at a time. ms_acc_begin (engine lock held) takes the accuracy lock
 *   and only copies what it needs (predicted ranges, live regions); the calling thread keeps the
 *   lock through ms_acc_prepare and ms_acc_end (engine lock not held: the driver and CUPTI
 *   calls never run under it), so launches are serialized. CUPTI's buffer callbacks take only
 *   an inner record lock, never held across a driver or CUPTI call. Order: engine, then
 *   accuracy, then record.
 *
 * Tested on the fake driver with a CUPTI stand-in (tests/shim/fake_cupti.c), whose reports are
 *   the fake's page moves: tests/shim/run_shim_tests.sh checks scripted launches' lines.
 *
 * Errors: a failure to start is reported once on stderr and leaves the mode off; a driver or
 *   CUPTI error during a measurement ends the measuring (the program runs on) and is written
 *   in the summary.
 */
#ifndef MS_SHIM_ACCURACY_H
#define MS_SHIM_ACCURACY_H

#include "core/predict.h"

#include <stdbool.h>

struct ms_cuda_api; /* gpu/cuda/gpu_cuda.h */

/* At the first successful cuInit, before any context exists (enabled at the first launch, after
 * the context, the counters delivered no report on the H200): when MSCHED_ACCURACY is set, load
 * CUPTI and enable the counters. Any thread, no lock; CUPTI's own cuInit re-entering returns. */
void ms_acc_early(void);
/* At the first launch (no lock held): when MSCHED_ACCURACY is set, measure if ms_acc_early
 * started CUPTI and `ok` (the engine runs alone with demand-paged managed memory); otherwise
 * say why once and disable the counters. */
void ms_acc_start(const struct ms_cuda_api *api, bool ok);
bool ms_acc_on(void);

/* A launch the engine admitted: `need` is its predicted chunks (normalized). Engine lock held. */
void ms_acc_begin(const struct ms_rtable *rt, const struct ms_chunk_set *need, const char *name,
                  bool unbounded);
/* After the engine lock is released, before the real call: the slow part (synchronize, send
 * the dirty regions to the host, start the window). A no-op without an open measurement. */
void ms_acc_prepare(void);
/* After the real call returned (engine lock not held); a no-op when this thread has no open
 * measurement. */
void ms_acc_end(void);
/* At exit: the summary line; closes the file. */
void ms_acc_finish(void);

#endif /* MS_SHIM_ACCURACY_H */
