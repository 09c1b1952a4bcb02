#include "qw_tls.h"
#include <openssl/err.h>
#include <openssl/x509v3.h>
#include <stdlib.h>
#include <string.h>

int qw_ssl_ctx_set_min_version(SSL_CTX *ctx, int version) {
    return (int)SSL_CTX_set_min_proto_version(ctx, version);
}

void qw_ssl_ctx_set_server_modes(SSL_CTX *ctx) {
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS);
    // A client that closes without close_notify is an ordinary end (SSL_ERROR_ZERO_RETURN),
    // not an error left in the thread's error queue.
    SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
}

void qw_ssl_ctx_set_tickets(SSL_CTX *ctx, int tickets) {
    if (tickets) SSL_CTX_clear_options(ctx, SSL_OP_NO_TICKET);
    else SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);
}

struct qw_alpn { unsigned len; unsigned char wire[]; };

static int qw_alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                          const unsigned char *in, unsigned int inlen, void *arg) {
    (void)ssl;
    const struct qw_alpn *a = arg;
    // Server preference: walk our list, pick the first the client offered.
    for (unsigned i = 0; i < a->len; i += 1u + a->wire[i]) {
        unsigned char n = a->wire[i];
        for (unsigned j = 0; j < inlen; j += 1u + in[j]) {
            if (in[j] == n && j + 1u + n <= inlen && memcmp(in + j + 1, a->wire + i + 1, n) == 0) {
                *out = in + j + 1;
                *outlen = n;
                return SSL_TLSEXT_ERR_OK;
            }
        }
    }
    return SSL_TLSEXT_ERR_ALERT_FATAL;
}

void *qw_ssl_ctx_set_alpn(SSL_CTX *ctx, const unsigned char *wire, unsigned len) {
    struct qw_alpn *a = malloc(sizeof(struct qw_alpn) + len);
    if (!a) return NULL;
    a->len = len;
    memcpy(a->wire, wire, len);
    SSL_CTX_set_alpn_select_cb(ctx, qw_alpn_select, a);
    return a;
}

struct qw_sni { int count; SSL_CTX *ctxs[]; };

static int qw_sni_select(SSL *ssl, int *alert, void *arg) {
    (void)alert;
    const struct qw_sni *t = arg;
    const char *name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
    if (!name) return SSL_TLSEXT_ERR_NOACK;   // no SNI: the default certificate
    size_t n = strlen(name);
    for (int i = 1; i < t->count; i++) {
        X509 *cert = SSL_CTX_get0_certificate(t->ctxs[i]);
        if (cert && X509_check_host(cert, name, n, 0, NULL) == 1) {
            SSL_set_SSL_CTX(ssl, t->ctxs[i]);
            return SSL_TLSEXT_ERR_OK;
        }
    }
    return SSL_TLSEXT_ERR_OK;   // an unknown name gets the default certificate
}

void *qw_ssl_ctx_set_sni(SSL_CTX *ctx, SSL_CTX *const *all, int count) {
    struct qw_sni *t = malloc(sizeof(struct qw_sni) + sizeof(SSL_CTX *) * (size_t)count);
    if (!t) return NULL;
    t->count = count;
    for (int i = 0; i < count; i++) t->ctxs[i] = all[i];
    SSL_CTX_set_tlsext_servername_callback(ctx, qw_sni_select);
    SSL_CTX_set_tlsext_servername_arg(ctx, t);
    return t;
}

void qw_tls_free(void *p) { free(p); }

void qw_tls_last_error(char *out, size_t len) {
    unsigned long e = ERR_get_error();
    if (len == 0) return;
    out[0] = 0;
    if (e) ERR_error_string_n(e, out, len);
    ERR_clear_error();
}
