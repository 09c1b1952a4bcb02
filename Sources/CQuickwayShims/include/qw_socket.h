#ifndef QUICKWAY_QW_SOCKET_H
#define QUICKWAY_QW_SOCKET_H
#include <sys/socket.h>
// accept4 needs _GNU_SOURCE, which a Swift module map header cannot set for glibc.
int qw_accept_nonblocking(int fd, struct sockaddr *addr, socklen_t *len);
// A non-blocking, close-on-exec eventfd (a loop's wake-up from other threads), or -1.
int qw_wake_fd(void);
#endif
