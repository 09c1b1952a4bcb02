#ifndef QUICKWAY_QW_MALLOC_H
#define QUICKWAY_QW_MALLOC_H
// glibc's malloc.h, which Swift's Glibc module does not bring: handing freed heap pages
// back to the kernel (`MemoryGiveBack`).
#include <malloc.h>
#include <stddef.h>

// malloc_trim(0): every arena's free pages back to the kernel; 1 if some went.
static inline int qw_malloc_trim(void) { return malloc_trim(0); }

#endif
