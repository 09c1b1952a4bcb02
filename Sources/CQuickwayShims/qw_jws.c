#include <stdlib.h>
#include <string.h>
#include <openssl/evp.h>
#include <openssl/core_names.h>
#include <openssl/param_build.h>
#include <openssl/bn.h>
#include <openssl/ec.h>
#include <openssl/rsa.h>
#include <openssl/err.h>
#include "qw_jws.h"

struct qw_jws_key { EVP_PKEY *pkey; int bits; size_t ec_half; };

static qw_jws_key *wrap(EVP_PKEY *p, int bits, size_t half) {
    if (!p) return NULL;
    qw_jws_key *k = malloc(sizeof *k);
    if (!k) { EVP_PKEY_free(p); return NULL; }
    k->pkey = p; k->bits = bits; k->ec_half = half;
    return k;
}

static EVP_PKEY *fromdata(const char *type, OSSL_PARAM_BLD *bld) {
    EVP_PKEY *pkey = NULL;
    OSSL_PARAM *params = OSSL_PARAM_BLD_to_param(bld);
    EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_from_name(NULL, type, NULL);
    if (params && ctx && EVP_PKEY_fromdata_init(ctx) == 1) {
        if (EVP_PKEY_fromdata(ctx, &pkey, EVP_PKEY_PUBLIC_KEY, params) != 1) pkey = NULL;
    }
    EVP_PKEY_CTX_free(ctx);
    OSSL_PARAM_free(params);
    return pkey;
}

/// Checks the public key makes sense (EC: the point is on the curve).
static int check_public(EVP_PKEY *p) {
    EVP_PKEY_CTX *c = EVP_PKEY_CTX_new_from_pkey(NULL, p, NULL);
    int ok = c && EVP_PKEY_public_check(c) == 1;
    EVP_PKEY_CTX_free(c);
    return ok;
}

qw_jws_key *qw_jws_key_rsa(const uint8_t *n, size_t nlen, const uint8_t *e, size_t elen) {
    // Leading zero bytes do not count toward the size.
    while (nlen > 0 && *n == 0) { n++; nlen--; }
    while (elen > 0 && *e == 0) { e++; elen--; }
    if (nlen < 256 || nlen > 1024 || elen == 0 || elen > 8) return NULL;   // 2048 to 8192 bits
    if ((e[elen - 1] & 1) == 0 || (elen == 1 && e[0] < 3)) return NULL;
    BIGNUM *bn = BN_bin2bn(n, (int)nlen, NULL), *be = BN_bin2bn(e, (int)elen, NULL);
    OSSL_PARAM_BLD *bld = OSSL_PARAM_BLD_new();
    EVP_PKEY *p = NULL;
    if (bn && be && bld && OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_N, bn) == 1
        && OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_E, be) == 1) {
        p = fromdata("RSA", bld);
    }
    int bits = BN_num_bits(bn);
    OSSL_PARAM_BLD_free(bld);
    BN_free(bn); BN_free(be);
    ERR_clear_error();
    return wrap(p, bits, 0);
}

qw_jws_key *qw_jws_key_ec(int curve, const uint8_t *x, const uint8_t *y, size_t coordlen) {
    size_t want = curve == 256 ? 32 : curve == 384 ? 48 : 0;
    if (want == 0 || coordlen != want) return NULL;
    uint8_t point[1 + 2 * 48];
    point[0] = 0x04;   // uncompressed
    memcpy(point + 1, x, want);
    memcpy(point + 1 + want, y, want);
    OSSL_PARAM_BLD *bld = OSSL_PARAM_BLD_new();
    EVP_PKEY *p = NULL;
    if (bld && OSSL_PARAM_BLD_push_utf8_string(bld, OSSL_PKEY_PARAM_GROUP_NAME, curve == 256 ? "P-256" : "P-384", 0) == 1
        && OSSL_PARAM_BLD_push_octet_string(bld, OSSL_PKEY_PARAM_PUB_KEY, point, 1 + 2 * want) == 1) {
        p = fromdata("EC", bld);
    }
    OSSL_PARAM_BLD_free(bld);
    if (p && !check_public(p)) { EVP_PKEY_free(p); p = NULL; }
    ERR_clear_error();
    return wrap(p, curve, want);
}

