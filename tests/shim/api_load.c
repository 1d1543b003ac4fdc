/*
 * api_load.c - fill struct ms_api by name: dlsym of exported names, or cuGetProcAddress_v2 of
 * base names (see api.h).
 */
#include "tests/shim/api.h"

#include <dlfcn.h>
#include <stdio.h>

int ms_api_dlsym(struct ms_api *a, void *handle, bool per_thread)
{
    int missing = 0;
#define MS_API_DLSYM(field, base, version, legacy, pt)                                             \
    do {                                                                                           \
        const char *name = per_thread ? #pt : #legacy;                                             \
        *(void **)&a->field = dlsym(handle, name);                                                 \
        if (!a->field) {                                                                           \
            fprintf(stderr, "dlsym(%s) failed: %s\n", name, dlerror());                            \
            missing++;                                                                             \
        }                                                                                          \
    } while (0);
    MS_API_FUNCS(MS_API_DLSYM)
#undef MS_API_DLSYM
    return missing;
}

int ms_api_procaddr(struct ms_api *a, PFN_cuGetProcAddress_v12000 gpa, bool per_thread)
{
    int missing = 0;
    cuuint64_t flags = per_thread ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
                                  : CU_GET_PROC_ADDRESS_LEGACY_STREAM;
#define MS_API_GPA(field, base, version, legacy, pt)                                               \
    do {                                                                                           \
        void *fn = NULL;                                                                           \
        CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;                  \
        CUresult rc = gpa(#base, &fn, version, flags, &st);                                        \
        if (rc != CUDA_SUCCESS || !fn || st != CU_GET_PROC_ADDRESS_SUCCESS) {                      \
            fprintf(stderr, "cuGetProcAddress_v2(%s) failed: %d, status %d\n", #base, (int)rc,     \
                    (int)st);                                                                      \
            missing++;                                                                             \
        }                                                                                          \
        *(void **)&a->field = fn;                                                                  \
    } while (0);
    MS_API_FUNCS(MS_API_GPA)
#undef MS_API_GPA
    return missing;
}
