#include "qw_event_memory.h"

#include <event2/event.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define CLASS_BYTES 16
#define CLASSES (QW_EVENT_MEMORY_MAX_SMALL / CLASS_BYTES)
// Reserved address space, not memory: pages become resident as blocks are first carved.
#define REGION_BYTES ((size_t)1 << 30)

// Before each block: its class (0: from malloc) and the size asked for (for realloc).
// 16 bytes, so blocks keep malloc's 16-byte alignment.
typedef struct {
    uint64_t cls;
    uint64_t size;
} block_header;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char *region_top, *region_end, *region_start;
static block_header *free_lists[CLASSES + 1];

static void *small_or_malloc(size_t n) {
    size_t cls = (n + CLASS_BYTES - 1) / CLASS_BYTES;
    if (cls == 0) cls = 1;
    block_header *h = NULL;
    if (cls <= CLASSES) {
        pthread_mutex_lock(&lock);
        h = free_lists[cls];
        if (h) {
            free_lists[cls] = *(block_header **)h;
        } else {
            size_t bytes = sizeof(block_header) + cls * CLASS_BYTES;
            if ((size_t)(region_end - region_top) >= bytes) {
                h = (block_header *)region_top;
                region_top += bytes;
            }
        }
        pthread_mutex_unlock(&lock);
    }
    if (h) {
        h->cls = cls;
    } else {
        h = malloc(sizeof(block_header) + n);
        if (!h) return NULL;
        h->cls = 0;
    }
    h->size = n;
    return h + 1;
}

static void give_back(void *p) {
    if (!p) return;
    block_header *h = (block_header *)p - 1;
    if (h->cls == 0) {
        free(h);
        return;
    }
    pthread_mutex_lock(&lock);
    *(block_header **)h = free_lists[h->cls];
    free_lists[h->cls] = h;
    pthread_mutex_unlock(&lock);
}

static void *resize(void *p, size_t n) {
    if (!p) return small_or_malloc(n);
    block_header *h = (block_header *)p - 1;
    if (h->cls != 0 && n <= h->cls * CLASS_BYTES) {
        h->size = n;
        return p;
    }
    void *q = small_or_malloc(n);
    if (!q) return NULL;
    memcpy(q, p, h->size < n ? h->size : n);
    give_back(p);
    return q;
}

int qw_event_memory_install(void) {
    if (region_start) return 0;
    void *r = mmap(NULL, REGION_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED) return -1;
    region_start = region_top = r;
    region_end = region_start + REGION_BYTES;
    event_set_mem_functions(small_or_malloc, resize, give_back);
    return 0;
}

size_t qw_event_memory_region_used(void) {
    pthread_mutex_lock(&lock);
    size_t used = (size_t)(region_top - region_start);
    pthread_mutex_unlock(&lock);
    return used;
}
