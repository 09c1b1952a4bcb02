"""Request integrity (issue 12): one request is routed, verified, cached and forwarded
the same way, and no answer reaches a caller it was not made for.

Each test is an attack from the review, against the real binary: ordinary backends
(Python's wsgiref, which decodes paths and reads `X_Foo` as `X-Foo` like CGI/WSGI
servers do; the harness's http.server; a scripted raw keep-alive server) and requests
signed by examples/qw1_client.py (written from spec/signature.md, independent of the
gateway). Every test failed against the code before the fix.
"""
import json
import os
import socket
import sys
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import pytest

from harness import ROOT, Backend, Gateway, free_port, http_call, raw_exchange, wait_until

sys.path.insert(0, os.path.join(ROOT, "examples"))
import qw1_client  # noqa: E402

SALT = "pepper"
SECRETS = {"app-a": "secret-a", "app-b": "secret-b"}


def signed(key, method, target, body=b""):
    return {"Authorization": qw1_client.authorization(key, SECRETS[key], SALT, method, target, body)}


def code(body):
    return json.loads(body)["error"]["code"]


# --- a WSGI backend: what a CGI/WSGI application sees ------------------------------

class _QuietHandler(WSGIRequestHandler):
    def log_message(self, *args):
        pass


class WSGIBackend:
    """wsgiref's server: PATH_INFO is percent-decoded, and header `X_Foo` arrives as
    `HTTP_X_FOO`, the same key as `X-Foo` (PEP 3333 / CGI)."""

    def __init__(self, host):
        self.seen = []

        def app(environ, start_response):
            self.seen.append({"path": environ.get("PATH_INFO"), "query": environ.get("QUERY_STRING"),
                              "key": environ.get("HTTP_X_QUICKWAY_KEY")})
            body = json.dumps(self.seen[-1]).encode()
            start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
            return [body]

        self.server = make_server(host, free_port(host), app, server_class=WSGIServer, handler_class=_QuietHandler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def wsgi():
    b = WSGIBackend("127.0.0.2")
    yield b
    b.stop()


@pytest.fixture(scope="module")
def echo():
    b = Backend("127.0.0.3", free_port("127.0.0.3"))
    yield b
    b.stop()


CONFIG = """
listen: 127.0.0.1:{PORT}
workers: 2
admin: { listen: 127.0.0.1:{ADMIN} }
auth:
  salt: pepper
  keys:
    - { id: app-a, secret: secret-a }
    - { id: app-b, secret: secret-b }
services:
  wsgi: { host: wsgi.internal, port: WSGI_PORT, ips: [127.0.0.2] }
  echo: { host: echo.internal, port: ECHO_PORT, ips: [127.0.0.3] }
routes:
  - name: admin
    match: { path_prefix: /api/admin/ }
    service: wsgi
    auth: required
  - name: api-open
    match: { path_prefix: /api/ }
    service: wsgi
    auth: off
  - name: raw-slashes
    match: { path_prefix: /files/ }
    service: wsgi
    auth: off
    allow_encoded_slashes: true
  - name: me
    match: { path_prefix: /me/, methods: [GET, HEAD] }
    service: echo
    auth: required
    cache: { ttl: 60s }
    coalesce: true
  - name: me-shared
    match: { path_prefix: /shared/, methods: [GET, HEAD] }
    service: echo
    auth: required
    cache: { ttl: 60s, shared_across_keys: true }
  - name: maybe
    match: { path_prefix: /maybe/, methods: [GET, HEAD] }
    service: echo
    auth: optional
    cache: { ttl: 60s }
  - name: pay
    match: { path_prefix: /pay/ }
    service: echo
    auth: required
  - name: secret
    match: { path_prefix: /pub/secret/, ignore_case: true }
    service: echo
    auth: required
  - name: matrix-admin
    match: { path_prefix: /matrix/admin/ }
    service: echo
    auth: required
  - name: params-ok
    match: { path_prefix: /matrix/, allow_path_params: true }
    service: echo
    auth: off
  - name: public
    match: { path_prefix: /pub/, methods: [GET, HEAD] }
    service: echo
    strip_prefix: true
    auth: off
    cache: { ttl: 60s }
    coalesce: true
"""


@pytest.fixture(scope="module")
def gw(wsgi, echo):
    text = CONFIG.replace("WSGI_PORT", str(wsgi.port)).replace("ECHO_PORT", str(echo.server.server_address[1]))
    g = Gateway(text)
    yield g
    assert g.stop() == 0, g.logs()


# --- 1. route auth bypass by encoding ------------------------------------------------

def test_encoded_path_cannot_reach_a_protected_route_through_a_later_one(gw, wsgi):
    before = len(wsgi.seen)
    st, _, body = http_call(gw, "GET", "/api/admin/users")
    assert st == 401 and code(body) == "auth_missing"
    # %61 is "a": routed as /api/admin/users, so the same route (and its auth) applies.
    st, _, body = http_call(gw, "GET", "/api/%61dmin/users")
    assert st == 401 and code(body) == "auth_missing", body
    # An encoded slash would be split by the backend: refused on routes that do not opt in.
    st, _, body = http_call(gw, "GET", "/api/admin%2Fusers")
    assert st == 400 and code(body) == "bad_request", body
    st, _, body = http_call(gw, "GET", "/api/admin%2fusers")
    assert st == 400, body
    assert len(wsgi.seen) == before, f"a protected path reached the backend: {wsgi.seen[before:]}"


def test_encoded_backslash_cannot_reach_a_protected_route_through_a_later_one(gw, wsgi):
    """`%5C` is the other encoded separator: backends on Windows (and some frameworks)
    read `\\` as `/`, and wsgiref decodes it into the path. Routed raw, `/api/admin%5Cusers`
    would fall through to the `auth: off` route `/api/`."""
    before = len(wsgi.seen)
    for target in ("/api/admin%5Cusers", "/api/admin%5cusers", "/api/x/..%5Cadmin/users"):
        st, _, body = http_call(gw, "GET", target)
        assert st == 400 and code(body) == "bad_request", (target, st, body)
    assert len(wsgi.seen) == before, f"an encoded backslash reached the backend: {wsgi.seen[before:]}"


def test_decoded_unreserved_path_is_what_goes_upstream(gw, wsgi):
    st, _, body = http_call(gw, "GET", "/api/%70ublic/%7Eitem?q=%61")
    assert st == 200, body
    seen = json.loads(body)
    assert seen["path"] == "/api/public/~item" and seen["query"] == "q=%61"


def test_servlet_parameters_and_double_slashes_cannot_skip_a_route(gw, wsgi):
    before = len(wsgi.seen)
    st, _, body = http_call(gw, "GET", "/api/open/..;/admin/users")
    assert st == 400, body
    # `//api/admin/users` is `/api/admin/users` to backends that merge slashes: routed so.
    st, _, body = http_call(gw, "GET", "//api/admin/users")
    assert st == 401 and code(body) == "auth_missing", body
    assert len(wsgi.seen) == before


def test_method_and_url_overrides_do_not_reach_the_backend(gw, echo):
    st, _, body = http_call(gw, "GET", f"/pub/o-{time.monotonic_ns()}",
                            {"X-HTTP-Method-Override": "DELETE", "X-Original-URL": "/admin", "Forwarded": "for=6.6.6.6"})
    assert st == 200
    seen = {k.lower() for k in json.loads(body)["headers"]}
    assert not seen & {"x-http-method-override", "x-original-url", "forwarded"}, seen


def test_a_header_named_in_connection_is_not_keyed(gw, echo):
    """`Connection: Accept-Language` keeps the header from the backend, so it must not key
    the answer either (the backend answered as if it were absent)."""
    path = f"/pub/hdr/lang-{time.monotonic_ns()}?Vary=Accept-Language"
    st, h, _ = http_call(gw, "GET", path, {"Accept-Language": "fr", "Connection": "Accept-Language"})
    assert h["x-cache"] == "MISS"
    st, h, _ = http_call(gw, "GET", path, {"Accept-Language": "fr"})
    assert h["x-cache"] == "MISS", "an answer made without Accept-Language was served as the French one"


def test_a_route_can_opt_in_to_encoded_slashes(gw, wsgi):
    st, _, body = http_call(gw, "GET", "/files/a%2Fb")
    assert st == 200, body
    assert json.loads(body)["path"] == "/files/a/b"   # the operator chose this for the route


# --- 2. gateway headers spoofed with underscores ------------------------------------

def test_underscore_header_cannot_pose_as_x_quickway_key(gw, wsgi):
    before = gw.stats()["requests"]["underscore_headers_dropped"]
    st, _, body = http_call(gw, "GET", "/api/whoami", {"X_Quickway_Key": "app-a"})
    assert st == 200
    assert json.loads(body)["key"] is None, "the backend read an unsigned identity"
    assert gw.stats()["requests"]["underscore_headers_dropped"] == before + 1


# --- 3. answers crossing callers -----------------------------------------------------

def test_cached_answer_on_an_auth_route_is_per_key(gw, echo):
    path = f"/me/profile-{time.monotonic_ns()}"
    st, h, body = http_call(gw, "GET", path, signed("app-a", "GET", path))
    assert st == 200 and json.loads(body)["headers"]["X-Quickway-Key"] == "app-a"
    st, h, body = http_call(gw, "GET", path, signed("app-a", "GET", path))
    assert h["x-cache"] == "HIT"
    st, h, body = http_call(gw, "GET", path, signed("app-b", "GET", path))
    assert st == 200 and h["x-cache"] == "MISS", h
    assert json.loads(body)["headers"]["X-Quickway-Key"] == "app-b", "app-b got app-a's answer"


def test_shared_across_keys_lets_keys_share(gw, echo):
    path = f"/shared/catalog-{time.monotonic_ns()}"
    http_call(gw, "GET", path, signed("app-a", "GET", path))
    st, h, _ = http_call(gw, "GET", path, signed("app-b", "GET", path))
    assert st == 200 and h["x-cache"] == "HIT"


def test_anonymous_caller_does_not_get_a_signed_callers_answer(gw, echo):
    path = f"/maybe/feed-{time.monotonic_ns()}"
    st, _, body = http_call(gw, "GET", path, signed("app-a", "GET", path))
    assert json.loads(body)["headers"]["X-Quickway-Key"] == "app-a"
    st, h, body = http_call(gw, "GET", path)
    assert st == 200 and h["x-cache"] == "MISS"
    assert "X-Quickway-Key" not in json.loads(body)["headers"]
    st, h, _ = http_call(gw, "GET", path)
    assert h["x-cache"] == "HIT", "anonymous callers still share among themselves"


def test_answer_to_a_cookie_request_is_not_stored_unless_public(gw, echo):
    stamp = time.monotonic_ns()
    path = f"/pub/hdr/private-{stamp}?Vary=Cookie"
    st, h, body = http_call(gw, "GET", path, {"Cookie": "session=victim"})
    assert st == 200 and json.loads(body)["n"] == 1
    st, h, body = http_call(gw, "GET", path)
    assert h["x-cache"] == "MISS" and json.loads(body)["n"] == 2, "the victim's answer was served to another caller"
    # Marked public by the backend: a shared cache may keep it (RFC 9111 3.5).
    path = f"/pub/hdr/public-{stamp}?Cache-Control=public"
    http_call(gw, "GET", path, {"Authorization": "Bearer x"})
    st, h, body = http_call(gw, "GET", path)
    assert h["x-cache"] == "HIT" and json.loads(body)["n"] == 1


def test_answer_to_an_authorization_request_is_not_stored_unless_public(gw, echo):
    """An `Authorization` the gateway did not verify (an `auth: off` route) reaches the
    backend, which may answer for that caller. Unlike the Cookie case above, the backend
    sends no `Vary`: only the credentialed-request rule (RFC 9111 3.5) keeps it out."""
    path = f"/pub/hdr/auth-{time.monotonic_ns()}"
    st, h, body = http_call(gw, "GET", path, {"Authorization": "Bearer x"})
    assert st == 200 and json.loads(body)["n"] == 1, body
    assert "vary" not in {k.lower() for k in h}, h
    sent = [r for r in echo.server.requests if r["path"] == path[len("/pub"):]]
    assert [{k.lower(): v for k, v in r["headers"].items()}.get("authorization") for r in sent] == ["Bearer x"], sent
    st, h, body = http_call(gw, "GET", path)
    assert st == 200 and h["x-cache"] == "MISS", ("the answer to Bearer x was served to another caller", h)
    assert json.loads(body)["n"] == 2, body
    assert echo.server.path_hits[path[len("/pub"):]] == 2


def test_upstream_vary_is_honoured(gw, echo):
    path = f"/pub/hdr/enc-{time.monotonic_ns()}?Vary=Accept-Encoding"
    st, h, _ = http_call(gw, "GET", path, {"Accept-Encoding": "gzip"})
    assert h["x-cache"] == "MISS"
    st, h, _ = http_call(gw, "GET", path, {"Accept-Encoding": "gzip"})
    assert h["x-cache"] == "HIT"
    st, h, body = http_call(gw, "GET", path)
    assert h["x-cache"] == "MISS", "an answer made for Accept-Encoding: gzip went to a client that sent none"
    assert json.loads(body)["n"] == 2


def test_merged_requests_share_only_within_one_key(gw, echo):
    path = f"/me/delay-{time.monotonic_ns()}"
    echo.server.delay_ms = 300
    try:
        with ThreadPoolExecutor(4) as pool:
            futures = [pool.submit(http_call, gw, "GET", path, signed(k, "GET", path)) for k in ("app-a", "app-b", "app-a", "app-b")]
            results = [f.result() for f in futures]
    finally:
        echo.server.delay_ms = 0
    for (st, h, body), k in zip(results, ("app-a", "app-b", "app-a", "app-b")):
        assert st == 200 and json.loads(body)["headers"]["X-Quickway-Key"] == k
    assert echo.path_hits(path) == 2, "one call per key"


def test_merged_waiter_does_not_get_a_set_cookie_or_credentialed_answer(gw, echo):
    stamp = time.monotonic_ns()
    echo.server.delay_ms = 300
    try:
        for path, leader_headers in ((f"/pub/hdr/sc-{stamp}?Set-Cookie=session%3Dleader", {}),
                                     (f"/pub/hdr/ck-{stamp}", {"Cookie": "session=leader"})):
            with ThreadPoolExecutor(3) as pool:
                leader = pool.submit(http_call, gw, "GET", path, leader_headers)
                time.sleep(0.05)  # the leader's call is in flight; the others join it as waiters
                waiters = [pool.submit(http_call, gw, "GET", path) for _ in range(2)]
                lst, lh, _ = leader.result()
                assert lst == 200
                for w in waiters:
                    st, h, body = w.result()
                    # Each waiter made its own call (its own cookie, if any, is its own).
                    assert st == 200 and h["x-cache"] == "BYPASS", (path, h)
            assert echo.path_hits(path.split("?")[0].removeprefix("/pub")) == 3, "waiters were handed the leader's own answer"
    finally:
        echo.server.delay_ms = 0


def test_conditional_leader_does_not_hand_its_304_to_waiters(gw, echo):
    path = f"/pub/etag/doc-{time.monotonic_ns()}"
    echo.server.delay_ms = 300
    try:
        with ThreadPoolExecutor(3) as pool:
            leader = pool.submit(http_call, gw, "GET", path, {"If-None-Match": '"v1"'})
            time.sleep(0.05)
            others = [pool.submit(http_call, gw, "GET", path) for _ in range(2)]
            assert leader.result()[0] == 304
            for f in others:
                st, h, body = f.result()
                assert st == 200 and json.loads(body)["n"] >= 1, (st, h, body)
    finally:
        echo.server.delay_ms = 0


# --- 4. cache key collisions ---------------------------------------------------------

def test_plus_and_encoded_plus_are_different_cache_entries(gw, echo):
    base = f"/pub/tz-{time.monotonic_ns()}"
    st, h, body = http_call(gw, "GET", base + "?x=+02:00")
    assert h["x-cache"] == "MISS"
    st, h, body = http_call(gw, "GET", base + "?x=%2B02:00")
    assert h["x-cache"] == "MISS", "a form decoder reads these two differently"
    assert json.loads(body)["path"].endswith("?x=%2B02:00")


def test_fragment_and_bad_host_are_refused(gw, echo):
    before = echo.hits
    st, _, body = http_call(gw, "GET", "/pub/a#frag")
    assert st == 400 and code(body) == "bad_request"
    resp = raw_exchange(gw.port, b"GET /tz HTTP/1.1\r\nHost: a/account\r\n\r\n")
    assert resp.startswith(b"HTTP/1.1 400"), resp
    assert b'"bad_request"' in resp
    assert echo.hits == before


# --- 5. a signature accepted for another request -------------------------------------

def test_raw_plus_in_a_signed_query_is_refused(gw, echo):
    hits = echo.hits
    headers = signed("app-a", "POST", "/pay/transfer?amount=%2B100")
    st, _, body = http_call(gw, "POST", "/pay/transfer?amount=+100", headers, b"")
    assert st == 400 and code(body) == "bad_request", body
    assert echo.hits == hits
    st, _, body = http_call(gw, "POST", "/pay/transfer?amount=%2B100", signed("app-a", "POST", "/pay/transfer?amount=%2B100"), b"")
    assert st == 200, body


def test_fragment_cannot_extend_a_signed_query(gw, echo):
    hits = echo.hits
    headers = signed("app-a", "POST", "/pay/transfer?to=alice")
    st, _, body = http_call(gw, "POST", "/pay/transfer?to=alice#&to=mallory", headers, b"")
    assert st == 400, body
    assert echo.hits == hits


def test_signature_covers_the_path_as_sent(gw, echo):
    # The client signs what it sends (spec/signature.md); the forwarded path only has
    # unreserved bytes decoded.
    st, _, body = http_call(gw, "POST", "/pay/%61ccount", signed("app-a", "POST", "/pay/%61ccount"), b"")
    assert st == 200, body
    assert json.loads(body)["path"] == "/pay/account"


def test_path_parameters_and_letter_case_cannot_skip_a_signed_route(gw, echo):
    # Attack round 3, item 6: Tomcat, Jetty and Spring read `/pub/secret;x/account` as
    # `/pub/secret/account`; IIS and ASP.NET read `/pub/Secret/` as `/pub/secret/`.
    hits = echo.hits
    for target in ("/pub/secret;jsessionid=x/account", "/pub/secret;/account", "/pub/x;y"):
        st, _, body = http_call(gw, "GET", target)
        assert st == 400 and code(body) == "bad_request" and b";" in body, (target, body)
    for target in ("/pub/Secret/account", "/PUB/SECRET/account", "/pub/sEcReT/x"):
        st, _, body = http_call(gw, "GET", target)
        assert st == 401 and code(body) == "auth_missing", (target, body)
    assert echo.hits == hits
    # A route that opts in passes `;` on; an encoded %3B is not a separator and passes.
    st, _, body = http_call(gw, "GET", "/matrix/a;v=1/b")
    assert st == 200 and json.loads(body)["path"] == "/matrix/a;v=1/b", body
    st, _, body = http_call(gw, "GET", "/pub/a%3Bb")
    assert st == 200, body
    # A route that allows `;` cannot be used to reach a guarded one: without its
    # parameters the path is /matrix/admin/y, the guarded route's.
    hits = echo.hits
    st, _, body = http_call(gw, "GET", "/matrix/admin;x=1/y")
    assert st == 400 and b"another route" in body, body
    assert echo.hits == hits


def test_a_signed_query_goes_upstream_as_signed(gw, echo):
    # Item 7: `?to=alice&to=mallory` signed, then sent reordered, must not verify with the
    # backend seeing the new order; `?a` goes as `a=`, empty pieces are dropped.
    signed_target = "/pay/transfer?to=alice&to=mallory"
    hits = echo.hits
    st, _, body = http_call(gw, "POST", "/pay/transfer?to=mallory&to=alice", signed("app-a", "POST", signed_target), b"")
    assert st == 400 and b"repeated name" in body, body
    assert echo.hits == hits
    # Sent in canonical order it passes, and the backend sees the canonical query.
    st, _, body = http_call(gw, "POST", signed_target, signed("app-a", "POST", signed_target), b"")
    assert st == 200 and json.loads(body)["path"] == signed_target, body
    for sent, upstream in (("/pay/q?b=2&a", "/pay/q?a=&b=2"), ("/pay/q?x=1&&&", "/pay/q?x=1"), ("/pay/q?%7Ex=%41", "/pay/q?~x=A"),
                           ("/pay/q?&", "/pay/q")):
        st, _, body = http_call(gw, "POST", sent, signed("app-a", "POST", sent), b"")
        assert st == 200 and json.loads(body)["path"] == upstream, (sent, body)


# --- 6 and 7: the upstream connection -----------------------------------------------

class RawKeepAliveBackend:
    """A hand-written keep-alive server, scripted per request:
    - `HEAD /x`: answers the head, then 50 ms later writes a body anyway (the bug of many
      hand-written servers), here shaped like a whole HTTP response;
    - `POST ...`: reads the request and closes without answering;
    - anything else: `200` with the path as body, keep-alive."""

    def __init__(self, host):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, free_port(host)))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.posts = 0
        self.stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stopped:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        f = c.makefile("rb")
        try:
            while True:
                line = f.readline()
                if not line:
                    return
                method, path, _ = line.decode().split(" ", 2)
                length = 0
                while True:
                    h = f.readline()
                    if h in (b"\r\n", b""):
                        break
                    if h.lower().startswith(b"content-length:"):
                        length = int(h.split(b":")[1])
                if length:
                    f.read(length)
                if method == "POST":
                    self.posts += 1
                    return
                if method == "HEAD":
                    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\n")
                    time.sleep(0.05)
                    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\nCache-Control: max-age=60\r\n\r\npoisoned")
                    continue
                body = path.encode()
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        except OSError:
            return
        finally:
            c.close()

    def stop(self):
        self.stopped = True
        self.sock.close()


