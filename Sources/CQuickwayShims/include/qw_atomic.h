#ifndef QUICKWAY_QW_ATOMIC_H
#define QUICKWAY_QW_ATOMIC_H
// Single-writer counters: the owning worker thread adds with a relaxed load+store
// (no locked instruction on the request path); other threads read them with a
// relaxed atomic load. Values may be a moment stale, never torn.
#include <stdint.h>

static inline void qw_counter_add(int64_t *p, int64_t v) {
    __atomic_store_n(p, __atomic_load_n(p, __ATOMIC_RELAXED) + v, __ATOMIC_RELAXED);
}
static inline void qw_counter_max(int64_t *p, int64_t v) {
    if (v > __atomic_load_n(p, __ATOMIC_RELAXED)) __atomic_store_n(p, v, __ATOMIC_RELAXED);
}
static inline int64_t qw_counter_load(const int64_t *p) {
    return __atomic_load_n(p, __ATOMIC_RELAXED);
}
// A counter shared by several writers (a true atomic read-modify-write).
static inline int64_t qw_shared_add(int64_t *p, int64_t v) { return __atomic_add_fetch(p, v, __ATOMIC_RELAXED); }
static inline void qw_flag_store(int32_t *p, int32_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
static inline int32_t qw_flag_load(const int32_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
#endif
