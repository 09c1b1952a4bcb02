"""Integration tests of signed calls (issue: signed calls).

Requests are signed by examples/qw1_client.py, a client written from spec/signature.md
with Python's hmac module (independent of the gateway's code), and for SigV4 by
botocore's SigV4Auth. They go through the real binary to real backends.
"""
import http.client
import json
import os
import sys
import time

import pytest

from harness import ROOT, Backend, Gateway, free_port, http_call

sys.path.insert(0, os.path.join(ROOT, "examples"))
import qw1_client  # noqa: E402

SALT = "pepper"
IOS_SECRET = "ios-secret-from-env"
ANDROID_SECRET = "android-secret"

CONFIG = """
listen: 127.0.0.1:{PORT}
workers: 2
admin: { listen: 127.0.0.1:{ADMIN} }
auth:
  salt: pepper
  max_skew: 300s
  nonce_ttl: 600s
  keys:
    - id: ios-app
      secret_env: QW_TEST_SECRET_IOS
    - id: android-app
      secret: android-secret
    - id: old-app
      secret: old-secret
      disabled: true
services:
  api: { host: api.internal, port: BACKEND_PORT, ips: [127.0.0.2] }
routes:
  - name: signed
    match: { path_prefix: /signed/ }
    service: api
  - name: optional
    match: { path_prefix: /opt/ }
    service: api
    auth: optional
  - name: open
    match: { path_prefix: /open/ }
    service: api
    auth: off
"""


@pytest.fixture(scope="module")
def backend():
    b = Backend("127.0.0.2", free_port("127.0.0.2"))
    yield b
    b.stop()


@pytest.fixture(scope="module")
def gw(backend):
    port = backend.server.server_address[1]
    g = Gateway(CONFIG.replace("BACKEND_PORT", str(port)), env={"QW_TEST_SECRET_IOS": IOS_SECRET})
    yield g
    assert g.stop() == 0, g.logs()


def send(gw, method, target, headers=None, body=None):
    return http_call(gw, method, target, headers, body)


def signed(key, secret, method, target, body=b"", **kw):
    return {"Authorization": qw1_client.authorization(key, secret, SALT, method, target, body, **kw)}


def ios(method, target, body=b"", **kw):
    return signed("ios-app", IOS_SECRET, method, target, body, **kw)


def code(body):
    return json.loads(body)["error"]["code"]


def test_signed_call_accepted_end_to_end(gw, backend):
    st, h, body = send(gw, "GET", "/signed/items?b=2&a=1", ios("GET", "/signed/items?b=2&a=1"))
    assert st == 200, body
    up = json.loads(body)["headers"]
    assert up["X-Quickway-Key"] == "ios-app"
    assert "Authorization" not in up


