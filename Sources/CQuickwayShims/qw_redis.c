#include <string.h>
#include <stdio.h>
#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>
#include "qw_redis.h"

SSL_CTX *qw_redis_tls_context(const char *ca_file, char *err, size_t errlen) {
    if (errlen) err[0] = 0;
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (!ctx) { snprintf(err, errlen, "cannot create a TLS context"); return NULL; }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    int ok = ca_file ? SSL_CTX_load_verify_locations(ctx, ca_file, NULL) : SSL_CTX_set_default_verify_paths(ctx);
    if (ok != 1) {
        char why[200] = "no certificate in it";
        unsigned long e = ERR_get_error();
        if (e) ERR_error_string_n(e, why, sizeof why);
        ERR_clear_error();
        snprintf(err, errlen, "cannot read CA certificates from %s: %s", ca_file ? ca_file : "the system store", why);
        SSL_CTX_free(ctx);
        return NULL;
    }
    return ctx;
}

SSL *qw_redis_tls_session(SSL_CTX *ctx, int fd, const char *host) {
    SSL *ssl = SSL_new(ctx);
    if (!ssl) return NULL;
    unsigned char ip[16];
    int is_ip = inet_pton(AF_INET, host, ip) == 1 || inet_pton(AF_INET6, host, ip) == 1;
    int ok = SSL_set_fd(ssl, fd) == 1;
    if (is_ip) {
        // An address is checked against the certificate's IP SANs; SNI carries names only.
        ok = ok && X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host) == 1;
    } else {
        ok = ok && SSL_set_tlsext_host_name(ssl, host) == 1 && SSL_set1_host(ssl, host) == 1;
    }
    if (!ok) { SSL_free(ssl); return NULL; }
    SSL_set_connect_state(ssl);
    return ssl;
}

void qw_redis_tls_failure(SSL *ssl, char *out, size_t len) {
    if (len == 0) return;
    out[0] = 0;
    long v = ssl ? SSL_get_verify_result(ssl) : X509_V_OK;
    unsigned long e = ERR_get_error();
    if (v != X509_V_OK) {
        snprintf(out, len, "certificate verify failed: %s", X509_verify_cert_error_string(v));
    } else if (e) {
        ERR_error_string_n(e, out, len);
    } else {
        snprintf(out, len, "the server closed the connection during the TLS handshake");
    }
    ERR_clear_error();
}
