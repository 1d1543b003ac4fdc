/*
 * svg.h - plots of a sweep as a standalone SVG file (no scripts, no external fonts).
 *
 * Design
 *   Grouped bars: one group per pressure point, one bar per policy that ran, height = normalized
 *   throughput (0-100 %), value printed above each bar. With `bytes` a second panel shows the
 *   bytes moved (in + out) per policy and point on its own scale. The SVG is written by hand:
 *   plain rectangles, lines and text, so any browser or image viewer shows it.
 *
 * Ownership: borrows the sweep. Errors: MS_E_IO when the stream reports an error.
 */
#ifndef MS_SIM_SVG_H
#define MS_SIM_SVG_H

#include "sim/sweep.h"

#include <stdbool.h>
#include <stdio.h>

int ms_svg_write(const struct ms_sweep *s, bool bytes, FILE *f);

#endif /* MS_SIM_SVG_H */
