/*
 * tmap.h - the memory a TMA tensor map (CUtensorMap) can reach, from the arguments that encoded
 * it.
 *
 * Design
 *   The hardware bounds a tensor map's bulk copies to its tensor: from the global address,
 *   dim0 x element size bytes plus, for each further dimension d, (dim[d] - 1) x stride[d - 1].
 *   The fake driver encodes that extent into its descriptors and libmsched records it for each
 *   map the program encodes (shim/tensormap.c); both take it from here, so they cannot disagree.
 *   The packed 4- and 6-bit types count one byte an element (an upper bound).
 *
 * Pure functions; no locking, no allocation.
 */
#ifndef MS_CUABI_TMAP_H
#define MS_CUABI_TMAP_H

#include "cuabi/cuda_api.h"

#include <stdint.h>

/* Bytes an element of the data type takes (at most, for packed types); 0: unknown type. */
uint64_t ms_tmap_elem_bytes(int data_type);

/* The tensor's extent in bytes from its address; 0 when it cannot be bounded (unknown type, rank
 * outside 1..5, a zero dimension, missing arrays, overflow). */
uint64_t ms_tmap_extent(int data_type, unsigned rank, const cuuint64_t *dim,
                        const cuuint64_t *strides);

#endif /* MS_CUABI_TMAP_H */
