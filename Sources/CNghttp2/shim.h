#ifndef QUICKWAY_CNGHTTP2_SHIM_H
#define QUICKWAY_CNGHTTP2_SHIM_H
// nghttp2 (Debian's libnghttp2-dev): the HTTP/2 framing, HPACK and flow-control state
// machine under the HTTP/2 codec (HTTP2/HTTP2Connection.swift).
#include <nghttp2/nghttp2.h>
#endif
