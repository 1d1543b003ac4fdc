/*
 * api_link.c - fill struct ms_api with the addresses of the linked driver functions.
 *
 * Compiled twice (shim/shim.mk): once plain, as ms_api_link_legacy, and once with
 * CUDA_API_PER_THREAD_DEFAULT_STREAM, as ms_api_link_pt, so that cuda.h's macros resolve each
 * name to the export an application built that way would call (cuMemcpyHtoD_v2_ptds,
 * cuLaunchKernel_ptsz, ...). Only built into programs linked with -lcuda.
 */
#include "tests/shim/api.h"

#ifndef MS_API_LINK_FN
#error "define MS_API_LINK_FN"
#endif

int MS_API_LINK_FN(struct ms_api *a)
{
#define MS_API_LINK(field, base, version, legacy, pt) a->field = base;
    MS_API_FUNCS(MS_API_LINK)
#undef MS_API_LINK
    return 0;
}
