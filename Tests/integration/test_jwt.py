"""Bearer tokens (issue 35; spec/config.md "Added for the next round": `jwt.providers`,
route `auth: jwt` with `jwt: {provider, required_claims}`; spec/admin-and-errors.md: 401
`jwt_missing`, `jwt_invalid`, `jwt_expired`, `jwt_claims` with `WWW-Authenticate: Bearer`).

Tokens are minted by an independent implementation (PyJWT with `cryptography`'s keys),
and the JWKS is served by a real HTTP server on 127.0.0.x (the identity provider),
whose keys the tests rotate and whose endpoint they take down while the gateway runs.
Expectations come from RFC 7515/7518/7519 and RFC 6750, not from the gateway's output."""
import base64
import json
import os
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

from harness import Backend, Gateway, free_port, http_call, wait_until

ISSUER = "https://idp.test/"


class IdP:
    """An identity provider's JWKS endpoint: serves `keys` (public JWKs) at /jwks.json,
    counts fetches, and can be taken down (503)."""

    def __init__(self, host="127.0.0.3"):
        self.keys = []
        self.fetches = 0
        self.down = False
        self.lock = threading.Lock()
        idp = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                with idp.lock:
                    idp.fetches += 1
                    down = idp.down
                    body = json.dumps({"keys": list(idp.keys)}).encode()
                if down:
                    body = b"down"
                self.send_response(503 if down else 200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.port = free_port(host)
        self.host = host
        self.server = ThreadingHTTPServer((host, self.port), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    @property
    def url(self):
        return f"http://{self.host}:{self.port}/jwks.json"

    def set_keys(self, keys):
        with self.lock:
            self.keys = list(keys)

    def count(self):
        with self.lock:
            return self.fetches

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def public_jwk(key, kid):
    """The public JWK of `key`, written by PyJWT (independent of the gateway)."""
    pub = key.public_key()
    if isinstance(pub, rsa.RSAPublicKey):
        d = RSAAlgorithm.to_jwk(pub, as_dict=True)
    elif isinstance(pub, ec.EllipticCurvePublicKey):
        d = ECAlgorithm.to_jwk(pub, as_dict=True)
    else:
        d = OKPAlgorithm.to_jwk(pub, as_dict=True)
    d["kid"] = kid
    d["use"] = "sig"
    return d


KEYS = {
    "rsa1": rsa.generate_private_key(public_exponent=65537, key_size=2048),
    "rsa2": rsa.generate_private_key(public_exponent=65537, key_size=2048),
    "ec256": ec.generate_private_key(ec.SECP256R1()),
    "ec384": ec.generate_private_key(ec.SECP384R1()),
    "ed1": ed25519.Ed25519PrivateKey.generate(),
}
# Which algorithm each test key signs with.
ALGORITHMS = [("RS256", "rsa1"), ("RS384", "rsa1"), ("RS512", "rsa1"), ("PS256", "rsa1"),
              ("ES256", "ec256"), ("ES384", "ec384"), ("EdDSA", "ed1")]


def claims(**over):
    now = int(time.time())
    c = {"iss": ISSUER, "aud": "api", "sub": "user-42", "iat": now, "exp": now + 300,
         "scope": "orders:read profile", "email": "u42@example.com"}
    c.update(over)
    return {k: v for k, v in c.items() if v is not None}


def token(alg="RS256", kid="rsa1", **over):
    return jwt.encode(claims(**over), KEYS[kid], algorithm=alg, headers={"kid": kid})


def b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


CONFIG = """
listen: 127.0.0.1:{PORT}
workers: 2
admin: { listen: 127.0.0.1:{ADMIN} }
jwt:
  providers:
    main:
      issuer: "https://idp.test/"
      audiences: [api, other]
      jwks_url: JWKS_URL
      refresh: 1h
      cache_file: CACHE_FILE
      algorithms: [RS256, RS384, RS512, PS256, ES256, ES384, EdDSA]
      forward_claims: { sub: X-User-Id, email: X-User-Email }
services:
  api: { host: api.internal, port: BACKEND_PORT, ips: [127.0.0.2] }
routes:
  - name: orders
    match: { path_prefix: /orders/ }
    service: api
    auth: jwt
    jwt: { provider: main, required_claims: { scope: "orders:read" } }
    rate_limit:
      - { by: key, rate: 1000/s, burst: 1000 }
  - name: any
    match: { path_prefix: /any/ }
    service: api
    auth: jwt
  - name: open
    match: { path_prefix: / }
    service: api
"""


def start(idp, backend_port, cache_file):
    text = (CONFIG.replace("JWKS_URL", idp.url).replace("BACKEND_PORT", str(backend_port))
            .replace("CACHE_FILE", cache_file))
    return Gateway(text, workers=2)


@pytest.fixture(scope="module")
def env():
    backend = Backend("127.0.0.2", free_port("127.0.0.2"))
    idp = IdP()
    idp.set_keys([public_jwk(KEYS[k], k) for k in ("rsa1", "ec256", "ec384", "ed1")])
    tmp = tempfile.mkdtemp(prefix="qw-jwt-")
    g = start(idp, backend.server.server_address[1], os.path.join(tmp, "jwks-cache.json"))
    try:
        # The first fetch happens on the control loop after start; the cache file is
        # written once its keys are in. (A token sent before would ask for an early
        # fetch, and the next unknown kid would then wait 10 s for its own.)
        wait_until(lambda: os.path.exists(os.path.join(tmp, "jwks-cache.json")), timeout=10, what="the first JWKS fetch")
        wait_until(lambda: call(g, "/orders/1", token())[0] == 200, timeout=10, what="the gateway to have the JWKS")
        yield g, backend, idp, tmp
    finally:
        g.stop()
        idp.stop()
        backend.stop()


def call(g, path, tok=None, headers=None, auth=None):
    h = dict(headers or {})
    if auth is not None:
        h["Authorization"] = auth
    elif tok is not None:
        h["Authorization"] = "Bearer " + tok
    return http_call(g, "GET", path, headers=h)


def last_request(backend, path):
    for r in reversed(backend.requests):
        if r["path"] == path:
            return {k.lower(): v for k, v in r["headers"].items()}
    raise AssertionError(f"the backend never saw {path}")


def error_code(body):
    return json.loads(body)["error"]["code"]


@pytest.mark.parametrize("alg,kid", ALGORITHMS)
def test_every_algorithm_verifies(env, alg, kid):
    g, backend, _, _ = env
    status, _, body = call(g, f"/orders/{alg}", token(alg, kid))
    assert status == 200, body
    seen = last_request(backend, f"/orders/{alg}")
    assert seen["x-user-id"] == "user-42"
    assert seen["x-user-email"] == "u42@example.com"
    # The bearer token is replaced by the verified identity.
    assert "authorization" not in seen
    assert seen["x-quickway-key"] == "user-42"


def test_missing_token_is_401_with_bearer_challenge(env):
    g, *_ = env
    status, headers, body = call(g, "/orders/x")
    assert status == 401 and error_code(body) == "jwt_missing"
    # RFC 6750 3: no error code when the request carried no token.
    assert headers["www-authenticate"] == "Bearer"
    status, headers, body = call(g, "/orders/x", auth="Basic dXNlcjpwYXNz")
    assert status == 401 and error_code(body) == "jwt_missing"


def refused(g, tok, code="jwt_invalid", path="/orders/r"):
    status, headers, body = call(g, path, tok)
    assert status == 401, body
    assert error_code(body) == code, body
    expected = 'Bearer error="insufficient_scope"' if code == "jwt_claims" else 'Bearer error="invalid_token"'
    assert headers["www-authenticate"] == expected
    return json.loads(body)["error"]["message"]


def test_expired_token(env):
    g, *_ = env
    now = int(time.time())
    # Beyond the documented 60 s of skew.
    refused(g, token(exp=now - 120, iat=now - 600), "jwt_expired")
    # Within the skew it still passes (RFC 7519 4.1.4 leeway).
    assert call(g, "/orders/skew", token(exp=now - 10))[0] == 200


def test_token_without_exp_is_refused(env):
    g, *_ = env
    refused(g, token(exp=None), "jwt_expired")


def test_not_yet_valid_and_future_iat(env):
    g, *_ = env
    now = int(time.time())
    refused(g, token(nbf=now + 600))
    refused(g, token(iat=now + 600))


def test_wrong_audience_and_issuer(env):
    g, *_ = env
    refused(g, token(aud="someone-else"))
    refused(g, token(aud=["x", "y"]))
    assert call(g, "/orders/aud-list", token(aud=["x", "other"]))[0] == 200
    refused(g, token(iss="https://evil.test/"))
    refused(g, token(iss=None))


def test_required_claims(env):
    g, *_ = env
    refused(g, token(scope="profile orders:write"), "jwt_claims")
    refused(g, token(scope="orders:readonly"), "jwt_claims")
    # A route without required claims takes the same token.
    assert call(g, "/any/1", token(scope="profile"))[0] == 200


def test_alg_none_refused(env):
    g, *_ = env
    header = b64(json.dumps({"alg": "none", "kid": "rsa1", "typ": "JWT"}).encode())
    payload = b64(json.dumps(claims()).encode())
    refused(g, f"{header}.{payload}.")
    refused(g, f"{header}.{payload}")


def test_alg_confusion_hs256_with_the_rsa_public_key(env):
    """The classic attack: HS256 "signed" with the RSA public key's PEM as the secret."""
    g, *_ = env
    pem = KEYS["rsa1"].public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    header = b64(json.dumps({"alg": "HS256", "kid": "rsa1", "typ": "JWT"}).encode())
    payload = b64(json.dumps(claims()).encode())
    import hashlib
    import hmac
    sig = b64(hmac.new(pem, f"{header}.{payload}".encode(), hashlib.sha256).digest())
    message = refused(g, f"{header}.{payload}.{sig}")
    assert "HS256" in message


def test_key_type_must_fit_the_algorithm(env):
    """An ES256 token naming the RSA key's kid (and the reverse) is refused."""
    g, *_ = env
    t = jwt.encode(claims(), KEYS["ec256"], algorithm="ES256", headers={"kid": "rsa1"})
    refused(g, t)
    t = jwt.encode(claims(), KEYS["rsa1"], algorithm="RS256", headers={"kid": "ec256"})
    refused(g, t)


def test_unknown_kid(env):
    g, *_ = env
    t = jwt.encode(claims(), KEYS["rsa2"], algorithm="RS256", headers={"kid": "never-published"})
    refused(g, t)


def test_tampered_payload(env):
    g, *_ = env
    h, p, s = token().split(".")
    forged = json.loads(base64.urlsafe_b64decode(p + "=" * (-len(p) % 4)))
    forged["sub"] = "admin"
    refused(g, f"{h}.{b64(json.dumps(forged).encode())}.{s}")
    # A signature of another token.
    other = token(sub="someone").split(".")[2]
    refused(g, f"{h}.{p}.{other}")


def test_bad_base64url(env):
    g, *_ = env
    h, p, s = token().split(".")
    refused(g, f"{h}=.{p}.{s}")                 # padding
    refused(g, f"{h}.{p}.{s.replace('-', '+').replace('_', '/')}" if ("-" in s or "_" in s) else f"{h}.{p}.{s}+")
    refused(g, f"{h}.{p}!.{s}")
    refused(g, f"{h}.{p}.{s}.extra")            # not three parts (a JWE has five)
    # Trailing bits set: the same bytes spelled another way.
    last = s[-1]
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    if len(s) % 4 in (2, 3):
        twin = alphabet[alphabet.index(last) | 1]
        if twin != last:
            refused(g, f"{h}.{p}.{s[:-1]}{twin}")


def test_oversized_header(env):
    g, *_ = env
    t = jwt.encode(claims(), KEYS["rsa1"], algorithm="RS256", headers={"kid": "rsa1", "x": "a" * 2000})
    message = refused(g, t)
    assert "header" in message


def test_duplicate_claim_names_refused(env):
    """RFC 7515 4 / RFC 7519 4: duplicate member names must be rejected (or the last
    used); two readers picking different copies is what this prevents."""
    g, *_ = env
    header = b64(json.dumps({"alg": "RS256", "kid": "rsa1"}).encode())
    body = json.dumps(claims())[:-1] + ', "sub": "admin"}'
    payload = b64(body.encode())
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding
    sig = KEYS["rsa1"].sign(f"{header}.{payload}".encode(), padding.PKCS1v15(), hashes.SHA256())
    refused(g, f"{header}.{payload}.{b64(sig)}")


def test_client_copies_of_claim_headers_are_dropped(env):
    g, backend, *_ = env
    status, _, _ = call(g, "/orders/spoof", token(), headers={"X-User-Id": "admin", "X-User-Email": "boss@example.com",
                                                              "X-Quickway-Key": "admin"})
    assert status == 200
    seen = last_request(backend, "/orders/spoof")
    assert seen["x-user-id"] == "user-42" and seen["x-user-email"] == "u42@example.com"
    # A token without an email: the client's copy is still dropped.
    call(g, "/orders/noemail", token(email=None), headers={"X-User-Email": "boss@example.com"})
    assert "x-user-email" not in last_request(backend, "/orders/noemail")
    # On a route without auth too: nobody but the gateway writes these.
    assert call(g, "/open-spoof", headers={"X-User-Id": "admin"})[0] == 200
    assert "x-user-id" not in last_request(backend, "/open-spoof")


def test_claim_with_control_bytes_is_not_forwarded(env):
    g, backend, *_ = env
    status, _, body = call(g, "/orders/crlf", token(email="a@b\r\nX-Admin: 1"))
    assert status == 401 and error_code(body) == "jwt_claims"


def test_sub_is_the_rate_limit_key(env):
    """Each sub has its own allowance on `by: key`; /stats shows the key as sub."""
    g, *_ = env
    assert call(g, "/orders/k", token(sub="alice"))[0] == 200
    assert call(g, "/orders/k", token(sub="bob"))[0] == 200


def test_jwks_cache_file_kept(env):
    _, _, _, tmp = env
    path = os.path.join(tmp, "jwks-cache.json")
    wait_until(lambda: os.path.exists(path), timeout=5, what="the JWKS cache file")
    kids = {k["kid"] for k in json.load(open(path))["keys"]}
    assert "rsa1" in kids


def test_key_rotation_while_traffic_runs_and_idp_down():
    """The IdP adds rsa2 and later drops rsa1 while clients keep calling: tokens with the
    new kid work after one early fetch (long before `refresh`), a flood of made-up kids
    costs at most one fetch per 10 s, and with the IdP down the keys stay, also across a
    restart (cache_file)."""
    backend = Backend("127.0.0.2", free_port("127.0.0.2"))
    idp = IdP()
    idp.set_keys([public_jwk(KEYS["rsa1"], "rsa1")])
    tmp = tempfile.mkdtemp(prefix="qw-jwt-rot-")
    cache = os.path.join(tmp, "jwks-cache.json")
    g = start(idp, backend.server.server_address[1], cache)
    try:
        old = token("RS256", "rsa1")
        # Keys in before the first token (see the env fixture).
        wait_until(lambda: os.path.exists(cache), timeout=10, what="the first JWKS fetch")
        assert call(g, "/orders/a", old)[0] == 200
        stop = threading.Event()
        failures = []

        def traffic():
            deadline = time.monotonic() + 30
            while not stop.is_set() and time.monotonic() < deadline:
                s, _, b = call(g, "/orders/t", old)
                if s != 200:
                    failures.append((s, b))
        t = threading.Thread(target=traffic, daemon=True)
        t.start()
        # Rotation: the new key is published; a token naming it triggers one early fetch.
        idp.set_keys([public_jwk(KEYS["rsa1"], "rsa1"), public_jwk(KEYS["rsa2"], "rsa2")])
        new = token("RS256", "rsa2")
        wait_until(lambda: call(g, "/orders/b", new)[0] == 200, timeout=5, what="the rotated-in key")
        # A flood of made-up kids within 10 s of that fetch: no fetch at all.
        before = idp.count()
        for i in range(200):
            fake = jwt.encode(claims(), KEYS["rsa2"], algorithm="RS256", headers={"kid": f"made-up-{i}"})
            assert call(g, "/orders/f", fake)[0] == 401
        assert idp.count() - before <= 1
        stop.set()
        t.join(10)
        assert not failures, failures[:3]
        # The IdP goes down: the keys survive failed fetches (an unknown kid asks again
        # after 10 s; the refresh also fails), and the gateway keeps verifying.
        idp.down = True
        assert call(g, "/orders/c", old)[0] == 200
        assert call(g, "/orders/c", new)[0] == 200
        # A restart while the IdP is down starts with the last good keys (cache_file).
        g.stop()
        g = start(idp, backend.server.server_address[1], cache)
        # Its first fetch fails (503): the keys from the cache file stay.
        wait_until(lambda: "keeping the last good keys" in g.logs(), timeout=10, what="the failed fetch")
        assert call(g, "/orders/d", new)[0] == 200
        assert call(g, "/orders/d", old)[0] == 200
        # The IdP comes back without rsa1: after the next (early) fetch rsa1 stops working.
        idp.down = False
        idp.set_keys([public_jwk(KEYS["rsa2"], "rsa2")])
        fresh = jwt.encode(claims(), KEYS["rsa2"], algorithm="RS256", headers={"kid": "rsa3-not-yet"})
        call(g, "/orders/e", fresh)   # an unknown kid: one early fetch (the first since start)
        wait_until(lambda: call(g, "/orders/e", old)[0] == 401, timeout=5, what="the removed key to stop working")
        assert call(g, "/orders/e", new)[0] == 200
    finally:
        g.stop()
        idp.stop()
        backend.stop()