@pytest.fixture(scope="module")
def raw_backend():
    b = RawKeepAliveBackend("127.0.0.4")
    yield b
    b.stop()


RAW_CONFIG = """
listen: 127.0.0.1:{PORT}
workers: 1
admin: { listen: 127.0.0.1:{ADMIN} }
services:
  raw: { host: raw.internal, port: RAW_PORT, ips: [127.0.0.4], retries: 0 }
routes:
  - name: cached
    match: { path_prefix: /c/, methods: [GET] }
    service: raw
    cache: { ttl: 60s }
  - name: plain
    match: { path_prefix: / }
    service: raw
"""


@pytest.fixture(scope="module")
def raw_gw(raw_backend):
    g = Gateway(RAW_CONFIG.replace("RAW_PORT", str(raw_backend.port)))
    yield g
    assert g.stop() == 0, g.logs()


def test_body_written_after_head_cannot_poison_the_next_answer(raw_gw):
    """Pipelined HEAD + GET: the GET must get its own answer every time, never the
    bytes the backend wrote after the HEAD answer (and that must not be cached)."""
    wrong = []
    for i in range(20):
        path = f"/c/item-{i}-{time.monotonic_ns()}"
        s = socket.create_connection(("127.0.0.1", raw_gw.port), timeout=5)
        try:
            s.sendall(b"HEAD /x HTTP/1.1\r\nHost: a\r\n\r\nGET %s HTTP/1.1\r\nHost: a\r\n\r\n" % path.encode())
            f = s.makefile("rb")
            for expect_body in (False, True):
                status = f.readline()
                headers = {}
                while True:
                    h = f.readline()
                    if h in (b"\r\n", b""):
                        break
                    k, v = h.decode().split(":", 1)
                    headers[k.strip().lower()] = v.strip()
                body = f.read(int(headers.get("content-length", 0))) if expect_body else b""
            if body != path.encode():
                wrong.append((status, body))
        finally:
            s.close()
        st, _, body = http_call(raw_gw, "GET", path)
        if body != path.encode():
            wrong.append(("cached", body))
    assert not wrong, f"{len(wrong)} answers crossed: {wrong[:3]}"


