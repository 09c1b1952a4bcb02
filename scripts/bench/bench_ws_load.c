/* WebSocket load for scripts/bench/bench-websocket.sh: an echo backend and a closed-loop
 * client, in C with epoll, so that the proxy under test (not the load) is the limit.
 *
 *   bench_ws_load backend HOST PORT
 *       Answers the handshake (RFC 6455 4.2.2), echoes each data frame unmasked,
 *       answers pings and closes. Prints "ready".
 *   bench_ws_load client HOST PORT PATH CONNECTIONS SECONDS SIZE
 *       CONNECTIONS connections, each sending one masked binary message of SIZE bytes
 *       and waiting for its echo, again and again. After a 1 s warm-up, counts round
 *       trips for SECONDS and prints "messages_per_s p50_ms p99_ms".
 *
 * Build: cc -O2 -o bench_ws_load bench_ws_load.c -lcrypto
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BUF (1 << 20)
#define MAXC 4096

typedef struct {
    int fd;
    int upgraded;
    size_t len;
    unsigned char *in;
    double sent_at;
} conn;

static conn conns[MAXC];

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void nonblock(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }
static void nodelay(int fd) { int one = 1; setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); }

static void send_all(int fd, const void *p, size_t n) {
    const unsigned char *b = p;
    while (n > 0) {
        ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
        if (w > 0) { b += w; n -= (size_t)w; continue; }
        if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
            fd_set ws; FD_ZERO(&ws); FD_SET(fd, &ws);
            select(fd + 1, NULL, &ws, NULL, NULL);
            continue;
        }
        return;
    }
}

/* Frame header for a payload of n bytes; masked with a zero key (valid: the client picks it). */
static size_t header(unsigned char *h, int op, size_t n, int mask) {
    size_t k = 0;
    h[k++] = 0x80 | op;
    unsigned char m = mask ? 0x80 : 0;
    if (n < 126) h[k++] = m | n;
    else if (n < 65536) { h[k++] = m | 126; h[k++] = n >> 8; h[k++] = n & 0xff; }
    else { h[k++] = m | 127; for (int s = 56; s >= 0; s -= 8) h[k++] = (n >> s) & 0xff; }
    if (mask) { memset(h + k, 0, 4); k += 4; }
    return k;
}

/* One complete frame at p (len bytes available): its size, or 0 if incomplete. */
static size_t frame_at(unsigned char *p, size_t len, int *op, unsigned char **payload, size_t *n) {
    if (len < 2) return 0;
    size_t h = 2, l = p[1] & 0x7f;
    if (l == 126) { if (len < 4) return 0; l = (p[2] << 8) | p[3]; h = 4; }
    else if (l == 127) { if (len < 10) return 0; l = 0; for (int i = 0; i < 8; i++) l = (l << 8) | p[2 + i]; h = 10; }
    int masked = p[1] & 0x80;
    if (masked) h += 4;
    if (len < h + l) return 0;
    if (masked) { unsigned char *k = p + h - 4; for (size_t i = 0; i < l; i++) p[h + i] ^= k[i & 3]; }
    *op = p[0] & 0x0f;
    *payload = p + h;
    *n = l;
    return h + l;
}

static int backend(const char *host, int port) {
    int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
    inet_pton(AF_INET, host, &a.sin_addr);
    if (bind(ls, (void *)&a, sizeof a) || listen(ls, 1024)) { perror("listen"); return 1; }
    nonblock(ls);
    int ep = epoll_create1(0);
    struct epoll_event ev = { .events = EPOLLIN, .data.fd = ls };
    epoll_ctl(ep, EPOLL_CTL_ADD, ls, &ev);
    printf("ready\n");
    fflush(stdout);
    unsigned char *out = malloc(BUF + 16);
    struct epoll_event evs[256];
    for (;;) {
        int k = epoll_wait(ep, evs, 256, -1);
        for (int e = 0; e < k; e++) {
            int fd = evs[e].data.fd;
            if (fd == ls) {
                int c;
                while ((c = accept(ls, NULL, NULL)) >= 0) {
                    if (c >= MAXC) { close(c); continue; }
                    nonblock(c); nodelay(c);
                    conns[c] = (conn){ .fd = c, .in = conns[c].in ? conns[c].in : malloc(BUF + 1) };
                    struct epoll_event ce = { .events = EPOLLIN, .data.fd = c };
                    epoll_ctl(ep, EPOLL_CTL_ADD, c, &ce);
                }
                continue;
            }
            conn *c = &conns[fd];
            ssize_t r = recv(fd, c->in + c->len, BUF - c->len, 0);
            if (r <= 0) {
                if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
                epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL); close(fd); c->len = 0; continue;
            }
            c->len += (size_t)r;
            if (!c->upgraded) {
                c->in[c->len] = 0;
                char *end = strstr((char *)c->in, "\r\n\r\n");
                if (!end) continue;
                char *key = strcasestr((char *)c->in, "Sec-WebSocket-Key:");
                if (!key) { epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL); close(fd); c->len = 0; continue; }
                key += 18; while (*key == ' ') key++;
                char *ke = strstr(key, "\r\n");
                char buf[128];
                int kl = snprintf(buf, sizeof buf, "%.*s258EAFA5-E914-47DA-95CA-C5AB0DC85B11", (int)(ke - key), key);
                unsigned char d[20], acc[64];
                SHA1((unsigned char *)buf, kl, d);
                EVP_EncodeBlock(acc, d, 20);
                char resp[256];
                int rl = snprintf(resp, sizeof resp, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n", acc);
                send_all(fd, resp, rl);
                size_t used = (size_t)(end + 4 - (char *)c->in);
                memmove(c->in, c->in + used, c->len - used);
                c->len -= used;
                c->upgraded = 1;
            }
            size_t at = 0, o = 0;
            for (;;) {
                int op; unsigned char *p; size_t n;
                size_t f = frame_at(c->in + at, c->len - at, &op, &p, &n);
                if (!f) break;
                at += f;
                if (op == 8) { o += header(out + o, 8, n < 2 ? n : 2, 0); memcpy(out + o, p, n < 2 ? n : 2); o += n < 2 ? n : 2; continue; }
                if (op == 9) op = 10;
                if (op == 10 && n == 0) continue;
                if (o + n + 14 > BUF) { send_all(fd, out, o); o = 0; }
                o += header(out + o, op, n, 0);
                memcpy(out + o, p, n); o += n;
            }
            if (o) send_all(fd, out, o);
            memmove(c->in, c->in + at, c->len - at);
            c->len -= at;
        }
    }
}

