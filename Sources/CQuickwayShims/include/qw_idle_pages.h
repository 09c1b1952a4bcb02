#ifndef QUICKWAY_QW_IDLE_PAGES_H
#define QUICKWAY_QW_IDLE_PAGES_H
// An allocator with nghttp2_mem's four callbacks (`user` is the qw_idle_pages) that puts
// the very first block of at least QW_IDLE_PAGES_MIN bytes in pages of its own (mmap), so
// that the pages can be handed back to the kernel (MADV_DONTNEED) while the block holds
// nothing that will be read again: nghttp2's outbound frame buffer (16,394 bytes,
// allocated with the session and kept for its life) between frames. Every other block
// goes to malloc. One qw_idle_pages per session; loop-thread only.
#include <stddef.h>

#define QW_IDLE_PAGES_MIN 16384

typedef struct {
    void *block;      // the block in its own pages, or NULL
    size_t length;    // its mapped length (a whole number of pages)
    int tried;        // the first large block was seen: no later one gets own pages
} qw_idle_pages;

void *qw_idle_pages_malloc(size_t size, void *user);
void qw_idle_pages_free(void *ptr, void *user);
void *qw_idle_pages_calloc(size_t nmemb, size_t size, void *user);
void *qw_idle_pages_realloc(void *ptr, size_t size, void *user);

// Gives the block's pages back to the kernel: they read as zeros when touched again.
// Only when nothing in the block is live.
void qw_idle_pages_release(qw_idle_pages *p);
// The block's pages now resident in memory (mincore), for tests and stats.
size_t qw_idle_pages_resident(const qw_idle_pages *p);
#endif
