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

static inline void put_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}

/* HMAC from the prepared states, block by block: the message's whole blocks go to
 * SHA256_Transform straight from where they lie, the last one is padded here (FIPS 180-4
 * 5.1.1: 0x80, zeros, the bit length of ipad block + message), and the outer hash is a
 * single block (the 32-byte inner digest, padded, length (64 + 32) * 8 = 768 bits): no
 * SHA256_Update/Final bookkeeping, no copy of the message, no cleanse of a data buffer
 * that holds only the (public) message. */
void qw_hmac_sign(const qw_hmac_key *k, const void *msg, size_t len, uint8_t out[32]) {
    SHA256_CTX c;
    uint8_t block[64];
    const uint8_t *p = msg;
    size_t left = len;
    memcpy(&c, &k->inner, sizeof c);
    for (; left >= 64; left -= 64, p += 64) SHA256_Transform(&c, p);
    if (left) memcpy(block, p, left);
    block[left++] = 0x80;
    if (left > 56) {
        memset(block + left, 0, 64 - left);
        SHA256_Transform(&c, block);
        left = 0;
    }
    memset(block + left, 0, 56 - left);
    uint64_t bits = ((uint64_t)len + 64) * 8;
    put_be32(block + 56, (uint32_t)(bits >> 32));
    put_be32(block + 60, (uint32_t)bits);
    SHA256_Transform(&c, block);
    for (int i = 0; i < 8; i++) put_be32(block + 4 * i, c.h[i]);
    block[32] = 0x80;
    memset(block + 33, 0, 64 - 33 - 2);
    block[62] = (768 >> 8) & 0xff;
    block[63] = 768 & 0xff;
    memcpy(&c, &k->outer, sizeof c);
    SHA256_Transform(&c, block);
    for (int i = 0; i < 8; i++) put_be32(out + 4 * i, c.h[i]);
}

int qw_hmac_verify_hex(const qw_hmac_key *k, const void *msg, size_t len, const uint8_t sent[64]) {
    static const char digits[16] = "0123456789abcdef";
    uint8_t mac[32], hex[64];
    qw_hmac_sign(k, msg, len, mac);
    for (int i = 0; i < 32; i++) {
        hex[2 * i] = (uint8_t)digits[mac[i] >> 4];
        hex[2 * i + 1] = (uint8_t)digits[mac[i] & 15];
    }
    /* Eight words XORed and ORed together: no branch on the data; the empty asm keeps the
     * compiler from turning the loop into an early exit. */
    uint64_t diff = 0;
    for (int i = 0; i < 8; i++) {
        uint64_t a, b;
        memcpy(&a, hex + 8 * i, 8);
        memcpy(&b, sent + 8 * i, 8);
        diff |= a ^ b;
        __asm__ volatile("" : "+r"(diff));
    }
    return diff == 0;
}

void qw_hmac_sha256(const void *key, size_t keylen, const void *msg, size_t len, uint8_t out[32]) {
    qw_hmac_key k;
    qw_hmac_prepare(&k, key, keylen);
    qw_hmac_sign(&k, msg, len, out);
    OPENSSL_cleanse(&k, sizeof k);
}

int qw_ct_compare(const void *a, const void *b, size_t len) { return CRYPTO_memcmp(a, b, len); }
