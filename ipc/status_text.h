/*
 * status_text.h - a STATUS reply rendered as the screen `msched status` prints and `msched top`
 * refreshes: a header (GPU, policy, memory, switches) and one row per task.
 *
 * Design
 *   Rendering produces plain text lines into a caller's buffer, so the same code serves a plain
 *   print and an ncurses window. With a previous sample and the seconds between the two, the
 *   header and the rows also show rates (bytes moved per second, switches per second); without
 *   one they show totals only. Task names are printed as the protocol delivered them (no
 *   control characters can be in them) and cut to the width.
 *
 * Ownership: reads its arguments, writes only buf. No state.
 */
#ifndef MS_STATUS_TEXT_H
#define MS_STATUS_TEXT_H

#include "core/proto.h"

#include <stddef.h>

/*
 * Render st (prev may be NULL; dt_s > 0 with prev) as lines of at most width columns (0 = no
 * limit) into buf, NUL-terminated, each line ending in '\n'. Returns the number of lines; text
 * that does not fit buf is cut at a line boundary.
 */
int ms_status_render(const struct ms_msg_status *st, const struct ms_msg_status *prev, double dt_s,
                     int width, char *buf, size_t len);

#endif /* MS_STATUS_TEXT_H */
