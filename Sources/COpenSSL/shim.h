#ifndef QUICKWAY_COPENSSL_SHIM_H
#define QUICKWAY_COPENSSL_SHIM_H
#include <openssl/hmac.h>
#include <openssl/sha.h>
#include <openssl/evp.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>
#endif
