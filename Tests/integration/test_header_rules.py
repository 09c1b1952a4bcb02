"""Route header rules and path rewrites (issue 32; spec/config.md "Added for the next
round": `headers.request` / `headers.response`, remove then set, and `rewrite:
{path_regex, to}`), against the real binary and real backends: what a backend receives
over HTTP/1.1, HTTP/2 and through an https service, and what clients get on a miss, a
cache hit and a merged answer. Expectations from the spec: removed names are gone in any
case, a set name arrives exactly once with the configured value, the query survives a
rewrite, and a rewrite never produces a path the gateway would refuse from a client."""
import json
import os
import ssl
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from harness import ROOT, Backend, BackendHandler, Gateway, free_port, http_call, quickway_binary, wait_until
from test_http2 import H2Client
from test_routing import make_ca_and_cert

sys.path.insert(0, os.path.join(ROOT, "examples"))
import qw1_client  # noqa: E402

CONFIG = """
listen: 127.0.0.1:{PORT}
workers: 2
admin: { listen: 127.0.0.1:{ADMIN} }
services:
  plain: { host: api.internal, port: PLAIN_PORT, ips: [127.0.0.2] }
  secure:
    host: api.internal
    scheme: https
    port: TLS_PORT
    ips: [127.0.0.2]
    tls: { verify: true, ca_file: CA_FILE }
routes:
  - name: rules
    match: { path_prefix: /h/ }
    service: plain
    cache: { ttl: 60s }
    coalesce: true
    headers:
      request: { remove: [X-Debug], set: { X-Api-Version: "2" } }
      response: { remove: [Server, X-Backend], set: { Strict-Transport-Security: "max-age=31536000" } }
  - name: streamed
    match: { path_prefix: /big/ }
    service: plain
    headers:
      response: { remove: [Server], set: { Strict-Transport-Security: "max-age=31536000" } }
  - name: secure
    match: { path_prefix: /s/ }
    service: secure
    rewrite: { path_regex: "^/s/(.*)$", to: "/secure/$1" }
    headers:
      request: { remove: [X-Debug], set: { X-Api-Version: "2" } }
  - name: orders
    match: { path_prefix: /orders/ }
    service: plain
    rewrite: { path_regex: "^/orders/v1/(.*)$", to: "/v1/orders/$1" }
  - name: files
    match: { path_prefix: /files/ }
    service: plain
    rewrite: { path_regex: "^/files/x(.*)$", to: "/v1/$1" }
  - name: pathological
    match: { path_prefix: /cat/ }
    service: plain
    rewrite: { path_regex: "^/cat/(a+)+$", to: "/x/$1" }
  - name: plain
    match: { path_prefix: / }
    service: plain
"""


class RawHeadHandler(BackendHandler):
    """The harness's backend, also keeping each request's header fields as a list (the
    harness keeps a dict, which would hide a second copy)."""

    def handle_any(self):
        with self.server.lock:
            self.server.raw_heads.append((self.path, list(self.headers.items())))
        super().handle_any()

    do_GET = do_POST = do_HEAD = handle_any


def raw_backend(host, port, ssl_context=None):
    b = Backend(host, port, ssl_context=ssl_context)
    b.server.raw_heads = []
    b.server.RequestHandlerClass = RawHeadHandler
    return b


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    pytest.importorskip("cryptography")
    d = str(tmp_path_factory.mktemp("rules"))
    paths = make_ca_and_cert(d, "api.internal")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(paths["cert.pem"], paths["key.pem"])
    plain_port, tls_port = free_port("127.0.0.2"), free_port("127.0.0.2")
    plain, secure = raw_backend("127.0.0.2", plain_port), raw_backend("127.0.0.2", tls_port, ssl_context=ctx)
    g = None
    try:
        g = Gateway(CONFIG.replace("PLAIN_PORT", str(plain_port)).replace("TLS_PORT", str(tls_port))
                    .replace("CA_FILE", paths["ca.pem"]))
        yield g, plain, secure
    finally:
        if g is not None:
            assert g.stop() == 0
        plain.stop()
        secure.stop()


def fields_of(backend, path):
    """The header fields (lower-case name, value) of the last request for `path`."""
    with backend.server.lock:
        heads = [h for p, h in backend.server.raw_heads if p == path]
    assert heads, f"{path} never reached the backend"
    return [(k.lower(), v) for k, v in heads[-1]]


def assert_request_rules(fields):
    assert [v for k, v in fields if k == "x-api-version"] == ["2"], fields
    assert not any(k == "x-debug" for k, _ in fields), fields
    assert ("x-keep", "k") in fields, fields


SENT = {"X-Debug": "1", "x-api-version": "1", "X-Keep": "k"}


# --- request rules -----------------------------------------------------------------

def test_request_rules_reach_the_backend_over_http1(env):
    g, plain, _ = env
    st, _, _ = http_call(g, "GET", "/h/req1", headers=SENT)
    assert st == 200
    assert_request_rules(fields_of(plain, "/h/req1"))


