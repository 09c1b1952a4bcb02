#ifndef QUICKWAY_QW_SOCKET_H
#define QUICKWAY_QW_SOCKET_H
#include <sys/socket.h>
// accept4 needs _GNU_SOURCE, which a Swift module map header cannot set for glibc.
int qw_accept_nonblocking(int fd, struct sockaddr *addr, socklen_t *len);
// A non-blocking, close-on-exec eventfd (a loop's wake-up from other threads), or -1.
int qw_wake_fd(void);
// Gives the calling thread a descriptor table of its own (a copy), or -1 with errno.
int qw_unshare_files(void);
// The calling thread's kernel id (for /proc/self/task/TID).
int qw_gettid(void);
// How many CPUs the calling thread may run on (its affinity mask), or -1.
int qw_affinity_cpu_count(void);
// A non-blocking, close-on-exec socket whose peer is gone: it reads EOF (a peek too),
// and writes to it fail with EPIPE. -1 with errno if none could be made.
int qw_eof_socket(void);
// Makes descriptor `fd` refer to what `with` refers to (dup3, close-on-exec) in one step,
// so the number is never free for another thread to get. What `fd` referred to loses that
// reference (the last one of a socket: its connection is closed). 0, or -errno.
int qw_replace_fd(int with, int fd);

// recv and send on a non-blocking socket as raw system calls, returning the byte count or
// -errno. glibc's recv and send are cancellation points: in a multi-threaded process each
// call switches asynchronous cancellation on and off around the system call, work paid
// on every read and write; Quickway never cancels a thread, so those are skipped, as is
// the thread-local errno.
#include <stddef.h>
#include <sys/syscall.h>
static inline long qw_syscall6(long n, long a, long b, long c, long d, long e, long f) {
#if defined(__x86_64__)
    long ret;
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    __asm__ volatile ("syscall" : "=a"(ret) : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9) : "rcx", "r11", "memory");
    return ret;
#else
    extern long syscall(long, ...);
    extern int *__errno_location(void);
    long ret = syscall(n, a, b, c, d, e, f);
    return ret < 0 ? -(long)*__errno_location() : ret;
#endif
}
static inline long qw_recv(int fd, void *buf, size_t len) {
    return qw_syscall6(SYS_recvfrom, fd, (long)buf, (long)len, 0, 0, 0);
}
static inline long qw_send(int fd, const void *buf, size_t len, int flags) {
    return qw_syscall6(SYS_sendto, fd, (long)buf, (long)len, flags, 0, 0);
}
#endif
