/*
 * status_json.h - the daemon's STATUS reply as JSON, for `msched status --json` and `msched top
 * --json` (schema: docs/status.schema.json).
 *
 * Design
 *   One object on one line per sample, so a stream of frames is newline-delimited JSON that
 *   line-oriented tools (jq, a log shipper) read one frame at a time. The format is versioned
 *   by MS_STATUS_JSON_VERSION; status_json.c says what a version may change.
 *
 * Ownership: borrows everything; no state.
 */
#ifndef MS_CLI_STATUS_JSON_H
#define MS_CLI_STATUS_JSON_H

#include "core/proto.h"

#include <stdio.h>

#define MS_STATUS_JSON_VERSION 1

/* What a frame of `top` adds to a status object. */
struct ms_json_frame {
    uint64_t frame;                   /* 1, 2, ... */
    const struct ms_msg_status *prev; /* the previous sample, or NULL (no rates) */
    double interval_s;                /* seconds between prev and this sample */
};

/* Write st as one JSON object and a newline; fr (may be NULL) makes it a frame of `top`.
 * Returns 0 or MS_E_IO. */
int ms_status_json(const struct ms_msg_status *st, const struct ms_json_frame *fr, FILE *f);

/* Write s as a JSON string: quoted, escaped, invalid UTF-8 replaced by U+FFFD. */
void ms_json_string(FILE *f, const char *s);

#endif /* MS_CLI_STATUS_JSON_H */
