"""Traffic policy per route (issue 32): host routing (`match.host`), IP rules (`access`)
and CORS (`cors`), through the real binary over HTTP/1.1 and HTTP/2 (h2c) against real
backends on 127.0.0.x. Expectations come from the spec (spec/config.md,
spec/admin-and-errors.md), RFC 9110 (Host, Vary) and the Fetch standard's CORS protocol;
the HTTP/2 side is the `h2` package."""
import json
import socket
import subprocess
import time

import h2.config
import h2.connection
import h2.events
import pytest

from harness import Backend, Gateway, free_port, http_call, quickway_binary, wait_until

ORIGIN_APP = "https://app.example.com"

CONFIG = """
listen: 127.0.0.1:{PORT}
workers: 2
admin: { listen: 127.0.0.1:{ADMIN} }
client_ip: { trusted_proxies: [127.0.0.1] }
auth:
  salt: pepper
  keys:
    - { id: app, secret: app-secret }
services:
  api: { host: api.internal, port: API_PORT, ips: [127.0.0.2] }
  admin: { host: admin.internal, port: ADMIN_PORT, ips: [127.0.0.3] }
routes:
  - { name: admin-host, auth: off, match: { path_prefix: /h/, host: admin.example.com, methods: [DELETE] }, service: admin }
  - { name: wild-host, auth: off, match: { path_prefix: /h/, host: "*.example.com", methods: [GET] }, service: api }
  - { name: any-host, auth: off, match: { path_prefix: /h/, methods: [POST] }, service: api }
  - { name: ip-xff, match: { path_prefix: /ip/ }, service: api, auth: off,
      access: { allow: [198.51.100.0/24, "2001:db8::/32"], deny: [198.51.100.66] } }
  - { name: ip-peer, match: { path_prefix: /peer/ }, service: api, auth: off, access: { allow: [127.0.0.5] } }
  - name: cors
    match: { path_prefix: /cors/, methods: [GET, POST] }
    service: api
    strip_prefix: true
    auth: off
    cache: { ttl: 60s }
    cors:
      allow_origins: [EXTRA_ORIGIN "https://app.example.com"]
      allow_headers: [X-Token, Content-Type]
      expose_headers: [X-Backend]
      allow_credentials: true
      max_age: 10m
  - name: cors-auth
    match: { path_prefix: /private/, methods: [GET] }
    service: api
    auth: required
    cors: { allow_origins: ["https://app.example.com"], allow_headers: [Authorization] }
"""


def start(extra_origin=None):
    api = Backend("127.0.0.2", free_port("127.0.0.2"))
    admin = Backend("127.0.0.3", free_port("127.0.0.3"))
    text = (CONFIG.replace("API_PORT", str(api.server.server_address[1]))
            .replace("ADMIN_PORT", str(admin.server.server_address[1]))
            .replace("EXTRA_ORIGIN", f'"{extra_origin}",' if extra_origin else ""))
    try:
        g = Gateway(text)
    except Exception:
        api.stop()
        admin.stop()
        raise
    return g, api, admin


@pytest.fixture(scope="module")
def env():
    g, api, admin = start()
    yield g, api, admin
    try:
        assert g.stop() == 0
    finally:
        api.stop()
        admin.stop()


def call(g, method, path, headers=None, body=None, source=None):
    """One request on its own connection, from `source` (an address on 127/8) if given."""
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", g.port, timeout=15, source_address=(source, 0) if source else None)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def h2_call(g, method, path, headers=(), authority="api.test"):
    """One request over h2c with prior knowledge (the h2 package): (status, headers, body)."""
    s = socket.create_connection(("127.0.0.1", g.port), timeout=10)
    try:
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        conn.initiate_connection()
        sid = conn.get_next_available_stream_id()
        conn.send_headers(sid, [(":method", method), (":path", path), (":scheme", "http"), (":authority", authority)] + list(headers),
                          end_stream=True)
        s.sendall(conn.data_to_send())
        status, hs, body = None, {}, bytearray()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            data = s.recv(65536)
            if not data:
                break
            for ev in conn.receive_data(data):
                if isinstance(ev, h2.events.ResponseReceived) and ev.stream_id == sid:
                    for k, v in ev.headers:
                        if k == ":status":
                            status = int(v)
                        else:
                            hs[k] = f"{hs[k]}, {v}" if k in hs else v
                elif isinstance(ev, h2.events.DataReceived) and ev.stream_id == sid:
                    body += ev.data
                    conn.acknowledge_received_data(ev.flow_controlled_length, sid)
                elif isinstance(ev, h2.events.StreamEnded) and ev.stream_id == sid:
                    return status, hs, bytes(body)
            s.sendall(conn.data_to_send())
        raise AssertionError("no complete HTTP/2 answer within 10 s")
    finally:
        s.close()


def code(body):
    return json.loads(body)["error"]["code"]


# MARK: host routing

