#define _GNU_SOURCE
#include "qw_file.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int qw_open_tmpfile(const char *dir) {
    int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd >= 0) return fd;
    int err = errno;
    /* ENOENT, ENOTDIR, EACCES, ... are the directory's fault: say so. Only a file
     * system without O_TMPFILE gets the named fallback. */
    if (err != EOPNOTSUPP && err != EISDIR && err != EINVAL) return -err;
    char path[4096];
    if (snprintf(path, sizeof path, "%s/quickway-body-XXXXXX", dir) >= (int)sizeof path) return -ENAMETOOLONG;
    fd = mkostemp(path, O_CLOEXEC);
    if (fd < 0) return -errno;
    unlink(path);
    return fd;
}
