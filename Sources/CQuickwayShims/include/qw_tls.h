#ifndef QW_TLS_H
#define QW_TLS_H
// OpenSSL server-side TLS helpers for what Swift cannot call directly (macros) or
// should not re-implement (ALPN and SNI selection callbacks).
#include <openssl/ssl.h>

// SSL_CTX_set_min_proto_version (a macro).
int qw_ssl_ctx_set_min_version(SSL_CTX *ctx, int version);
// SSL_CTX_set_mode (a macro): partial writes, moving write buffers, buffers released
// while idle; and SSL_OP_IGNORE_UNEXPECTED_EOF (an EOF without close_notify is a close).
void qw_ssl_ctx_set_server_modes(SSL_CTX *ctx);
// SSL_OP_NO_TICKET when `tickets` is 0.
void qw_ssl_ctx_set_tickets(SSL_CTX *ctx, int tickets);

// ALPN: the server's protocols in wire format (length-prefixed), most preferred first.
// The first of them the client also offers is selected; if the client offered ALPN but
// none of these, the handshake fails with no_application_protocol (RFC 7301 3.2).
// Returns the copy of `wire` the callback uses; free it with qw_tls_free after the
// context is freed.
void *qw_ssl_ctx_set_alpn(SSL_CTX *ctx, const unsigned char *wire, unsigned len);

// SNI: `all[0]` is the default context (the one `ctx` is); a client naming a host that
// a later context's certificate covers (X509_check_host: SAN, wildcards) is switched
// to that context. Returns the table the callback uses; free it with qw_tls_free.
void *qw_ssl_ctx_set_sni(SSL_CTX *ctx, SSL_CTX *const *all, int count);

void qw_tls_free(void *p);

// The error queue's first error as text (empty when none), and the queue cleared.
void qw_tls_last_error(char *out, size_t len);
#endif
