#ifndef QUICKWAY_CZLIB_SHIM_H
#define QUICKWAY_CZLIB_SHIM_H
// zlib's init calls are macros (deflateInit2 passes the version and the struct's size),
// which Swift does not import: these inline wrappers are what Swift calls.
#include <zlib.h>

/// A gzip (RFC 1952) deflate stream: window bits 15 + 16 asks zlib for the gzip wrapper.
static inline int qw_deflate_init_gzip(z_stream *s, int level) {
    return deflateInit2(s, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
}

/// An inflate stream that reads gzip or zlib (window bits 15 + 32: header detected).
static inline int qw_inflate_init_auto(z_stream *s) {
    return inflateInit2(s, 15 + 32);
}
#endif
