#ifndef QUICKWAY_QW_JWS_H
#define QUICKWAY_QW_JWS_H
// Public keys from a JWKS (RFC 7517/7518) and JWS signature checks (RFC 7515/7518,
// RFC 8037), on OpenSSL 3's EVP API. The keys are built from their raw parts with
// EVP_PKEY_fromdata (RSA n/e, EC P-256/P-384 x/y) or EVP_PKEY_new_raw_public_key
// (Ed25519); the key object is opaque to Swift and freed with qw_jws_key_free.
#include <stddef.h>
#include <stdint.h>

typedef struct qw_jws_key qw_jws_key;

// NULL when the parts do not make a valid public key (a point off the curve, a modulus
// under 2048 bits, an even or tiny exponent).
qw_jws_key *qw_jws_key_rsa(const uint8_t *n, size_t nlen, const uint8_t *e, size_t elen);
// `curve`: 256 (P-256) or 384 (P-384); x and y are each `coordlen` bytes.
qw_jws_key *qw_jws_key_ec(int curve, const uint8_t *x, const uint8_t *y, size_t coordlen);
qw_jws_key *qw_jws_key_ed25519(const uint8_t *x, size_t xlen);
void qw_jws_key_free(qw_jws_key *k);
// The RSA modulus in bits (0 for other keys).
int qw_jws_key_bits(const qw_jws_key *k);

enum { QW_JWS_RSA_PKCS1 = 0, QW_JWS_RSA_PSS = 1, QW_JWS_ECDSA = 2, QW_JWS_EDDSA = 3 };
// 1 when `sig` is a valid signature of `msg` under `k`. `hash_bits`: 256, 384 or 512
// (ignored for EdDSA). ECDSA signatures are JWS's raw r||s (each half the curve's size),
// converted to DER for OpenSSL here; any other length is refused.
int qw_jws_verify(const qw_jws_key *k, int scheme, int hash_bits,
                  const uint8_t *msg, size_t mlen, const uint8_t *sig, size_t slen);
#endif
