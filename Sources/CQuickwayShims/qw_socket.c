#define _GNU_SOURCE
#include <sys/socket.h>
#include <sys/eventfd.h>
#include <sched.h>
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#include "qw_socket.h"

int qw_eof_socket(void) {
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, pair) != 0) return -1;
    close(pair[1]);
    return pair[0];
}

int qw_replace_fd(int with, int fd) {
    int rc;
    do { rc = dup3(with, fd, O_CLOEXEC); } while (rc < 0 && errno == EINTR);
    return rc < 0 ? -errno : 0;
}

int qw_accept_nonblocking(int fd, struct sockaddr *addr, socklen_t *len) {
    return accept4(fd, addr, len, SOCK_NONBLOCK | SOCK_CLOEXEC);
}

int qw_unshare_files(void) {
    return unshare(CLONE_FILES);
}

#include <unistd.h>
int qw_gettid(void) {
    return (int)gettid();
}

int qw_affinity_cpu_count(void) {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) != 0) return -1;
    return CPU_COUNT(&set);
}

int qw_wake_fd(void) {
    return eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
}