def test_host_routing_over_http1(env):
    g, api, admin = env
    st, _, body = call(g, "DELETE", "/h/x", {"Host": "Admin.Example.COM.:8443"})
    assert st == 200 and json.loads(body)["backend"].startswith("127.0.0.3"), "case, trailing dot and port ignored"
    st, _, body = call(g, "GET", "/h/x", {"Host": "a.b.example.com"})
    assert st == 200 and json.loads(body)["backend"].startswith("127.0.0.2"), "the wildcard takes several labels"
    # A path that only another host's route takes with this method: 405 naming this host's methods only.
    st, h, body = call(g, "DELETE", "/h/x", {"Host": "api.example.com"})
    assert st == 405 and code(body) == "method_not_allowed"
    assert h["allow"] == "GET, POST", h
    # example.com is not under *.example.com: only the host-less route is left.
    st, h, _ = call(g, "GET", "/h/x", {"Host": "example.com"})
    assert st == 405 and h["allow"] == "POST"
    st, _, body = call(g, "POST", "/h/x", {"Host": "anything.test"}, body=b"{}")
    assert st == 200 and json.loads(body)["backend"].startswith("127.0.0.2"), "routes without a host take any host"
    st, _, _ = call(g, "DELETE", "/h/x", {"Host": "admin.example.com.evil.net"})
    assert st == 405


def test_host_routing_over_http2(env):
    g, api, admin = env
    st, _, body = h2_call(g, "DELETE", "/h/x", authority="ADMIN.example.com:80")
    assert st == 200 and json.loads(body)["backend"].startswith("127.0.0.3")
    st, h, _ = h2_call(g, "DELETE", "/h/x", authority="api.example.com")
    assert st == 405 and h["allow"] == "GET, POST"
    st, _, body = h2_call(g, "GET", "/h/x", authority="x.example.com")
    assert st == 200 and json.loads(body)["backend"].startswith("127.0.0.2")


# MARK: IP rules

def test_ip_rules_on_the_client_behind_a_trusted_proxy(env):
    g, api, _ = env
    # 127.0.0.1 is a trusted proxy: the client is the rightmost untrusted hop of its chain.
    assert call(g, "GET", "/ip/a", {"X-Forwarded-For": "198.51.100.7"})[0] == 200
    assert call(g, "GET", "/ip/a", {"X-Forwarded-For": "203.0.113.1, 198.51.100.7, 127.0.0.1"})[0] == 200
    st, _, body = call(g, "GET", "/ip/a", {"X-Forwarded-For": "198.51.100.66"})
    assert st == 403 and code(body) == "forbidden_ip", "deny wins over allow"
    assert call(g, "GET", "/ip/a")[0] == 403, "the proxy itself is not in allow"
    assert call(g, "GET", "/ip/a", {"X-Forwarded-For": "2001:db8::5"})[0] == 200, "IPv6"
    assert call(g, "GET", "/ip/a", {"X-Forwarded-For": "2001:db9::5"})[0] == 403
    assert call(g, "GET", "/ip/a", {"X-Forwarded-For": "::ffff:198.51.100.9"})[0] == 200, "IPv4-mapped is IPv4"
    # HTTP/2 reads the same client.
    assert h2_call(g, "GET", "/ip/a", [("x-forwarded-for", "198.51.100.7")])[0] == 200
    assert h2_call(g, "GET", "/ip/a", [("x-forwarded-for", "198.51.100.66")])[0] == 403


def test_a_spoofed_forwarded_for_from_an_untrusted_peer_is_ignored(env):
    g, api, _ = env
    before = api.hits
    # 127.0.0.5 is not a trusted proxy: its X-Forwarded-For names nobody.
    st, _, body = call(g, "GET", "/ip/a", {"X-Forwarded-For": "198.51.100.7"}, source="127.0.0.5")
    assert st == 403 and code(body) == "forbidden_ip"
    assert call(g, "GET", "/peer/a", source="127.0.0.5")[0] == 200
    assert call(g, "GET", "/peer/a", {"X-Forwarded-For": "127.0.0.5"}, source="127.0.0.6")[0] == 403
    assert api.hits == before + 1, "refused calls never reach the backend"


def test_a_refused_client_is_answered_before_its_body(env):
    g, api, _ = env
    before = api.hits
    s = socket.create_connection(("127.0.0.1", g.port), timeout=10, source_address=("127.0.0.6", 0))
    try:
        s.sendall(b"POST /peer/upload HTTP/1.1\r\nHost: a\r\nContent-Length: 5000000\r\nExpect: 100-continue\r\n\r\n")
        data = b""
        deadline = time.monotonic() + 10
        while b"\r\n\r\n" not in data and time.monotonic() < deadline:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    finally:
        s.close()
    assert data.startswith(b"HTTP/1.1 403 "), data[:200]
    assert b"100 Continue" not in data, "the body was never asked for"
    assert api.hits == before


# MARK: CORS

def preflight_headers(origin, method="GET", headers=None):
    h = {"Origin": origin, "Access-Control-Request-Method": method}
    if headers:
        h["Access-Control-Request-Headers"] = headers
    return h


