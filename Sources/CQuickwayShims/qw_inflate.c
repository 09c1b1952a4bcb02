#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include "qw_inflate.h"

struct qw_inflater {
    z_stream z;
};

// Where inflated bytes are written and dropped: one per thread, not per connection.
static __thread uint8_t qw_inflate_scratch[16384];

qw_inflater *qw_inflater_new(void) {
    qw_inflater *q = calloc(1, sizeof(*q));
    if (!q) return NULL;
    // Negative window bits: raw DEFLATE, no zlib header (RFC 7692 7.2.2).
    if (inflateInit2(&q->z, -15) != Z_OK) { free(q); return NULL; }
    return q;
}

void qw_inflater_free(qw_inflater *q) {
    if (!q) return;
    inflateEnd(&q->z);
    free(q);
}

void qw_inflater_reset(qw_inflater *q) { inflateReset(&q->z); }

int qw_inflater_feed(qw_inflater *q, const uint8_t *in, size_t len, uint64_t *produced, uint64_t limit) {
    q->z.next_in = (Bytef *)in;
    q->z.avail_in = (uInt)len;
    while (q->z.avail_in > 0 && *produced <= limit) {
        q->z.next_out = qw_inflate_scratch;
        q->z.avail_out = sizeof(qw_inflate_scratch);
        int rc = inflate(&q->z, Z_SYNC_FLUSH);
        *produced += sizeof(qw_inflate_scratch) - q->z.avail_out;
        if (rc == Z_STREAM_END) {
            // A sender that finished its stream (BFINAL) starts a new one next message.
            inflateReset(&q->z);
            continue;
        }
        if (rc == Z_BUF_ERROR) {
            if (q->z.avail_out == 0) continue;   // output was full: go on
            break;                                // needs more input
        }
        if (rc != Z_OK) return -1;
    }
    // Output still pending inside zlib (a tiny input that inflates to a lot).
    while (*produced <= limit) {
        q->z.next_out = qw_inflate_scratch;
        q->z.avail_out = sizeof(qw_inflate_scratch);
        int rc = inflate(&q->z, Z_SYNC_FLUSH);
        size_t got = sizeof(qw_inflate_scratch) - q->z.avail_out;
        *produced += got;
        if (rc == Z_STREAM_END) { inflateReset(&q->z); break; }
        if (rc != Z_OK && rc != Z_BUF_ERROR) return -1;
        if (got == 0) break;
    }
    return 0;
}
