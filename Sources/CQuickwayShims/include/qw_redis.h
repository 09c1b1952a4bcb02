#ifndef QUICKWAY_QW_REDIS_H
#define QUICKWAY_QW_REDIS_H
// hiredis (Debian's libhiredis-dev) for the shared Redis tier: its reply parser
// (redisReader), which Swift calls directly. The connection itself (socket, TLS) is
// Quickway's own (RedisSocket.swift): Debian's hiredis 0.14 has no TLS support.
#include <hiredis/hiredis.h>
#include <hiredis/read.h>
#include <openssl/ssl.h>

// A client TLS context for `rediss://`: TLS 1.2 or later, the server's certificate
// verified against the PEM CAs in `ca_file` (NULL: the system's default store).
// NULL with the reason in `err` on failure.
SSL_CTX *qw_redis_tls_context(const char *ca_file, char *err, size_t errlen);

// A client TLS session on connected socket `fd`: SNI and the name (or IP address) the
// certificate must carry are `host`. NULL on failure.
SSL *qw_redis_tls_session(SSL_CTX *ctx, int fd, const char *host);

// Why the handshake on `ssl` failed, for logs and /stats: the certificate verification
// error when there was one ("certificate verify failed: unable to get local issuer
// certificate"), else OpenSSL's first queued error. The error queue is cleared.
void qw_redis_tls_failure(SSL *ssl, char *out, size_t len);
#endif
