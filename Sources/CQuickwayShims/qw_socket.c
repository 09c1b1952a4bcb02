#define _GNU_SOURCE
#include <sys/socket.h>
#include "qw_socket.h"

int qw_accept_nonblocking(int fd, struct sockaddr *addr, socklen_t *len) {
    return accept4(fd, addr, len, SOCK_NONBLOCK | SOCK_CLOEXEC);
}
