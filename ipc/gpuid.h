/*
 * gpuid.h - which physical GPU an index names, and how much memory it has: asked of the CUDA
 * driver by the daemon and the CLI (never the shim, which asks its own driver directly).
 *
 * Design
 *   A GPU is known to msched by its UUID (cuDeviceGetUuid_v2: for a MIG instance, the
 *   instance's), which every process sees alike, unlike the index CUDA_VISIBLE_DEVICES and
 *   containers renumber. The query runs in a short-lived child process: it loads the driver
 *   ($MSCHED_REAL_LIBCUDA when set, else libcuda.so.1 from the library path), initialises it,
 *   answers through a pipe and exits, so the caller never holds driver state (the daemon needs
 *   no GPU library, and a driver that hangs costs the caller only the time limit). No context
 *   is created.
 *
 *   all_visible ignores CUDA_VISIBLE_DEVICES in the child: the daemon numbers GPUs as the
 *   machine does (every GPU visible), while `msched run` asks in its program's environment.
 *
 * Errors (why says more): MS_E_GPU (no driver, or it does not answer: no GPU to name),
 * MS_E_NOTFOUND (the driver has no such device), MS_E_INVAL (not a UUID), MS_E_IO (the child
 * failed or exceeded the time limit).
 */
#ifndef MS_IPC_GPUID_H
#define MS_IPC_GPUID_H

#include "ipc/ipc.h"

#include <stdbool.h>
#include <stdint.h>

#define MS_GPUID_TIMEOUT_MS 20000

struct ms_gpu_id {
    int ordinal;                /* in the child's numbering */
    char uuid[MS_IPC_UUID_MAX]; /* "GPU-..." */
    uint64_t total;             /* device memory in bytes */
};

/*
 * The GPU with index `ordinal` (uuid NULL) or with this UUID (any form ms_ipc_uuid_hex
 * reads; ordinal ignored) into *out.
 */
int ms_gpu_identify(int ordinal, const char *uuid, bool all_visible, struct ms_gpu_id *out,
                    char *why, size_t whylen);

/* The default budget: 90 % of total rounded down to MS_GRAN, or 16 GiB when total is 0 (no
 * driver answered) or too small to give one granule. */
uint64_t ms_gpu_default_budget(uint64_t total);

#endif /* MS_IPC_GPUID_H */
