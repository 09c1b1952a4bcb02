#include "qw_tls.h"
#include <openssl/err.h>
#include <openssl/x509v3.h>
#include <openssl/rand.h>
#include <openssl/evp.h>
#include <openssl/core_names.h>
#include <openssl/params.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

int qw_ssl_ctx_set_min_version(SSL_CTX *ctx, int version) {
    return (int)SSL_CTX_set_min_proto_version(ctx, version);
}

void qw_ssl_ctx_set_server_modes(SSL_CTX *ctx) {
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS);
    // A client that closes without close_notify is an ordinary end (SSL_ERROR_ZERO_RETURN),
    // not an error left in the thread's error queue.
    SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
    // Read whole socket reads (up to a record's maximum) instead of a record's 5-byte
    // header and then its body: one read per arriving record, not two (nginx does the
    // same). Data read ahead but not yet decrypted shows in SSL_has_pending, not SSL_pending.
    SSL_CTX_set_read_ahead(ctx, 1);
}

void qw_tls_clear_error(void) {
    // ERR_clear_error walks all 16 slots of the queue on every call (OpenSSL 3); the
    // peek reads only its ends. SSL_get_error looks at the queue through
    // the same ERR_peek_error, so a queue this leaves as it was reads as empty to it.
    if (ERR_peek_error() != 0) ERR_clear_error();
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

// MARK: handshake failure reasons

int qw_tls_failure_reason(void) {
    unsigned long e = ERR_peek_error();
    if (!e) return QW_TLS_FAIL_CLOSED;
    if (ERR_GET_LIB(e) != ERR_LIB_SSL) return QW_TLS_FAIL_OTHER;
    switch (ERR_GET_REASON(e)) {
    case SSL_R_WRONG_VERSION_NUMBER:
    case SSL_R_HTTP_REQUEST:
    case SSL_R_HTTPS_PROXY_REQUEST:
    case SSL_R_PACKET_LENGTH_TOO_LONG:
    case SSL_R_RECORD_LENGTH_MISMATCH:
        return QW_TLS_FAIL_NOT_TLS;
    case SSL_R_UNSUPPORTED_PROTOCOL:
    case SSL_R_VERSION_TOO_LOW:
    case SSL_R_VERSION_TOO_HIGH:
    case SSL_R_TLSV1_ALERT_PROTOCOL_VERSION:
        return QW_TLS_FAIL_VERSION;
    case SSL_R_NO_SHARED_CIPHER:
    case SSL_R_NO_SHARED_GROUPS:
    case SSL_R_NO_SUITABLE_SIGNATURE_ALGORITHM:
        return QW_TLS_FAIL_CIPHER;
    case SSL_R_NO_APPLICATION_PROTOCOL:
        return QW_TLS_FAIL_ALPN;
    default:
        return QW_TLS_FAIL_OTHER;
    }
}

// MARK: certificate facts

int qw_tls_cert_info(SSL_CTX *ctx, long long *not_after, char *names, size_t len) {
    X509 *cert = SSL_CTX_get0_certificate(ctx);
    if (!cert || len == 0) return 0;
    names[0] = 0;
    struct tm tm;
    if (ASN1_TIME_to_tm(X509_get0_notAfter(cert), &tm) != 1) return 0;
    *not_after = (long long)timegm(&tm);
    GENERAL_NAMES *sans = X509_get_ext_d2i(cert, NID_subject_alt_name, NULL, NULL);
    size_t used = 0;
    if (sans) {
        for (int i = 0; i < sk_GENERAL_NAME_num(sans); i++) {
            const GENERAL_NAME *g = sk_GENERAL_NAME_value(sans, i);
            if (g->type != GEN_DNS) continue;
            const unsigned char *s = ASN1_STRING_get0_data(g->d.dNSName);
            int n = ASN1_STRING_length(g->d.dNSName);
            if (n <= 0 || used + (size_t)n + 2 > len) continue;
            if (used) names[used++] = ',';
            memcpy(names + used, s, (size_t)n);
            used += (size_t)n;
            names[used] = 0;
        }
        GENERAL_NAMES_free(sans);
    }
    return 1;
}

// MARK: session ticket keys, rotated
//
// One process-wide ring: the current key encrypts new tickets; the previous one still
// decrypts (and asks for a renewed ticket), so a ticket lives between one and two
// rotation periods. Keys are random, kept in memory only, and shared by every context
// (a reload keeps resumption working).

struct qw_ticket_key { unsigned char name[16]; unsigned char aes[32]; unsigned char hmac[32]; };
static pthread_mutex_t qw_ticket_lock = PTHREAD_MUTEX_INITIALIZER;
static struct qw_ticket_key qw_ticket_current, qw_ticket_previous;
static int qw_ticket_have_previous = 0;
static time_t qw_ticket_next_rotation = 0;
static long qw_ticket_period = 3600;
static unsigned long qw_ticket_rotations = 0;

static int qw_ticket_new_key(struct qw_ticket_key *k) {
    return RAND_bytes(k->name, sizeof k->name) == 1 && RAND_priv_bytes(k->aes, sizeof k->aes) == 1
        && RAND_priv_bytes(k->hmac, sizeof k->hmac) == 1;
}

// Seconds on the monotonic clock: a wall clock stepped back would stall rotation.
static time_t qw_ticket_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec;
}

