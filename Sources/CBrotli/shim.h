#ifndef QUICKWAY_CBROTLI_SHIM_H
#define QUICKWAY_CBROTLI_SHIM_H
// The encoder answers with `br`; the decoder reads request bodies (`decompress_requests`)
// and checks the encoder in the unit tests.
#include <brotli/encode.h>
#include <brotli/decode.h>
#endif