qw_jws_key *qw_jws_key_ed25519(const uint8_t *x, size_t xlen) {
    if (xlen != 32) return NULL;
    EVP_PKEY *p = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, NULL, x, xlen);
    ERR_clear_error();
    return wrap(p, 256, 0);
}

void qw_jws_key_free(qw_jws_key *k) {
    if (!k) return;
    EVP_PKEY_free(k->pkey);
    free(k);
}

int qw_jws_key_bits(const qw_jws_key *k) { return k ? k->bits : 0; }

/// JWS's r||s as a DER ECDSA-Sig-Value; NULL (and 0) when the halves are not in range.
static int raw_to_der(const uint8_t *sig, size_t half, unsigned char **der) {
    BIGNUM *r = BN_bin2bn(sig, (int)half, NULL), *s = BN_bin2bn(sig + half, (int)half, NULL);
    ECDSA_SIG *es = ECDSA_SIG_new();
    int len = 0;
    if (r && s && es && ECDSA_SIG_set0(es, r, s) == 1) {
        r = s = NULL;   // owned by es now
        len = i2d_ECDSA_SIG(es, der);
        if (len <= 0) { len = 0; *der = NULL; }
    }
    BN_free(r); BN_free(s);
    ECDSA_SIG_free(es);
    return len;
}

int qw_jws_verify(const qw_jws_key *k, int scheme, int hash_bits,
                  const uint8_t *msg, size_t mlen, const uint8_t *sig, size_t slen) {
    if (!k || !k->pkey) return 0;
    const EVP_MD *md = NULL;
    if (scheme != QW_JWS_EDDSA) {
        md = hash_bits == 256 ? EVP_sha256() : hash_bits == 384 ? EVP_sha384() : hash_bits == 512 ? EVP_sha512() : NULL;
        if (!md) return 0;
    }
    int type = EVP_PKEY_get_base_id(k->pkey);
    switch (scheme) {
    case QW_JWS_RSA_PKCS1: case QW_JWS_RSA_PSS: if (type != EVP_PKEY_RSA) return 0; break;
    case QW_JWS_ECDSA: if (type != EVP_PKEY_EC) return 0; break;
    case QW_JWS_EDDSA: if (type != EVP_PKEY_ED25519) return 0; break;
    default: return 0;
    }
    unsigned char *der = NULL;
    const uint8_t *s = sig;
    size_t sl = slen;
    if (scheme == QW_JWS_ECDSA) {
        if (slen != 2 * k->ec_half) return 0;
        int n = raw_to_der(sig, k->ec_half, &der);
        if (n <= 0) return 0;
        s = der; sl = (size_t)n;
    }
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    EVP_PKEY_CTX *pctx = NULL;
    int ok = 0;
    if (ctx && EVP_DigestVerifyInit(ctx, &pctx, md, NULL, k->pkey) == 1) {
        int setup = 1;
        if (scheme == QW_JWS_RSA_PSS) {
            // RFC 7518 3.5: MGF1 with the same hash, salt as long as the hash.
            setup = EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PSS_PADDING) == 1
                 && EVP_PKEY_CTX_set_rsa_mgf1_md(pctx, md) == 1
                 && EVP_PKEY_CTX_set_rsa_pss_saltlen(pctx, RSA_PSS_SALTLEN_DIGEST) == 1;
        } else if (scheme == QW_JWS_RSA_PKCS1) {
            setup = EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PADDING) == 1;
        }
        if (setup) ok = EVP_DigestVerify(ctx, s, sl, msg, mlen) == 1;
    }
    EVP_MD_CTX_free(ctx);
    OPENSSL_free(der);
    ERR_clear_error();
    return ok;
}