static int cmp(const void *a, const void *b) { double x = *(double *)a, y = *(double *)b; return x < y ? -1 : x > y; }

static int client(const char *host, int port, const char *path, int n, double seconds, size_t size) {
    unsigned char *msg = malloc(size + 14);
    size_t ml = header(msg, 2, size, 1);
    for (size_t i = 0; i < size; i++) msg[ml + i] = (unsigned char)(i * 7);
    ml += size;
    int ep = epoll_create1(0);
    for (int i = 0; i < n; i++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
        inet_pton(AF_INET, host, &a.sin_addr);
        if (connect(fd, (void *)&a, sizeof a)) { perror("connect"); return 1; }
        nodelay(fd);
        char req[512];
        int rl = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: bench\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                          "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", path);
        send_all(fd, req, rl);
        char head[4096]; size_t hl = 0;
        while (hl < sizeof head - 1) {
            ssize_t r = recv(fd, head + hl, sizeof head - 1 - hl, 0);
            if (r <= 0) { fprintf(stderr, "handshake failed\n"); return 1; }
            hl += (size_t)r; head[hl] = 0;
            if (strstr(head, "\r\n\r\n")) break;
        }
        if (!strstr(head, " 101 ")) { fprintf(stderr, "no 101: %s\n", head); return 1; }
        if (fd >= MAXC) return 1;
        conns[fd] = (conn){ .fd = fd, .upgraded = 1, .in = malloc(BUF + 1) };
        size_t extra = hl - (size_t)(strstr(head, "\r\n\r\n") + 4 - head);
        memcpy(conns[fd].in, head + hl - extra, extra);
        conns[fd].len = extra;
        nonblock(fd);
        struct epoll_event ce = { .events = EPOLLIN, .data.fd = fd };
        epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ce);
    }
    size_t cap = 1 << 24, count = 0;
    double *rtt = malloc(cap * sizeof(double));
    double start = now(), warm = start + 1.0, end = warm + seconds;
    for (int fd = 0; fd < MAXC; fd++) if (conns[fd].upgraded) { conns[fd].sent_at = now(); send_all(fd, msg, ml); }
    struct epoll_event evs[256];
    while (now() < end) {
        int k = epoll_wait(ep, evs, 256, 100);
        for (int e = 0; e < k; e++) {
            conn *c = &conns[evs[e].data.fd];
            ssize_t r = recv(c->fd, c->in + c->len, BUF - c->len, 0);
            if (r == 0) { fprintf(stderr, "closed by the proxy\n"); return 1; }
            if (r < 0) continue;
            c->len += (size_t)r;
            size_t at = 0;
            for (;;) {
                int op; unsigned char *p; size_t n;
                size_t f = frame_at(c->in + at, c->len - at, &op, &p, &n);
                if (!f) break;
                at += f;
                if (op != 2) continue;
                double t = now();
                if (t >= warm && count < cap) rtt[count++] = t - c->sent_at;
                c->sent_at = t;
                send_all(c->fd, msg, ml);
            }
            memmove(c->in, c->in + at, c->len - at);
            c->len -= at;
        }
    }
    qsort(rtt, count, sizeof(double), cmp);
    double p50 = count ? rtt[count / 2] * 1000 : 0, p99 = count ? rtt[(size_t)(count * 0.99)] * 1000 : 0;
    printf("%.0f %.3f %.3f\n", count / seconds, p50, p99);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 4 && !strcmp(argv[1], "backend")) return backend(argv[2], atoi(argv[3]));
    if (argc >= 8 && !strcmp(argv[1], "client"))
        return client(argv[2], atoi(argv[3]), argv[4], atoi(argv[5]), atof(argv[6]), (size_t)atol(argv[7]));
    fprintf(stderr, "usage: bench_ws_load backend HOST PORT | client HOST PORT PATH CONNECTIONS SECONDS SIZE\n");
    return 2;
}
