#!/usr/bin/env python3
"""A QW1 client using only Python's standard library: signs a call as
spec/signature.md describes and sends it through the gateway.

    QW_SECRET=s3cr3t python3 examples/qw1_client.py --key ios-app --salt pepper \
        'http://127.0.0.1:8080/catalog/items?b=2&a=1'

It is written from the spec alone (no code shared with the gateway), so the gateway's
tests also use it as an independent implementation.
"""
import argparse
import hashlib
import hmac
import os
import secrets
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

UNRESERVED = set(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


def _pct_decode(s: bytes) -> bytes:
    out = bytearray()
    i = 0
    while i < len(s):
        if s[i] == 0x25 and i + 2 < len(s) and all(c in b"0123456789abcdefABCDEF" for c in s[i + 1:i + 3]):
            out.append(int(s[i + 1:i + 3], 16))
            i += 3
        else:
            out.append(s[i])
            i += 1
    return bytes(out)


def _pct_encode(s: bytes) -> bytes:
    return b"".join(bytes([c]) if c in UNRESERVED else b"%%%02X" % c for c in s)


def canonical_query(raw: bytes) -> bytes:
    pairs = []
    for piece in raw.split(b"&"):
        if not piece:
            continue
        name, _, value = piece.partition(b"=")
        pairs.append((_pct_encode(_pct_decode(name)), _pct_encode(_pct_decode(value))))
    pairs.sort()
    return b"&".join(n + b"=" + v for n, v in pairs)


def canonical_string(method: str, target: str, timestamp: int, nonce: str, body: bytes) -> bytes:
    raw = target.encode()
    path, _, query = raw.partition(b"?")
    query = query.split(b"#", 1)[0]
    return b"\n".join([
        b"QW1-HMAC-SHA256",
        method.upper().encode(),
        path or b"/",
        canonical_query(query),
        str(timestamp).encode(),
        nonce.encode(),
        hashlib.sha256(body).hexdigest().encode(),
    ])


def authorization(key_id: str, secret: str, salt: str, method: str, target: str, body: bytes = b"",
                  timestamp: int = None, nonce: str = None) -> str:
    timestamp = int(time.time()) if timestamp is None else timestamp
    nonce = nonce or secrets.token_hex(16)
    signing_key = hmac.new(secret.encode(), salt.encode(), hashlib.sha256).digest()
    signature = hmac.new(signing_key, canonical_string(method, target, timestamp, nonce, body), hashlib.sha256).hexdigest()
    return f"QW1-HMAC-SHA256 Key={key_id}, Timestamp={timestamp}, Nonce={nonce}, Signature={signature}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("url")
    ap.add_argument("--key", required=True)
    ap.add_argument("--salt", required=True)
    ap.add_argument("--secret-env", default="QW_SECRET")
    ap.add_argument("--method", default="GET")
    ap.add_argument("--data", default=None, help="request body")
    args = ap.parse_args()
    secret = os.environ.get(args.secret_env)
    if not secret:
        sys.exit(f"set {args.secret_env} to the app's secret")
    parts = urllib.parse.urlsplit(args.url)
    target = parts.path or "/"
    if parts.query:
        # Sent as the canonical query: the gateway forwards exactly that (spec/signature.md),
        # and it refuses repeated names whose values are out of canonical order.
        target += "?" + canonical_query(parts.query.encode()).decode()
    url = urllib.parse.urlunsplit((parts.scheme, parts.netloc, "", "", "")) + target
    body = args.data.encode() if args.data is not None else b""
    auth = authorization(args.key, secret, args.salt, args.method, target, body)
    req = urllib.request.Request(url, data=body if args.data is not None else None, method=args.method.upper(),
                                 headers={"Authorization": auth})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            print(r.status, r.read().decode(errors="replace"))
    except urllib.error.HTTPError as e:
        print(e.code, e.read().decode(errors="replace"))
        sys.exit(1)


if __name__ == "__main__":
    main()