def test_request_rules_reach_the_backend_over_http2(env):
    g, plain, _ = env
    c = H2Client(g)
    try:
        st, _, _ = c.get("/h/req2", headers=[(k.lower(), v) for k, v in SENT.items()])
        assert st == 200
    finally:
        c.close()
    assert_request_rules(fields_of(plain, "/h/req2"))


def test_request_rules_reach_an_https_service(env):
    g, _, secure = env
    st, _, _ = http_call(g, "GET", "/s/req3", headers={**SENT, "X-API-VERSION": "3"})
    assert st == 200
    assert_request_rules(fields_of(secure, "/secure/req3"))


# --- response rules ----------------------------------------------------------------

def assert_response_rules(headers):
    assert "server" not in headers and "x-backend" not in headers, headers
    assert headers.get("strict-transport-security") == "max-age=31536000", headers
    assert headers.get("content-type") == "application/json", headers


def test_the_backend_sends_what_the_rules_remove(env):
    # The rules' effect is visible only if the backend sends these headers at all.
    g, _, _ = env
    st, h, _ = http_call(g, "GET", "/unruled")
    assert st == 200 and "server" in h and "x-backend" in h, h
    assert "strict-transport-security" not in h


def test_response_rules_on_a_miss_and_a_hit_over_both_protocols(env):
    g, plain, _ = env
    st, h, _ = http_call(g, "GET", "/h/resp")
    assert st == 200 and h["x-cache"] == "MISS"
    assert_response_rules(h)
    st, h, _ = http_call(g, "GET", "/h/resp")
    assert st == 200 and h["x-cache"] == "HIT"
    assert_response_rules(h)
    assert plain.path_hits("/h/resp") == 1
    # HTTP/2 (h2c): another authority (api.test), so another cache key; its miss and hit.
    c = H2Client(g)
    try:
        for expected in ("MISS", "HIT"):
            st, h2h, _ = c.get("/h/resp")
            assert st == 200 and h2h["x-cache"] == expected
            assert_response_rules(h2h)
    finally:
        c.close()
    assert plain.path_hits("/h/resp") == 2


def test_response_rules_on_merged_answers(env):
    g, plain, _ = env
    plain.server.delay_ms = 400
    results = []
    try:
        def one():
            results.append(http_call(g, "GET", "/h/merged"))
        threads = [threading.Thread(target=one) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=20)
    finally:
        plain.server.delay_ms = 0
    assert len(results) == 4
    assert plain.path_hits("/h/merged") == 1, "merged into one call"
    assert "COALESCED" in [h["x-cache"] for _, h, _ in results]
    for st, h, _ in results:
        assert st == 200
        assert_response_rules(h)


def test_response_rules_on_a_streamed_answer(env):
    # Larger than cache.max_object_bytes (1 MiB by default): streamed, not stored.
    g, _, _ = env
    st, h, body = http_call(g, "GET", "/big/1500000")
    assert st == 200 and len(body) == 1500000
    assert "server" not in h and h.get("strict-transport-security") == "max-age=31536000", h


# --- rewrites ------------------------------------------------------------------------

def test_the_rewritten_path_is_forwarded_with_the_query(env):
    g, plain, _ = env
    st, _, _ = http_call(g, "GET", "/orders/v1/42/items?page=2&q=a%20b")
    assert st == 200
    assert plain.requests[-1]["path"] == "/v1/orders/42/items?page=2&q=a%20b"
    st, _, _ = http_call(g, "GET", "/orders/v2/7?x=1")
    assert st == 200
    assert plain.requests[-1]["path"] == "/orders/v2/7?x=1", "no match: forwarded as routed"


def test_a_rewrite_to_an_https_service(env):
    g, _, secure = env
    st, _, _ = http_call(g, "GET", "/s/a/b?c=1")
    assert st == 200
    assert secure.requests[-1]["path"] == "/secure/a/b?c=1"


def test_a_rewrite_to_a_dot_segment_is_refused(env):
    g, plain, _ = env
    before = plain.hits
    # `x..` is an ordinary segment for routing; the rewrite would make it `..`.
    st, _, body = http_call(g, "GET", "/files/x../etc/passwd")
    assert st == 400 and b'"bad_request"' in body, body
    assert plain.hits == before, "never forwarded"
    st, _, _ = http_call(g, "GET", "/files/xa/b")
    assert st == 200 and plain.requests[-1]["path"] == "/v1/a/b"


def test_a_pathological_pattern_fails_closed_without_pinning_a_worker(env):
    g, plain, _ = env
    before = plain.hits
    path = "/cat/" + "a" * 4000 + "b"
    t0 = time.monotonic()
    st, _, body = http_call(g, "GET", path)
    took = time.monotonic() - t0
    assert st == 400 and b"limit" in body, body
    assert took < 1.0, f"refused after {took:.2f}s"
    assert plain.hits == before, "not forwarded unrewritten either"
    st, _, _ = http_call(g, "GET", "/cat/aaa")
    assert st == 200 and plain.requests[-1]["path"] == "/x/aaa"


# --- config errors -----------------------------------------------------------------