// Called with the lock held.
static int qw_ticket_rotate_if_due(void) {
    time_t now = qw_ticket_now();
    if (qw_ticket_next_rotation == 0) {
        if (!qw_ticket_new_key(&qw_ticket_current)) return 0;
        qw_ticket_next_rotation = now + qw_ticket_period;
        return 1;
    }
    while (now >= qw_ticket_next_rotation) {
        struct qw_ticket_key fresh;
        if (!qw_ticket_new_key(&fresh)) return 0;
        // After a long pause (no handshakes), the old current key is too old to keep.
        qw_ticket_previous = qw_ticket_current;
        qw_ticket_have_previous = now < qw_ticket_next_rotation + qw_ticket_period;
        qw_ticket_current = fresh;
        qw_ticket_next_rotation += qw_ticket_period;
        if (qw_ticket_next_rotation <= now) qw_ticket_next_rotation = now + qw_ticket_period;
        qw_ticket_rotations++;
    }
    return 1;
}

static int qw_ticket_setup(const struct qw_ticket_key *k, unsigned char *iv, EVP_CIPHER_CTX *cctx,
                           EVP_MAC_CTX *hctx, int enc) {
    OSSL_PARAM params[2];
    params[0] = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0);
    params[1] = OSSL_PARAM_construct_end();
    if (EVP_MAC_CTX_set_params(hctx, params) != 1) return 0;
    if (EVP_MAC_init(hctx, k->hmac, sizeof k->hmac, NULL) != 1) return 0;
    if (enc) return EVP_EncryptInit_ex(cctx, EVP_aes_256_cbc(), NULL, k->aes, iv) == 1;
    return EVP_DecryptInit_ex(cctx, EVP_aes_256_cbc(), NULL, k->aes, iv) == 1;
}

static int qw_ticket_cb(SSL *ssl, unsigned char key_name[16], unsigned char *iv, EVP_CIPHER_CTX *cctx,
                        EVP_MAC_CTX *hctx, int enc) {
    (void)ssl;
    pthread_mutex_lock(&qw_ticket_lock);
    int rc;
    if (!qw_ticket_rotate_if_due()) { rc = -1; goto done; }
    if (enc) {
        if (RAND_bytes(iv, EVP_MAX_IV_LENGTH) != 1) { rc = -1; goto done; }
        memcpy(key_name, qw_ticket_current.name, 16);
        rc = qw_ticket_setup(&qw_ticket_current, iv, cctx, hctx, 1) ? 1 : -1;
    } else if (memcmp(key_name, qw_ticket_current.name, 16) == 0) {
        rc = qw_ticket_setup(&qw_ticket_current, iv, cctx, hctx, 0) ? 1 : -1;
    } else if (qw_ticket_have_previous && memcmp(key_name, qw_ticket_previous.name, 16) == 0) {
        // Still valid, but made with the old key: use it and issue a new ticket.
        rc = qw_ticket_setup(&qw_ticket_previous, iv, cctx, hctx, 0) ? 2 : -1;
    } else {
        rc = 0;   // unknown or expired key: a full handshake
    }
done:
    pthread_mutex_unlock(&qw_ticket_lock);
    return rc;
}

void qw_ssl_ctx_set_ticket_keys(SSL_CTX *ctx) {
    SSL_CTX_set_tlsext_ticket_key_evp_cb(ctx, qw_ticket_cb);
}

void qw_tls_set_ticket_rotation(long seconds) {
    pthread_mutex_lock(&qw_ticket_lock);
    if (seconds < 1) seconds = 1;
    if (seconds != qw_ticket_period) {
        qw_ticket_period = seconds;
        if (qw_ticket_next_rotation != 0) qw_ticket_next_rotation = qw_ticket_now() + seconds;
    }
    pthread_mutex_unlock(&qw_ticket_lock);
}

