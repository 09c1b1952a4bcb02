#define _GNU_SOURCE
#include <sys/socket.h>
#include <sys/eventfd.h>
#include <sched.h>
#include "qw_socket.h"

int qw_accept_nonblocking(int fd, struct sockaddr *addr, socklen_t *len) {
    return accept4(fd, addr, len, SOCK_NONBLOCK | SOCK_CLOEXEC);
}

int qw_unshare_files(void) {
    return unshare(CLONE_FILES);
}

int qw_wake_fd(void) {
    return eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
}
