#ifndef QUICKWAY_QW_CRYPTO_H
#define QUICKWAY_QW_CRYPTO_H
// SHA-256 and HMAC-SHA256 on OpenSSL's low-level SHA-256, with HMAC keys prepared once:
// the inner and outer padded states are kept, so signing a message costs two
// SHA-256 passes over it plus two block finishes, with no per-call allocation or
// algorithm fetch (OpenSSL 3's one-shot HMAC() fetches on every call).
#include <stddef.h>
#include <stdint.h>

typedef struct { unsigned char state[112]; } qw_sha256_ctx;          // holds a SHA256_CTX
typedef struct { qw_sha256_ctx inner; qw_sha256_ctx outer; } qw_hmac_key;

void qw_sha256_init(qw_sha256_ctx *c);
void qw_sha256_update(qw_sha256_ctx *c, const void *data, size_t len);
void qw_sha256_final(qw_sha256_ctx *c, uint8_t out[32]);
void qw_sha256(const void *data, size_t len, uint8_t out[32]);

void qw_hmac_prepare(qw_hmac_key *k, const void *key, size_t keylen);
void qw_hmac_sign(const qw_hmac_key *k, const void *msg, size_t len, uint8_t out[32]);
/* Wipes a prepared key (its padded states sign as the key does). */
void qw_hmac_key_wipe(qw_hmac_key *k);
// 1 when `sent` (64 bytes) is the lower-case hex of the HMAC of `msg`, else 0; the
// comparison takes the same time wherever the first difference is.
int qw_hmac_verify_hex(const qw_hmac_key *k, const void *msg, size_t len, const uint8_t sent[64]);
void qw_hmac_sha256(const void *key, size_t keylen, const void *msg, size_t len, uint8_t out[32]);

// Constant-time comparison (OpenSSL's CRYPTO_memcmp): 0 when equal.
int qw_ct_compare(const void *a, const void *b, size_t len);
#endif
