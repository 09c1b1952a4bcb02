#include <event2/event.h>
#include <hiredis/adapters/libevent.h>
#include "qw_redis.h"

int qw_redis_attach(redisAsyncContext *ac, struct event_base *base) {
    return redisLibeventAttach(ac, base);
}
