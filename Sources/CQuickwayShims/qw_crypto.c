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

/* The message through a copy of the inner state, then the inner digest through a copy of
 * the outer one. (Measured against building the padding here and hashing whole blocks
 * with SHA256_Update/SHA256_Transform: SHA256_Update over the message and SHA256_Final
 * were cheaper, both under callgrind, where OpenSSL takes its AVX2 path, and natively
 * with SHA-NI: 240 against 270 ns for a 134-byte canonical string.) */
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

int qw_hmac_verify_hex(const qw_hmac_key *k, const void *msg, size_t len, const uint8_t sent[64]) {
    uint8_t mac[32], hex[64];
    qw_hmac_sign(k, msg, len, mac);
    /* Hex by arithmetic, not a table lookup indexed by the expected MAC: 0-9 -> '0'-'9',
     * 10-15 -> 'a'-'f' ((9 - n) >> 8 is all ones exactly when n > 9). */
    for (int i = 0; i < 32; i++) {
        int hi = mac[i] >> 4, lo = mac[i] & 15;
        hex[2 * i] = (uint8_t)(hi + '0' + (((9 - hi) >> 8) & ('a' - '0' - 10)));
        hex[2 * i + 1] = (uint8_t)(lo + '0' + (((9 - lo) >> 8) & ('a' - '0' - 10)));
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
    /* The MAC is a valid signature for this exact request: not left on the stack. */
    OPENSSL_cleanse(mac, sizeof mac);
    OPENSSL_cleanse(hex, sizeof hex);
    return diff == 0;
}

void qw_hmac_key_wipe(qw_hmac_key *k) { OPENSSL_cleanse(k, sizeof *k); }

void qw_hmac_sha256(const void *key, size_t keylen, const void *msg, size_t len, uint8_t out[32]) {
    qw_hmac_key k;
    qw_hmac_prepare(&k, key, keylen);
    qw_hmac_sign(&k, msg, len, out);
    OPENSSL_cleanse(&k, sizeof k);
}

int qw_ct_compare(const void *a, const void *b, size_t len) { return CRYPTO_memcmp(a, b, len); }
