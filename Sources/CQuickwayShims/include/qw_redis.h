#ifndef QUICKWAY_QW_REDIS_H
#define QUICKWAY_QW_REDIS_H
// hiredis (Debian's libhiredis-dev) for the shared Redis tier. Swift calls the
// non-variadic hiredis API directly (redisAsyncCommandArgv); this shim only adds the
// libevent adapter, which hiredis ships as static functions in a header.
#include <hiredis/hiredis.h>
#include <hiredis/async.h>

struct event_base;

// Attaches `ac` to `base` (hiredis's own adapters/libevent.h). REDIS_OK or REDIS_ERR.
int qw_redis_attach(redisAsyncContext *ac, struct event_base *base);
#endif
