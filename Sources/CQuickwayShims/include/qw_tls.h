#ifndef QW_TLS_H
#define QW_TLS_H
// OpenSSL server-side TLS helpers for what Swift cannot call directly (macros) or
// should not re-implement (ALPN and SNI selection callbacks).
#include <openssl/ssl.h>

// SSL_CTX_set_min_proto_version (a macro).
int qw_ssl_ctx_set_min_version(SSL_CTX *ctx, int version);
// SSL_CTX_set_mode (a macro): partial writes, moving write buffers, buffers released
// while idle; SSL_OP_IGNORE_UNEXPECTED_EOF (an EOF without close_notify is a close);
// read-ahead (one socket read per record, not one for the header and one for the body).
void qw_ssl_ctx_set_server_modes(SSL_CTX *ctx);
// Empties the thread's error queue before an SSL call whose SSL_get_error will be read
// (it must not see another connection's error), cheaply when it is already empty.
void qw_tls_clear_error(void);

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

// Why a handshake failed, from the error queue's first error (left in the queue).
enum { QW_TLS_FAIL_NOT_TLS = 0, QW_TLS_FAIL_VERSION = 1, QW_TLS_FAIL_CIPHER = 2, QW_TLS_FAIL_ALPN = 3,
       QW_TLS_FAIL_CLOSED = 4, QW_TLS_FAIL_OTHER = 5 };
int qw_tls_failure_reason(void);

// The context's certificate: notAfter (Unix seconds) and its DNS names (subjectAltName),
// comma-separated into `names`. Returns 0 when there is no certificate.
int qw_tls_cert_info(SSL_CTX *ctx, long long *not_after, char *names, size_t len);

// Session tickets encrypted with process-wide random keys that rotate every
// `qw_tls_set_ticket_rotation` seconds (default 3600); the previous key still decrypts.
void qw_ssl_ctx_set_ticket_keys(SSL_CTX *ctx);
void qw_tls_set_ticket_rotation(long seconds);

// Mutual TLS: client certificates verified against the PEM CAs in `ca_file` (also sent
// as the acceptable CA names); `required`: a handshake without one fails. A presented
// certificate that does not verify fails the handshake either way. 1 on success.
int qw_ssl_ctx_set_client_ca(SSL_CTX *ctx, const char *ca_file, int required);
// The verified client certificate of a finished handshake: its subject (RFC 2253), its
// subjectAltNames ("DNS:a, IP:10.0.0.1, email:x@y, URI:..."), both printable ASCII with
// other bytes escaped as \xNN, and the SHA-256 of its DER. 0 when there is none (or
// it did not verify).
int qw_tls_peer_certificate(SSL *ssl, char *subject, size_t slen, char *sans, size_t sanslen, uint8_t fingerprint[32]);
// How many times the keys have rotated (for /stats).
unsigned long qw_tls_ticket_rotations(void);
#endif
