#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#include <string.h>
#include <openssl/sha.h>
#include <openssl/crypto.h>
#include "qw_crypto.h"

_Static_assert(sizeof(SHA256_CTX) <= sizeof(qw_sha256_ctx), "qw_sha256_ctx too small");

void qw_sha256_init(qw_sha256_ctx *c) { SHA256_Init((SHA256_CTX *)c); }
void qw_sha256_update(qw_sha256_ctx *c, const void *d, size_t n) { SHA256_Update((SHA256_CTX *)c, d, n); }
void qw_sha256_final(qw_sha256_ctx *c, uint8_t out[32]) { SHA256_Final(out, (SHA256_CTX *)c); }
void qw_sha256(const void *d, size_t n, uint8_t out[32]) { SHA256(d, n, out); }

void qw_hmac_prepare(qw_hmac_key *k, const void *key, size_t keylen) {
    uint8_t block[64], pad[64];
    memset(block, 0, sizeof block);
    if (keylen > 64) SHA256(key, keylen, block); else memcpy(block, key, keylen);
    for (int i = 0; i < 64; i++) pad[i] = block[i] ^ 0x36;
    SHA256_Init((SHA256_CTX *)&k->inner);
    SHA256_Update((SHA256_CTX *)&k->inner, pad, 64);
    for (int i = 0; i < 64; i++) pad[i] = block[i] ^ 0x5c;
    SHA256_Init((SHA256_CTX *)&k->outer);
    SHA256_Update((SHA256_CTX *)&k->outer, pad, 64);
    OPENSSL_cleanse(block, sizeof block);
    OPENSSL_cleanse(pad, sizeof pad);
}

void qw_hmac_sign(const qw_hmac_key *k, const void *msg, size_t len, uint8_t out[32]) {
    SHA256_CTX c;
    uint8_t inner[32];
    memcpy(&c, &k->inner, sizeof c);
    SHA256_Update(&c, msg, len);
    SHA256_Final(inner, &c);
    memcpy(&c, &k->outer, sizeof c);
    SHA256_Update(&c, inner, 32);
    SHA256_Final(out, &c);
}

void qw_hmac_sha256(const void *key, size_t keylen, const void *msg, size_t len, uint8_t out[32]) {
    qw_hmac_key k;
    qw_hmac_prepare(&k, key, keylen);
    qw_hmac_sign(&k, msg, len, out);
    OPENSSL_cleanse(&k, sizeof k);
}

int qw_ct_compare(const void *a, const void *b, size_t len) { return CRYPTO_memcmp(a, b, len); }