def test_post_is_never_sent_twice(raw_gw, raw_backend):
    # A GET first, so the gateway holds a pooled connection to the backend.
    st, _, body = http_call(raw_gw, "GET", "/warm")
    assert st == 200
    before = raw_backend.posts
    st, _, body = http_call(raw_gw, "POST", "/orders", {"Content-Type": "application/json"}, b'{"buy": 1}')
    assert st == 502 and code(body) == "upstream_bad_response", body
    wait_until(lambda: raw_backend.posts >= before + 1, timeout=5, what="the POST at the backend")
    time.sleep(0.2)  # a second copy would come right after the first
    assert raw_backend.posts == before + 1, "the backend received the POST twice"


# --- every input is bounded ----------------------------------------------------------

def _rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def test_pipelined_cache_hits_to_a_client_that_never_reads_stay_bounded(gw, echo):
    """Cache hits are answered at once: without a bound, 3,000 pipelined GETs of a
    64 KiB entry from a client that reads nothing piled ~190 MiB of answers into memory."""
    path = f"/pub/sized/65536/x-{time.monotonic_ns()}"
    st, _, body = http_call(gw, "GET", path)
    assert st == 200 and len(body) == 65536
    assert http_call(gw, "GET", path)[1]["x-cache"] == "HIT"
    before = _rss_kib(gw.proc.pid)
    s = socket.create_connection(("127.0.0.1", gw.port), timeout=5)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    try:
        request = b"GET %s HTTP/1.1\r\nHost: a\r\n\r\n" % path.encode()
        s.setblocking(False)
        sent, deadline = 0, time.monotonic() + 5
        data = request * 3000
        while sent < len(data) and time.monotonic() < deadline:
            try:
                sent += s.send(data[sent:])
            except BlockingIOError:
                time.sleep(0.01)
        time.sleep(0.5)  # let the gateway take what it will
        grown = _rss_kib(gw.proc.pid) - before
        assert grown < 32 * 1024, f"resident memory grew by {grown} KiB for one client that reads nothing"
        # The gateway still serves others.
        assert http_call(gw, "GET", path)[0] == 200
    finally:
        s.close()
