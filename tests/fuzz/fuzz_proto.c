/*
 * fuzz_proto.c - libFuzzer target for the protocol decoder and encoder (core/proto.c).
 *
 * The input is a byte stream as a peer would send it. Frames are decoded one after another
 * until the decoder asks for more bytes or refuses; every decoded message must validate, must
 * re-encode to exactly the bytes it came from (the encoding is canonical), and the re-encoded
 * frame must decode again. Refusals must use the documented codes and leave nothing to free.
 * The stream is then fed again in pieces whose sizes come from the input, the way a nonblocking
 * reader sees it, and must give the same sequence of frames. After the input ms_alloc_live() must
 * be back at its starting value.
 *
 * A second pass replays the input with an allocation failure injected at a position chosen from
 * the input's length, to reach the out-of-memory paths; only crashes and leaks matter there.
 *
 * Any broken property calls abort(), which both libFuzzer and the replay runner report.
 */
#include "core/proto.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_FRAMES 64

static void check_frame(const uint8_t *frame, size_t len, const struct ms_msg *m)
{
    if (ms_msg_validate(m, NULL, 0) != MS_OK)
        abort();
    struct ms_buf b;
    ms_buf_init(&b);
    int rc = ms_msg_encode(m, &b);
    if (rc == MS_E_NOMEM) {
        ms_buf_fini(&b);
        return;
    }
    if (rc != MS_OK || b.len != len || memcmp(b.data, frame, len) != 0)
        abort();
    struct ms_msg again;
    size_t used;
    rc = ms_msg_decode(b.data, b.len, &again, &used);
    if (rc == 1) {
        if (used != len || again.type != m->type || again.seq != m->seq)
            abort();
        ms_msg_free(&again);
    } else if (rc != MS_E_NOMEM) {
        abort();
    }
    ms_buf_fini(&b);
}

/* Decode whole-buffer; record the frame sizes. Returns the number of frames. */
static size_t run_whole(const uint8_t *data, size_t size, size_t *sizes, int checks)
{
    size_t off = 0, n = 0;
    while (off < size && n < MAX_FRAMES) {
        struct ms_msg m;
        size_t used = 99;
        int rc = ms_msg_decode(data + off, size - off, &m, &used);
        if (rc != 1) {
            if (used != 0 || m.type != 0)
                abort();
            if (rc != 0 && rc != MS_E_PARSE && rc != MS_E_VERSION && rc != MS_E_NOMEM)
                abort();
            break;
        }
        if (used < MS_PROTO_HDR_BYTES || used > size - off)
            abort();
        if (checks)
            check_frame(data + off, used, &m);
        ms_msg_free(&m);
        sizes[n++] = used;
        off += used;
    }
    return n;
}

/* Feed the bytes in pieces into a growing buffer, as a socket reader would. */
static void run_pieces(const uint8_t *data, size_t size, const size_t *sizes, size_t nframes)
{
    struct ms_buf in;
    ms_buf_init(&in);
    size_t off = 0, n = 0, step = 1 + (size ? data[0] % 13 : 0);
    int stop = 0;
    while (off < size && !stop) {
        size_t k = MS_MIN(step, size - off);
        if (ms_buf_append(&in, data + off, k) != MS_OK)
            abort(); /* no injected failures in this pass */
        off += k;
        step = step * 3 % 17 + 1;
        for (;;) {
            struct ms_msg m;
            size_t used;
            int rc = ms_msg_decode(in.data, in.len, &m, &used);
            if (rc == 0)
                break;
            if (rc < 0) {
                stop = 1;
                break;
            }
            if (n >= nframes) {
                ms_msg_free(&m);
                stop = 1; /* the whole-buffer pass stopped at MAX_FRAMES */
                break;
            }
            if (used != sizes[n])
                abort();
            n++;
            ms_msg_free(&m);
            ms_buf_consume(&in, used);
        }
    }
    if (n != nframes)
        abort();
    ms_buf_fini(&in);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint64_t base = ms_alloc_live();
    size_t sizes[MAX_FRAMES];
    size_t n = run_whole(data, size, sizes, 1);
    run_pieces(data, size, sizes, n);
    if (ms_alloc_live() != base)
        abort();

    ms_alloc_fail_after(1 + size % 5);
    run_whole(data, size, sizes, 0);
    ms_alloc_fail_after(0);
    if (ms_alloc_live() != base)
        abort();
    return 0;
}
