"""A backend that misbehaves on a kept-alive connection (attack round, item 4): it
answers each request and then, 50 ms later, writes an unsolicited second response on the
same connection. Whatever the upstream client, the next request must never be answered
with those bytes, nor may the cache store them under the next request's key.

The same backend code serves plain TCP and TLS, and every test runs against both
upstream clients: our own for `scheme: http` (`UpstreamHTTPCall`, which drops an idle
connection that turns readable) and libcurl's for `scheme: https` (`UpstreamTransfer`;
libcurl 7.88's reuse check of an OpenSSL connection takes pending bytes for a live
connection), so the two cannot drift apart again. Requests are sequential with a gap
well past the 50 ms, so the stray bytes are always there before the next request: an
answer written after a request went out is indistinguishable from its own answer, for
any HTTP/1.1 client."""
import json
import socket
import ssl
import threading
import time

import pytest

from harness import Gateway, free_port, http_call
from test_routing import make_ca_and_cert

STRAY_BODY = b'{"stray": "UNSOLICITED-SECOND-RESPONSE"}'
REQUESTS = 20
GAP = 0.2  # seconds between requests: the stray comes 50 ms after each answer

CONFIG = """
listen: 127.0.0.1:{PORT}
workers: 1
admin: { listen: 127.0.0.1:{ADMIN} }
services:
  plain:
    host: stray.internal
    port: PLAIN_PORT
    ips: [127.0.0.2]
    retries: 0
  secure:
    host: stray.internal
    scheme: https
    port: TLS_PORT
    ips: [127.0.0.2]
    tls: { verify: true, ca_file: CA_FILE }
    retries: 0
routes:
  - { name: p-http, match: { path_prefix: /p-http/ }, service: plain, strip_prefix: true, coalesce: false }
  - { name: p-https, match: { path_prefix: /p-https/ }, service: secure, strip_prefix: true, coalesce: false }
  - { name: c-http, match: { path_prefix: /c-http/ }, service: plain, strip_prefix: true, coalesce: true, cache: { ttl: 60s } }
  - { name: c-https, match: { path_prefix: /c-https/ }, service: secure, strip_prefix: true, coalesce: true, cache: { ttl: 60s } }
"""


