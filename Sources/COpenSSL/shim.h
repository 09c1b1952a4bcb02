#ifndef QUICKWAY_COPENSSL_SHIM_H
#define QUICKWAY_COPENSSL_SHIM_H
#include <openssl/hmac.h>
#include <openssl/sha.h>
#include <openssl/evp.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#endif
