#ifndef QUICKWAY_CLIBEVENT_SHIM_H
#define QUICKWAY_CLIBEVENT_SHIM_H
// libc headers first: including event2/* before them breaks clean debug builds
// with a conflicting fd_set (see DESIGN.md, interop notes).
#include <sys/types.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>
#include <fcntl.h>
#include <errno.h>
#include <event2/event.h>
#include <event2/thread.h>
#endif
