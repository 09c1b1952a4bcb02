#ifndef QUICKWAY_QW_EVENT_MEMORY_H
#define QUICKWAY_QW_EVENT_MEMORY_H
// libevent's allocations in a region of their own (event_set_mem_functions), apart from
// the heap that requests use. libevent keeps small blocks for as long as the process runs
// (an entry per descriptor number it has seen, in its descriptor map) and makes an event
// per connection; made during a burst, they land among the burst's own blocks and, once
// the burst is freed, pin the pages around them: after 12,000 connections, malloc_trim
// could give back only half of what they took (BENCHMARKS.md, "Memory given back").
//
// Blocks up to QW_EVENT_MEMORY_MAX_SMALL bytes come from size classes of 16 bytes carved
// from one reserved mapping (touched only as used) and go back to per-class free lists, so
// libevent's blocks stay packed together; larger ones (its arrays) and any block once the
// mapping is full come from malloc. One lock: libevent allocates on connection set-up and
// close, not per request. Must be installed before any other libevent call (libevent's
// rule): `quickway`'s main does it first; tests and fuzz harnesses use malloc.
#include <stddef.h>

#define QW_EVENT_MEMORY_MAX_SMALL 1024

// Installs the allocator; 0 on success, -1 if the region could not be reserved (libevent
// then keeps malloc). Call once, before any libevent function.
int qw_event_memory_install(void);

// Bytes of the region handed out so far (its high-water mark: pages touched).
size_t qw_event_memory_region_used(void);
#endif