def check(tmp_path, text):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    return subprocess.run([quickway_binary(), "check", "--config", str(path)], capture_output=True, text=True, timeout=30)


BAD = """listen: 127.0.0.1:18080
services:
  api: { host: api.internal, ips: [127.0.0.2] }
routes:
  - name: r
    match: { path_prefix: /r/ }
    service: api
    rewrite: { path_regex: "^/r/(v1", to: "/x/$2" }
    headers:
      request: { set: { X-Forwarded-For: 1.2.3.4 } }
      response: { remove: [Content-Length] }
"""


def test_config_errors_name_their_path_and_line(tmp_path):
    r = check(tmp_path, BAD)
    assert r.returncode != 0
    out = r.stdout + r.stderr
    assert ":8: routes[0].rewrite.path_regex: not a valid regular expression: missing closing parenthesis at offset 7" in out, out
    assert ":10: routes[0].headers.request.set.X-Forwarded-For:" in out, out
    assert ":11: routes[0].headers.response.remove[0]:" in out, out


# --- reload --------------------------------------------------------------------------

RELOAD_CONFIG = """
listen: 127.0.0.1:{PORT}
workers: 2
admin: { listen: 127.0.0.1:{ADMIN} }
services:
  plain: { host: api.internal, port: PLAIN_PORT, ips: [127.0.0.2] }
routes:
  - name: cached
    match: { path_prefix: / }
    service: plain
    cache: { ttl: 60s }
    headers: { response: { set: { X-Policy: VALUE } } }
"""


def test_a_reload_that_changes_response_rules_applies_to_cached_answers(tmp_path):
    backend = Backend("127.0.0.2", free_port("127.0.0.2"))
    text = RELOAD_CONFIG.replace("PLAIN_PORT", str(backend.server.server_address[1]))
    g = Gateway(text.replace("VALUE", "one"))
    try:
        st, h, _ = http_call(g, "GET", "/doc")
        assert st == 200 and h["x-cache"] == "MISS" and h["x-policy"] == "one"
        new = text.replace("VALUE", "two").replace("{PORT}", str(g.port)).replace("{ADMIN}", str(g.admin_port))
        with open(g.config_path + ".tmp", "w") as f:
            f.write(new)
        os.replace(g.config_path + ".tmp", g.config_path)
        req = urllib.request.Request(f"http://127.0.0.1:{g.admin_port}/reload", data=b"", method="POST")
        with urllib.request.urlopen(req, timeout=10) as r:
            assert r.status == 200, json.loads(r.read())
        # Every worker takes the new snapshot; each answer is a hit of the stored entry.
        seen = []

        def edited_hit():
            st, h, _ = http_call(g, "GET", "/doc")
            seen.append((h["x-cache"], h.get("x-policy")))
            return seen[-1] == ("HIT", "two")
        wait_until(edited_hit, timeout=10, what="the new rule on a cached answer")
        assert all(c == "HIT" for c, _ in seen), seen
        assert backend.path_hits("/doc") == 1, "served from the entry stored before the reload"
    finally:
        assert g.stop() == 0
        backend.stop()


# --- a signed call through a rewrite -------------------------------------------------

SIGNED_CONFIG = """
listen: 127.0.0.1:{PORT}
workers: 1
admin: { listen: 127.0.0.1:{ADMIN} }
auth:
  salt: pepper
  keys: [{ id: app, secret: s3cr3t }]
services:
  plain: { host: api.internal, port: PLAIN_PORT, ips: [127.0.0.2] }
routes:
  - name: signed
    match: { path_prefix: /orders/ }
    service: plain
    auth: required
    rewrite: { path_regex: "^/orders/v1/(.*)$", to: "/v1/orders/$1" }
    headers: { request: { set: { X-Api-Version: "2" } } }
"""


def test_a_signed_call_is_verified_on_its_own_path_and_forwarded_rewritten(tmp_path):
    # spec/signature.md: the signature covers the path the client sent; the query goes
    # upstream in its canonical form. The rewrite changes the path only.
    backend = Backend("127.0.0.2", free_port("127.0.0.2"))
    g = Gateway(SIGNED_CONFIG.replace("PLAIN_PORT", str(backend.server.server_address[1])))
    try:
        target = "/orders/v1/42?b=2&a=1"
        auth = qw1_client.authorization("app", "s3cr3t", "pepper", "GET", target)
        st, _, body = http_call(g, "GET", target, headers={"Authorization": auth})
        assert st == 200, body
        got = backend.requests[-1]
        assert got["path"] == "/v1/orders/42?a=1&b=2", got["path"]
        assert got["headers"].get("X-Quickway-Key") == "app" and "Authorization" not in got["headers"]
        assert got["headers"].get("X-Api-Version") == "2"
        # Signed for the rewritten path instead: refused, the signature is the client's path's.
        auth = qw1_client.authorization("app", "s3cr3t", "pepper", "GET", "/v1/orders/42?a=1&b=2")
        st, _, body = http_call(g, "GET", target, headers={"Authorization": auth})
        assert st == 401 and b"auth_bad_signature" in body, body
    finally:
        assert g.stop() == 0
        backend.stop()