def test_a_preflight_is_answered_by_the_gateway_and_never_forwarded(env):
    g, api, _ = env
    before = api.hits
    st, h, body = call(g, "OPTIONS", "/cors/x", preflight_headers(ORIGIN_APP, "POST", "x-token, content-type"))
    assert st == 204 and body == b""
    assert h["access-control-allow-origin"] == ORIGIN_APP
    assert h["access-control-allow-credentials"] == "true"
    assert h["access-control-allow-methods"] == "GET, POST"
    assert h["access-control-allow-headers"] == "X-Token, Content-Type"
    assert h["access-control-max-age"] == "600"
    assert h["vary"] == "Origin, Access-Control-Request-Method, Access-Control-Request-Headers"
    # A preflight never carries credentials: a route with auth answers it all the same.
    st, h, _ = call(g, "OPTIONS", "/private/x", preflight_headers(ORIGIN_APP, "GET", "authorization"))
    assert st == 204 and h["access-control-allow-origin"] == ORIGIN_APP
    assert api.hits == before, "no preflight reached the backend"
    # The actual call without credentials: 401, readable by the page (it carries the grant).
    st, h, body = call(g, "GET", "/private/x", {"Origin": ORIGIN_APP})
    assert st == 401 and h["access-control-allow-origin"] == ORIGIN_APP and "Origin" in h["vary"]


@pytest.mark.parametrize("origin,method,headers", [
    ("https://app.example.com.evil.net", "GET", None),   # a suffix of the allowed origin's host
    ("https://app.example.co", "GET", None),             # a prefix of it
    ("http://app.example.com", "GET", None),             # another scheme
    ("https://app.example.com:8443", "GET", None),       # another port
    ("null", "GET", None),
    (ORIGIN_APP, "DELETE", None),                          # a method the route's cors does not allow
    (ORIGIN_APP, "GET", "x-token, x-secret"),            # a header it does not allow
])
def test_a_preflight_not_allowed_is_refused(env, origin, method, headers):
    g, api, _ = env
    st, h, body = call(g, "OPTIONS", "/cors/x", preflight_headers(origin, method, headers))
    assert st == 403 and code(body) == "cors_rejected"
    assert "access-control-allow-origin" not in h


def test_a_cached_answer_gets_each_origins_own_fields_over_http1_and_http2(env):
    g, api, _ = env
    other = "http://127.0.0.2:1234"
    g2, api2, admin2 = start(extra_origin=other)
    try:
        # The backend varies on Accept-Encoding and sends a CORS field of its own, which the
        # gateway replaces on a cors route.
        path = "/cors/hdr?Vary=Accept-Encoding&Access-Control-Allow-Origin=*&Cache-Control=max-age%3D60"
        st, a, _ = call(g2, "GET", path, {"Origin": ORIGIN_APP})
        assert st == 200 and a["access-control-allow-origin"] == ORIGIN_APP
        st, b, _ = call(g2, "GET", path, {"Origin": other})
        assert st == 200 and b.get("x-cache") == "HIT"
        assert b["access-control-allow-origin"] == other, "the hit carries its own origin, not the stored one's"
        st, c, _ = call(g2, "GET", path, {"Origin": "https://evil.example"})
        assert c.get("x-cache") == "HIT" and "access-control-allow-origin" not in c
        st, d, _ = h2_call(g2, "GET", path, [("origin", ORIGIN_APP), ("accept-encoding", "identity")],
                           authority=f"127.0.0.1:{g2.port}")   # the same key and variant as http.client's calls
        assert st == 200 and d["x-cache"] == "HIT" and d["access-control-allow-origin"] == ORIGIN_APP
        st, e, _ = call(g2, "GET", path)
        assert "access-control-allow-origin" not in e
        for hs in (a, b, c, d, e):
            assert hs["vary"] == "Accept-Encoding, Origin", hs
            assert hs.get("access-control-expose-headers", "X-Backend") == "X-Backend"
        assert api2.path_hits("/hdr") == 1, "one backend call: the others were hits"
        st, p, _ = h2_call(g2, "OPTIONS", "/cors/x", [("origin", other), ("access-control-request-method", "POST")])
        assert st == 204 and p["access-control-allow-origin"] == other and p["access-control-max-age"] == "600"
        assert api2.path_hits("/x") == 0
    finally:
        try:
            assert g2.stop() == 0
        finally:
            api2.stop()
            admin2.stop()


def test_credentials_with_any_origin_is_a_config_error(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("""listen: 127.0.0.1:18099
services:
  api: { host: api.internal, port: 8080, ips: [127.0.0.2] }
routes:
  - name: r
    match: { path_prefix: / }
    service: api
    cors:
      allow_origins: ["*"]
      allow_credentials: true
    access: { allow: [10.0.0.1/8] }
""")
    r = subprocess.run([quickway_binary(), "check", "--config", str(path)], capture_output=True, text=True, timeout=30)
    assert r.returncode != 0
    out = r.stdout + r.stderr
    assert ":10: routes[0].cors.allow_credentials" in out, out
    assert ":11: routes[0].access.allow[0]" in out and "10.0.0.0/8" in out, out
