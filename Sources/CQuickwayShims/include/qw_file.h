#ifndef QW_FILE_H
#define QW_FILE_H

/* A temporary file with no name in `dir`, open for reading and writing: O_TMPFILE
 * where the file system has it, else a file made with mkostemp and unlinked at once.
 * Either way the kernel frees it when the descriptor is closed, so nothing is left
 * behind. Returns the descriptor, or -errno. */
int qw_open_tmpfile(const char *dir);

#endif
