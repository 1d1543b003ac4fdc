/*
 * tmap.c - the reach of a TMA tensor map (contract: tmap.h).
 */
#include "cuabi/tmap.h"

uint64_t ms_tmap_elem_bytes(int t)
{
    switch (t) {
    case CU_TENSOR_MAP_DATA_TYPE_UINT8: return 1;
    case CU_TENSOR_MAP_DATA_TYPE_UINT16:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT16:
    case CU_TENSOR_MAP_DATA_TYPE_BFLOAT16: return 2;
    case CU_TENSOR_MAP_DATA_TYPE_UINT32:
    case CU_TENSOR_MAP_DATA_TYPE_INT32:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT32:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT32_FTZ:
    case CU_TENSOR_MAP_DATA_TYPE_TFLOAT32:
    case CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ: return 4;
    case CU_TENSOR_MAP_DATA_TYPE_UINT64:
    case CU_TENSOR_MAP_DATA_TYPE_INT64:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT64: return 8;
    default: return t >= 13 && t <= 15 ? 1 : 0; /* the packed 4- and 6-bit types */
    }
}

uint64_t ms_tmap_extent(int t, unsigned rank, const cuuint64_t *dim, const cuuint64_t *strides)
{
    uint64_t es = ms_tmap_elem_bytes(t);
    if (!es || rank == 0 || rank > 5 || !dim || (rank > 1 && !strides))
        return 0;
    if (dim[0] == 0 || dim[0] > UINT64_MAX / es)
        return 0;
    uint64_t x = dim[0] * es;
    for (unsigned d = 1; d < rank; d++) {
        if (dim[d] == 0)
            return 0;
        uint64_t span = dim[d] - 1;
        if (span && strides[d - 1] > (UINT64_MAX - x) / span)
            return 0;
        x += span * strides[d - 1];
    }
    return x;
}
