#ifndef QUICKWAY_QW_INFLATE_H
#define QUICKWAY_QW_INFLATE_H
#include <stddef.h>
#include <stdint.h>

// A raw-DEFLATE inflater (zlib, RFC 7692 permessage-deflate) that only counts what a
// message inflates to: the output is written to a scratch buffer and dropped. Used to
// hold a WebSocket message limit on its decompressed size without changing the bytes
// relayed. Not thread-safe; one per relayed direction.
typedef struct qw_inflater qw_inflater;

qw_inflater *qw_inflater_new(void);
void qw_inflater_free(qw_inflater *);
// Starts a new message with no window from earlier ones (no context takeover).
void qw_inflater_reset(qw_inflater *);
// Feeds compressed bytes; adds what they inflate to *produced, stopping as soon as
// *produced passes `limit`. Returns 0, or -1 for data that is not valid DEFLATE.
int qw_inflater_feed(qw_inflater *, const uint8_t *in, size_t len, uint64_t *produced, uint64_t limit);
#endif