unsigned long qw_tls_ticket_rotations(void) {
    pthread_mutex_lock(&qw_ticket_lock);
    unsigned long n = qw_ticket_rotations;
    pthread_mutex_unlock(&qw_ticket_lock);
    return n;
}


int qw_ssl_ctx_set_client_ca(SSL_CTX *ctx, const char *ca_file, int required) {
    if (SSL_CTX_load_verify_locations(ctx, ca_file, NULL) != 1) return 0;
    STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(ca_file);
    if (!names) return 0;
    SSL_CTX_set_client_CA_list(ctx, names);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | (required ? SSL_VERIFY_FAIL_IF_NO_PEER_CERT : 0), NULL);
    SSL_CTX_set_verify_depth(ctx, 8);
    return 1;
}

/// Appends `len` bytes to out (at *at, within cap, always NUL-terminated), printable
/// ASCII as is and every other byte as \xNN.
static void put_escaped(char *out, size_t cap, size_t *at, const unsigned char *p, size_t len) {
    for (size_t i = 0; i < len; i++) {
        unsigned char c = p[i];
        if (c >= 0x20 && c < 0x7F && c != '\\') {
            if (*at + 1 >= cap) break;
            out[(*at)++] = (char)c;
        } else {
            if (*at + 4 >= cap) break;
            snprintf(out + *at, 5, "\\x%02X", c);
            *at += 4;
        }
    }
    out[*at < cap ? *at : cap - 1] = 0;
}

static void put_text(char *out, size_t cap, size_t *at, const char *t) {
    put_escaped(out, cap, at, (const unsigned char *)t, strlen(t));
}

int qw_tls_peer_certificate(SSL *ssl, char *subject, size_t slen, char *sans, size_t sanslen, uint8_t fingerprint[32]) {
    if (slen == 0 || sanslen == 0) return 0;
    subject[0] = 0; sans[0] = 0;
    X509 *cert = SSL_get0_peer_certificate(ssl);
    if (!cert || SSL_get_verify_result(ssl) != X509_V_OK) return 0;
    unsigned int n = 0;
    if (X509_digest(cert, EVP_sha256(), fingerprint, &n) != 1 || n != 32) return 0;
    BIO *bio = BIO_new(BIO_s_mem());
    if (bio) {
        X509_NAME_print_ex(bio, X509_get_subject_name(cert), 0, XN_FLAG_RFC2253);
        char *data = NULL;
        long len = BIO_get_mem_data(bio, &data);
        size_t at = 0;
        if (len > 0) put_escaped(subject, slen, &at, (const unsigned char *)data, (size_t)len);
        BIO_free(bio);
    }
    GENERAL_NAMES *names = X509_get_ext_d2i(cert, NID_subject_alt_name, NULL, NULL);
    size_t at = 0;
    for (int i = 0; names && i < sk_GENERAL_NAME_num(names); i++) {
        const GENERAL_NAME *g = sk_GENERAL_NAME_value(names, i);
        const char *label = NULL;
        const ASN1_STRING *str = NULL;
        switch (g->type) {
        case GEN_DNS: label = "DNS:"; str = g->d.dNSName; break;
        case GEN_EMAIL: label = "email:"; str = g->d.rfc822Name; break;
        case GEN_URI: label = "URI:"; str = g->d.uniformResourceIdentifier; break;
        case GEN_IPADD: label = "IP:"; break;
        default: continue;
        }
        if (at > 0) put_text(sans, sanslen, &at, ", ");
        put_text(sans, sanslen, &at, label);
        if (g->type == GEN_IPADD) {
            const unsigned char *ip = ASN1_STRING_get0_data(g->d.iPAddress);
            int iplen = ASN1_STRING_length(g->d.iPAddress);
            char buf[64];
            if (iplen == 4) {
                snprintf(buf, sizeof buf, "%u.%u.%u.%u", ip[0], ip[1], ip[2], ip[3]);
            } else if (iplen == 16) {
                int o = 0;
                for (int k = 0; k < 16; k += 2) o += snprintf(buf + o, sizeof buf - (size_t)o, k ? ":%x" : "%x", (ip[k] << 8) | ip[k + 1]);
            } else {
                snprintf(buf, sizeof buf, "?");
            }
            put_text(sans, sanslen, &at, buf);
        } else {
            put_escaped(sans, sanslen, &at, ASN1_STRING_get0_data(str), (size_t)ASN1_STRING_length(str));
        }
    }
    GENERAL_NAMES_free(names);
    return 1;
}