class StrayBackend:
    """A raw-socket HTTP/1.1 backend (TLS when given a context) that keeps connections
    alive and, `stray_after` seconds after each answer, writes a second, cacheable
    response nobody asked for (none when `stray_after` is None)."""

    def __init__(self, host, port, ssl_context=None, stray_after=0.05):
        self.ssl_context = ssl_context
        self.stray_after = stray_after
        self.lock = threading.Lock()
        self.connections = 0
        self.requests = []
        self.strays_sent = 0
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind((host, port))
        self.listener.listen(64)
        self.stopping = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        while not self.stopping:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    @staticmethod
    def _response(body):
        return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nCache-Control: max-age=60\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(body), body))

    def _serve(self, conn):
        try:
            conn.settimeout(30)
            if self.ssl_context is not None:
                conn = self.ssl_context.wrap_socket(conn, server_side=True)
            with self.lock:
                self.connections += 1
            buf = b""
            while True:
                while b"\r\n\r\n" not in buf:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buf += data
                head, _, buf = buf.partition(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                fields = {k.strip().lower(): v.strip() for k, _, v in (l.partition(":") for l in lines[1:])}
                n = int(fields.get("content-length", "0"))
                while len(buf) < n:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buf += data
                body, buf = buf[:n], buf[n:]
                with self.lock:
                    self.requests.append((method, path, body))
                conn.sendall(self._response(json.dumps({"method": method, "path": path}).encode()))
                if self.stray_after is None:
                    continue
                time.sleep(self.stray_after)
                conn.sendall(self._response(STRAY_BODY))
                with self.lock:
                    self.strays_sent += 1
        except (OSError, ValueError, ssl.SSLError):
            pass  # the gateway dropped the connection: what it should do after a stray
        finally:
            conn.close()

    def stop(self):
        self.stopping = True
        self.listener.close()


def make_gateway(tmp_path, stray_after):
    pytest.importorskip("cryptography")
    paths = make_ca_and_cert(str(tmp_path), "stray.internal")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(paths["cert.pem"], paths["key.pem"])
    plain_port, tls_port = free_port("127.0.0.2"), free_port("127.0.0.2")
    backends = {"http": StrayBackend("127.0.0.2", plain_port, stray_after=stray_after),
                "https": StrayBackend("127.0.0.2", tls_port, ssl_context=ctx, stray_after=stray_after)}
    g = Gateway(CONFIG.replace("PLAIN_PORT", str(plain_port)).replace("TLS_PORT", str(tls_port))
                .replace("CA_FILE", paths["ca.pem"]))
    return g, backends


@pytest.fixture()
def stray_gateway(tmp_path):
    """A gateway per test, so that no connection (nor stray) carries over."""
    g, backends = make_gateway(tmp_path, stray_after=0.05)
    yield g, backends
    assert g.stop() == 0, g.logs()
    for b in backends.values():
        b.stop()


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_a_backend_that_behaves_keeps_its_connection(tmp_path, scheme):
    """The control: without strays, sequential requests (the same gap) share one
    connection, so the checks below retire only connections that misbehaved."""
    g, backends = make_gateway(tmp_path, stray_after=None)
    try:
        for i in range(6):
            st, _, body = http_call(g, "GET", f"/p-{scheme}/item/{i}")
            assert st == 200 and json.loads(body) == {"method": "GET", "path": f"/item/{i}"}, body
            time.sleep(GAP)
        assert backends[scheme].connections == 1
    finally:
        assert g.stop() == 0, g.logs()
        for b in backends.values():
            b.stop()


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_no_request_is_answered_with_a_stray_response(stray_gateway, scheme):
    """Alternating GET and POST (a POST never goes on a reused connection, but the one it
    used is pooled after it) on a route without cache or merging."""
    g, backends = stray_gateway
    b = backends[scheme]
    wrong = []
    for i in range(REQUESTS):
        method, payload = ("GET", None) if i % 2 == 0 else ("POST", b"x%d" % i)
        st, _, body = http_call(g, method, f"/p-{scheme}/item/{i}", body=payload)
        got = json.loads(body) if st == 200 else {"status": st, "body": body.decode("latin-1")}
        if got != {"method": method, "path": f"/item/{i}"}:
            wrong.append((i, got))
        time.sleep(GAP)
    assert b.strays_sent >= REQUESTS - 1, (b.strays_sent, b.connections)  # the backend misbehaved
    assert wrong == [], f"{len(wrong)} of {REQUESTS} got another answer on {scheme}: {wrong}"


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_cached_and_merged_route_never_stores_a_stray_response(stray_gateway, scheme):
    g, backends = stray_gateway
    b = backends[scheme]
    wrong = []
    for i in range(REQUESTS):
        st, _, body = http_call(g, "GET", f"/c-{scheme}/item/{i}")
        if st != 200 or json.loads(body) != {"method": "GET", "path": f"/item/{i}"}:
            wrong.append((i, st, body))
        time.sleep(GAP)
    assert b.strays_sent >= REQUESTS - 1, (b.strays_sent, b.connections)
    # Each key is cached now: asked again, every answer is its own, from the cache.
    seen = len(b.requests)
    stored = []
    for i in range(REQUESTS):
        st, _, body = http_call(g, "GET", f"/c-{scheme}/item/{i}")
        if st != 200 or json.loads(body) != {"method": "GET", "path": f"/item/{i}"}:
            stored.append((i, st, body))
    assert wrong == [], f"{len(wrong)} of {REQUESTS} got another answer on {scheme}: {wrong}"
    assert stored == [], f"{len(stored)} of {REQUESTS} keys hold another answer on {scheme}: {stored}"
    assert len(b.requests) == seen, "the second round was not served from the cache"
