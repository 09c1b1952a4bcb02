#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "qw_idle_pages.h"

static size_t page_size(void) {
    static size_t size;
    if (!size) size = (size_t)sysconf(_SC_PAGESIZE);
    return size;
}

// The very first large block gets pages of its own (whether or not mmap succeeds, no
// later block ever does: only that one is known to be the frame buffer, whose pages
// may be released). NULL when it is not that block or mmap failed.
static void *map_first_large(qw_idle_pages *p, size_t size) {
    if (size < QW_IDLE_PAGES_MIN || p->tried) return NULL;
    p->tried = 1;
    size_t length = (size + page_size() - 1) & ~(page_size() - 1);
    void *block = mmap(NULL, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (block == MAP_FAILED) return NULL;
    p->block = block;
    p->length = length;
    return block;
}

// A fresh block: in its own pages if it is the first large one, else from malloc.
static void *allocate(qw_idle_pages *p, size_t size) {
    void *block = map_first_large(p, size);
    return block != NULL ? block : malloc(size);
}

void *qw_idle_pages_malloc(size_t size, void *user) { return allocate(user, size); }

void qw_idle_pages_free(void *ptr, void *user) {
    qw_idle_pages *p = user;
    if (ptr != NULL && ptr == p->block) {
        munmap(p->block, p->length);
        p->block = NULL;
        p->length = 0;   // `tried` stays set: no later block takes its place
        return;
    }
    free(ptr);
}

void *qw_idle_pages_calloc(size_t nmemb, size_t size, void *user) {
    if (size != 0 && nmemb > (size_t)-1 / size) return NULL;
    size_t total = nmemb * size;
    void *block = map_first_large(user, total);   // mapped pages are zero
    return block != NULL ? block : calloc(nmemb, size);
}

void *qw_idle_pages_realloc(void *ptr, size_t size, void *user) {
    qw_idle_pages *p = user;
    if (ptr == NULL) return allocate(p, size);
    if (ptr != p->block) return realloc(ptr, size);
    if (size <= p->length) return ptr;
    // The block outgrows its pages: it moves to malloc.
    void *moved = malloc(size);
    if (moved == NULL) return NULL;
    memcpy(moved, p->block, p->length);
    qw_idle_pages_free(p->block, p);
    return moved;
}

void qw_idle_pages_release(qw_idle_pages *p) {
    if (p->block != NULL) madvise(p->block, p->length, MADV_DONTNEED);
}

size_t qw_idle_pages_resident(const qw_idle_pages *p) {
    if (p->block == NULL) return 0;
    size_t pages = p->length / page_size(), resident = 0;
    unsigned char vec[64];
    for (size_t at = 0; at < pages; at += sizeof vec) {
        size_t n = pages - at < sizeof vec ? pages - at : sizeof vec;
        if (mincore((char *)p->block + at * page_size(), n * page_size(), vec) != 0) return 0;
        for (size_t i = 0; i < n; i++) resident += vec[i] & 1;
    }
    return resident * page_size();
}