def test_signed_post_with_body_and_chunked_body(gw):
    payload = b'{"order": 42, "items": [1, 2, 3]}'
    st, _, body = send(gw, "POST", "/signed/orders", ios("POST", "/signed/orders", payload), payload)
    assert st == 200 and json.loads(body)["body"].encode() == payload
    # A chunked body is hashed as decoded, the way it was signed.
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=10)
    conn.putrequest("PUT", "/signed/chunked")
    for k, v in ios("PUT", "/signed/chunked", b"hello world").items():
        conn.putheader(k, v)
    conn.putheader("Transfer-Encoding", "chunked")
    conn.endheaders()
    conn.send(b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
    r = conn.getresponse()
    assert r.status == 200 and json.loads(r.read())["body"] == "hello world"
    conn.close()


def test_query_order_does_not_matter(gw):
    # The order of names does not; the values of a repeated name must come in canonical
    # order (spec/signature.md, changed in attack round 3), else 400.
    st, _, _ = send(gw, "GET", "/signed/q?b=2&a=0&a=1", ios("GET", "/signed/q?a=0&a=1&b=2"))
    assert st == 200
    st, _, _ = send(gw, "GET", "/signed/q?b=2&a=1&a=0", ios("GET", "/signed/q?a=0&a=1&b=2"))
    assert st == 400


def test_each_rejection_code_and_nothing_reaches_backend(gw, backend):
    now = int(time.time())
    sig = "a" * 64
    cases = [
        ("auth_missing", {}),
        ("auth_missing", {"Authorization": "Bearer abc"}),
        ("auth_malformed", {"Authorization": "QW1-HMAC-SHA256 Key=ios-app, Timestamp=1"}),
        ("auth_malformed", {"Authorization": f"QW1-HMAC-SHA256 Key=ios-app, Timestamp={now}, Nonce=bad!nonce, Signature={sig}"}),
        ("auth_unknown_key", signed("nobody", "x", "GET", "/signed/x")),
        ("auth_unknown_key", signed("old-app", "old-secret", "GET", "/signed/x")),
        ("auth_expired", ios("GET", "/signed/x", timestamp=now - 400)),
        ("auth_bad_signature", signed("ios-app", "wrong-secret", "GET", "/signed/x")),
    ]
    before_hits = backend.hits
    before = gw.stats()["auth"]["rejected"]
    for expected, headers in cases:
        st, h, body = send(gw, "GET", "/signed/x", headers)
        assert st == 401, (expected, body)
        assert code(body) == expected
        assert h["www-authenticate"] == "QW1-HMAC-SHA256"
        assert h["content-type"] == "application/json"
    assert backend.hits == before_hits, "a rejected request reached the backend"
    after = gw.stats()["auth"]["rejected"]
    assert after["auth_missing"] - before["auth_missing"] == 2
    assert after["auth_unknown_key"] - before["auth_unknown_key"] == 2
    assert after["auth_bad_signature"] - before["auth_bad_signature"] == 1


def test_replay_rejected_and_same_nonce_under_another_key_accepted(gw, backend):
    nonce = "replay-nonce-0001"
    h = ios("GET", "/signed/r", nonce=nonce)
    assert send(gw, "GET", "/signed/r", h)[0] == 200
    hits = backend.hits
    st, _, body = send(gw, "GET", "/signed/r", h)
    assert st == 401 and code(body) == "auth_replayed"
    assert backend.hits == hits
    other = signed("android-app", ANDROID_SECRET, "GET", "/signed/r", nonce=nonce)
    assert send(gw, "GET", "/signed/r", other)[0] == 200
    # A bad signature does not burn the nonce.
    fresh = "never-used-nonce-1"
    bad = signed("ios-app", "wrong", "GET", "/signed/r", nonce=fresh)
    assert code(send(gw, "GET", "/signed/r", bad)[2]) == "auth_bad_signature"
    assert send(gw, "GET", "/signed/r", ios("GET", "/signed/r", nonce=fresh))[0] == 200


def test_skew_window_edges(gw):
    now = int(time.time())
    for offset, ok in ((-290, True), (290, True), (-310, False), (310, False)):
        st, _, body = send(gw, "GET", "/signed/t", ios("GET", "/signed/t", timestamp=now + offset))
        assert (st == 200) == ok, (offset, body)
        if not ok:
            assert code(body) == "auth_expired"


def test_tampered_parts_rejected(gw, backend):
    payload = b"amount=10"
    hits = backend.hits
    good = ios("POST", "/signed/pay?to=alice", payload)
    for method, target, body in (("POST", "/signed/pay?to=alice", b"amount=99"),
                                 ("POST", "/signed/pay?to=mallory", payload),
                                 ("POST", "/signed/PAY?to=alice", payload),
                                 ("PUT", "/signed/pay?to=alice", payload)):
        st, _, b = send(gw, method, target, good, body)
        assert st == 401 and code(b) == "auth_bad_signature", (method, target, body)
    assert backend.hits == hits
    assert send(gw, "POST", "/signed/pay?to=alice", good, payload)[0] == 200


def test_optional_and_open_routes(gw):
    st, _, body = send(gw, "GET", "/opt/a")
    assert st == 200 and "X-Quickway-Key" not in json.loads(body)["headers"]
    st, _, body = send(gw, "GET", "/opt/b", ios("GET", "/opt/b"))
    assert st == 200 and json.loads(body)["headers"]["X-Quickway-Key"] == "ios-app"
    st, _, body = send(gw, "GET", "/opt/c", signed("ios-app", "wrong", "GET", "/opt/c"))
    assert st == 401 and code(body) == "auth_bad_signature"
    # Another scheme on an optional route passes through untouched.
    st, _, body = send(gw, "GET", "/opt/d", {"Authorization": "Bearer t0ken"})
    assert st == 200 and json.loads(body)["headers"]["Authorization"] == "Bearer t0ken"
    # Nobody can claim a key by sending the header themselves.
    st, _, body = send(gw, "GET", "/open/e", {"X-Quickway-Key": "ios-app"})
    assert st == 200 and "X-Quickway-Key" not in json.loads(body)["headers"]
    st, _, body = send(gw, "GET", "/opt/f", {"X-Quickway-Key": "ios-app"})
    assert "X-Quickway-Key" not in json.loads(body)["headers"]


def test_stats_count_accepted(gw):
    before = gw.stats()["auth"]["accepted"]
    assert send(gw, "GET", "/signed/s", ios("GET", "/signed/s"))[0] == 200
    assert gw.stats()["auth"]["accepted"] == before + 1


def test_quickway_sign_agrees_with_independent_client():
    import subprocess
    from harness import quickway_binary
    out = subprocess.run([quickway_binary(), "sign", "--key", "ios-app", "--secret-env", "S", "--salt", "pepper",
                          "--method", "GET", "--url", "http://h/v1/items?b=2&a=0&a=1&q=hello%20world%2Bx",
                          "--timestamp", "1700000000", "--nonce", "n0nce-0001"],
                         capture_output=True, text=True, timeout=10, env={**os.environ, "S": "s3cr3t"})
    assert out.returncode == 0, out.stderr
    expected = qw1_client.authorization("ios-app", "s3cr3t", "pepper", "GET", "/v1/items?b=2&a=0&a=1&q=hello%20world%2Bx",
                                        timestamp=1700000000, nonce="n0nce-0001")
    assert out.stdout.strip() == expected
    assert expected.endswith("Signature=9facda8942d0fe7f74d4a8dbeb58a33ed2b9bd37d142c646f9738e83178d7c2b")
    out = subprocess.run([quickway_binary(), "sign", "--key", "ios-app", "--secret-env", "S", "--salt", "pepper",
                          "--url", "http://127.0.0.1:1/x", "--curl"], capture_output=True, text=True, timeout=10,
                         env={**os.environ, "S": "s3cr3t"})
    assert out.stdout.startswith("curl -sS -X GET -H 'Authorization: QW1-HMAC-SHA256 Key=ios-app, Timestamp=")
    assert out.stdout.strip().endswith("'http://127.0.0.1:1/x'")
    # What the gateway would refuse (400) is refused by the signer with the same words,
    # not signed (issue 30: it signed a raw + the gateway then refused).
    for url, words in (("http://h/x?a=1+2", "a raw + in the query of a signed call is ambiguous"),
                       ("http://h/x?to=b&to=a", "values of a repeated name in canonical order")):
        out = subprocess.run([quickway_binary(), "sign", "--key", "ios-app", "--secret-env", "S", "--salt", "pepper", "--url", url],
                             capture_output=True, text=True, timeout=10, env={**os.environ, "S": "s3cr3t"})
        assert out.returncode == 2 and words in out.stderr and out.stdout == "", (url, out)


SIGV4_CONFIG = """
listen: 127.0.0.1:{PORT}
workers: 1
admin: { listen: 127.0.0.1:{ADMIN} }
auth:
  scheme: aws-sigv4
  region: eu-west-1
  service: execute-api
  keys:
    - id: AKIDQUICKWAYTEST
      secret: qw-sigv4-secret
services:
  api: { host: api.internal, port: BACKEND_PORT, ips: [127.0.0.2] }
routes:
  - name: signed
    match: { path_prefix: / }
    service: api
"""


def test_sigv4_request_signed_by_botocore(backend):
    pytest.importorskip("botocore")
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    port = backend.server.server_address[1]
    g = Gateway(SIGV4_CONFIG.replace("BACKEND_PORT", str(port)))
    try:
        def sign(method, path, body=b"", creds=Credentials("AKIDQUICKWAYTEST", "qw-sigv4-secret")):
            req = AWSRequest(method=method, url=f"http://127.0.0.1:{g.port}{path}", data=body)
            SigV4Auth(creds, "execute-api", "eu-west-1").add_auth(req)
            return dict(req.headers.items())

        h = sign("POST", "/orders?b=2&a=1", b'{"n": 1}')
        st, _, body = send(g, "POST", "/orders?b=2&a=1", h, b'{"n": 1}')
        assert st == 200, body
        up = json.loads(body)["headers"]
        assert up["X-Quickway-Key"] == "AKIDQUICKWAYTEST" and "Authorization" not in up
        # The same signed request again is a replay.
        st, _, body = send(g, "POST", "/orders?b=2&a=1", h, b'{"n": 1}')
        assert st == 401 and code(body) == "auth_replayed"
        # Changed body, wrong secret, unknown key.
        h2 = sign("POST", "/orders", b"original")
        st, _, body = send(g, "POST", "/orders", h2, b"tampered")
        assert st == 401 and code(body) == "auth_bad_signature"
        h3 = sign("GET", "/x", creds=Credentials("AKIDQUICKWAYTEST", "wrong"))
        assert code(send(g, "GET", "/x", h3)[2]) == "auth_bad_signature"
        h4 = sign("GET", "/x", creds=Credentials("AKIDUNKNOWN", "x"))
        assert code(send(g, "GET", "/x", h4)[2]) == "auth_unknown_key"
        assert code(send(g, "GET", "/x")[2]) == "auth_missing"
        st, h, body = send(g, "GET", "/x")
        assert h["www-authenticate"] == "AWS4-HMAC-SHA256"
    finally:
        assert g.stop() == 0, g.logs()
