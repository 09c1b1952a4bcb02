"""Integration tests of the gateway engine (issue: gateway engine).

Each test starts the real binary against real backends on 127.0.0.x and checks what a
client sees against HTTP/1.1 (RFC 9112) and spec/admin-and-errors.md.
"""
import hashlib
import http.client
import json
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request

import pytest

from harness import ROOT, Backend, Gateway, free_port, quickway_binary, raw_exchange, read_response, wait_until

BACKEND_IPS = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]

CONFIG = """
listen: 127.0.0.1:{PORT}
workers: {WORKERS}
admin:
  listen: 127.0.0.1:{ADMIN}
limits:
  max_header_bytes: 4KiB
  max_body_bytes: 256KiB
  client_header_timeout: 1s
  client_idle_timeout: 5s
  drain_timeout: 10s
cache:
  max_object_bytes: 64KiB
services:
  api:
    host: api.internal
    port: {BACKEND_PORT}
    ips: [{IPS}]
    selection: {{ strategy: round_robin }}
    retries: 0
    timeouts:
      connect: 500ms
      response: 800ms
  dead:
    host: dead.internal
    port: {DEAD_PORT}
    ips: [127.0.0.5]
routes:
  - name: reads
    match: {{ path_prefix: /api/, methods: [GET, HEAD] }}
    service: api
    strip_prefix: true
  - name: writes
    match: {{ path_prefix: /api/, methods: [POST, PUT] }}
    service: api
    strip_prefix: true
  - name: dead
    match: {{ path_prefix: /dead/ }}
    service: dead
"""


@pytest.fixture(scope="module")
def backends():
    port = free_port("127.0.0.2", also=BACKEND_IPS[1:])
    bs = [Backend(ip, port) for ip in BACKEND_IPS]
    yield port, bs
    for b in bs:
        b.stop()


def make_gateway(backends, workers=1, ips=None):
    port, _ = backends
    text = CONFIG.replace("{BACKEND_PORT}", str(port)).replace("{DEAD_PORT}", str(free_port("127.0.0.5")))
    text = text.replace("{IPS}", ", ".join(ips or BACKEND_IPS)).replace("{{", "{").replace("}}", "}")
    return Gateway(text, workers=workers)


@pytest.fixture(scope="module")
def gw(backends):
    g = make_gateway(backends, workers=2)
    yield g
    assert g.stop() == 0, g.logs()


def get(url, method="GET", data=None, headers=None, timeout=10):
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers.items()), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers.items()), e.read()


def error_code(body):
    doc = json.loads(body)
    assert set(doc["error"]) == {"status", "code", "message", "request_id"}
    return doc["error"]["code"]


def test_get_is_relayed_with_forwarding_headers(gw):
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=5)
    conn.request("GET", "/api/items?b=2&a=1", headers={"X-App": "7", "Connection": "X-App2", "X-App2": "hop"})
    r = conn.getresponse()
    status, headers, body = r.status, dict(r.getheaders()), r.read()
    conn.close()
    assert status == 200
    doc = json.loads(body)
    assert doc["method"] == "GET"
    assert doc["path"] == "/items?b=2&a=1"            # strip_prefix keeps the query
    up = {k.lower(): v for k, v in doc["headers"].items()}
    assert up["host"] == f"api.internal:{gw_backend_port(doc)}"
    assert up["x-app"] == "7"
    assert "x-app2" not in up                         # named in Connection: hop-by-hop
    assert up["x-forwarded-for"] == "127.0.0.1"
    assert up["x-forwarded-proto"] == "http"
    assert up["x-forwarded-host"] == f"127.0.0.1:{gw.port}"
    assert up["x-request-id"] == headers["X-Request-Id"]
    assert headers["X-Backend"] == doc["backend"]
    assert headers["X-Cache"] == "BYPASS"


def gw_backend_port(doc):
    return doc["backend"].split(":")[1]


def test_client_request_id_is_kept(gw):
    status, headers, body = get(gw.url("/api/x"), headers={"X-Request-Id": "abc-123"})
    assert headers["X-Request-Id"] == "abc-123"
    assert json.loads(body)["headers"]["X-Request-Id"] == "abc-123"


def test_post_body_reaches_backend(gw):
    payload = os.urandom(3000).hex().encode()
    status, _, body = get(gw.url("/api/upload"), method="POST", data=payload, headers={"Content-Type": "text/plain"})
    assert status == 200
    doc = json.loads(body)
    assert doc["method"] == "POST"
    assert doc["body"].encode() == payload
    assert doc["headers"]["Content-Length"] == str(len(payload))
    assert doc["headers"]["Content-Type"] == "text/plain"


def test_chunked_request_body_is_decoded(gw):
    req = (b"PUT /api/chunked HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
           b"5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\n\r\n")
    resp = raw_exchange(gw.port, req)
    head, _, body = resp.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ")
    doc = json.loads(body)
    assert doc["method"] == "PUT"
    assert doc["body"] == "hello, world"
    assert doc["headers"]["Content-Length"] == "12"
    assert "Transfer-Encoding" not in doc["headers"]


def test_head_has_headers_and_no_body(gw):
    s_get, h_get, b_get = get(gw.url("/api/big/5000"))
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=5)
    conn.request("HEAD", "/api/big/5000")
    r = conn.getresponse()
    assert r.status == 200
    assert r.getheader("Content-Length") == str(len(b_get)) == "5000"
    assert r.read() == b""
    # The connection stays usable: no stray body bytes were sent.
    conn.request("GET", "/api/after-head")
    r2 = conn.getresponse()
    assert r2.status == 200 and json.loads(r2.read())["path"] == "/after-head"
    conn.close()


def test_keepalive_and_pipelining_on_one_connection(gw):
    s = socket.create_connection(("127.0.0.1", gw.port), timeout=5)
    f = s.makefile("rb")
    s.sendall(b"GET /api/one HTTP/1.1\r\nHost: x\r\n\r\n")
    st, h, b = read_response(f)
    assert st == 200 and json.loads(b)["path"] == "/one"
    # Three pipelined requests in one write; answers come back in order.
    s.sendall(b"GET /api/p1 HTTP/1.1\r\nHost: x\r\n\r\nPOST /api/p2 HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"
              b"GET /api/p3 HTTP/1.1\r\nHost: x\r\n\r\n")
    paths = []
    for _ in range(3):
        st, h, b = read_response(f)
        assert st == 200
        paths.append(json.loads(b)["path"])
    assert paths == ["/p1", "/p2", "/p3"]
    s.close()


def test_expect_100_continue(gw):
    s = socket.create_connection(("127.0.0.1", gw.port), timeout=5)
    s.sendall(b"POST /api/e HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n")
    interim = s.recv(100)
    assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
    s.sendall(b"data")
    st, h, b = read_response(s.makefile("rb"))
    assert st == 200 and json.loads(b)["body"] == "data"
    s.close()


def test_expect_100_continue_refused_early_without_body(gw):
    resp = raw_exchange(gw.port, b"POST /nothing HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n")
    assert resp.startswith(b"HTTP/1.1 404 ")
    assert b"100 Continue" not in resp


def test_no_route_and_method_not_allowed(gw):
    st, h, b = get(gw.url("/elsewhere"))
    assert st == 404 and error_code(b) == "no_route"
    assert h["Content-Type"] == "application/json" and h["X-Request-Id"]
    st, h, b = get(gw.url("/api/x"), method="DELETE")
    assert st == 405 and error_code(b) == "method_not_allowed"
    # RFC 9110 15.5.6: a 405 says which methods the path answers (both routes on /api/).
    assert h["Allow"] == "GET, HEAD, POST, PUT", h
    # The admin listener's too.
    st, h, _ = get(f"http://127.0.0.1:{gw.admin_port}/reload", method="GET")
    assert st == 405 and h["Allow"] == "POST"


def test_backend_down_gives_502(gw):
    st, _, b = get(gw.url("/dead/x"))
    assert st == 502 and error_code(b) == "upstream_unreachable"


def test_slow_backend_gives_504(gw):
    t0 = time.monotonic()
    st, _, b = get(gw.url("/api/delay/3000"))
    assert st == 504 and error_code(b) == "upstream_timeout", b
    assert time.monotonic() - t0 < 2.5  # the 800ms response timeout, not the backend's 3s


@pytest.mark.parametrize("raw", [
    b"GET / HTTP/1.1\nHost: x\n\n",
    b"POST /api/x HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    b"POST /api/x HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
    b"GET /api/x HTTP/1.1\r\nHost: x\r\nX: a\r\n folded\r\n\r\n",
    b"GET /api/x HTTP/2.0\r\nHost: x\r\n\r\n",
    b"GET /api/x HTTP/1.1\r\nBad Header: x\r\nHost: x\r\n\r\n",
    b"GET /api/../admin HTTP/1.1\r\nHost: x\r\n\r\n",
    b"POST /api/x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
])
def test_malformed_request_gets_json_400_and_close(gw, backends, raw):
    _, bs = backends
    hits = sum(b.hits for b in bs)
    resp = raw_exchange(gw.port, raw + b"GET /api/smuggled HTTP/1.1\r\nHost: x\r\n\r\n")
    head, _, body = resp.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 "), resp
    assert b"Connection: close" in head
    assert error_code(body) == "bad_request"
    assert sum(b.hits for b in bs) == hits, "nothing reached a backend"
    # Still serving.
    assert get(gw.url("/api/still"))[0] == 200


def test_limits_431_and_413(gw):
    resp = raw_exchange(gw.port, b"GET /api/x HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 5000 + b"\r\n\r\n")
    assert resp.startswith(b"HTTP/1.1 431 ")
    assert error_code(resp.partition(b"\r\n\r\n")[2]) == "headers_too_large"
    st, _, b = get(gw.url("/api/x"), method="POST", data=b"x" * (300 * 1024))
    assert st == 413 and error_code(b) == "body_too_large"
    chunked = b"POST /api/x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + (b"10000\r\n" + b"y" * 65536 + b"\r\n") * 5
    resp = raw_exchange(gw.port, chunked)
    assert resp.startswith(b"HTTP/1.1 413 ")


def test_slow_head_is_cut_off(gw):
    t0 = time.monotonic()
    resp = raw_exchange(gw.port, b"GET /api/x HTTP/1.1\r\nHost: x\r\n", timeout=5)
    elapsed = time.monotonic() - t0
    assert resp.startswith(b"HTTP/1.1 408 "), resp
    assert 0.9 <= elapsed < 3.0


def test_large_bodies_are_streamed_intact(gw):
    for kind, n in (("big", 1_000_000), ("bigchunked", 700_001)):
        st, h, b = get(gw.url(f"/api/{kind}/{n}"))
        assert st == 200
        assert len(b) == n
        expected = (hashlib.sha256(b"seed").hexdigest().encode() * (n // 64 + 1))[:n]
        assert hashlib.sha256(b).digest() == hashlib.sha256(expected).digest()
        if kind == "big":
            assert h["Content-Length"] == str(n)
        else:
            assert h.get("Transfer-Encoding") == "chunked"


def test_client_hangup_cancels_upstream_call(gw, backends):
    _, bs = backends
    for b in bs:
        b.hangups.clear()
    s = socket.create_connection(("127.0.0.1", gw.port), timeout=5)
    s.sendall(b"GET /api/hang HTTP/1.1\r\nHost: x\r\n\r\n")
    wait_until(lambda: any(r["path"] == "/hang" for b in bs for r in b.requests), what="backend to receive /hang")
    t0 = time.monotonic()
    s.close()
    wait_until(lambda: any(b.hangups.is_set() for b in bs), timeout=3, what="backend to see the upstream connection close")
    assert time.monotonic() - t0 < 0.8   # well before the 800ms response timeout would have


def test_round_robin_spreads_over_ips(gw, backends):
    _, bs = backends
    before = [b.hits for b in bs]
    for _ in range(30):
        assert get(gw.url("/api/rr"))[0] == 200
    spread = [b.hits - x for b, x in zip(bs, before)]
    assert all(n >= 5 for n in spread), spread


def test_stats_counts(gw):
    before = gw.stats()
    get(gw.url("/api/s1"))
    get(gw.url("/nowhere"))
    get(gw.url("/dead/x"))
    after = gw.stats()
    d = {k: after["requests"]["by_status"][k] - before["requests"]["by_status"][k] for k in ("2xx", "4xx", "5xx")}
    assert d == {"2xx": 1, "4xx": 1, "5xx": 1}
    assert after["requests"]["total"] - before["requests"]["total"] == 3
    assert after["routes"]["reads"]["requests"] - before["routes"]["reads"]["requests"] == 1
    assert after["version"] and after["uptime_seconds"] > 0
    assert set(after["latency_ms"]) >= {"p50", "p90", "p99", "max"}
    assert after["latency_ms"]["p50"] <= after["latency_ms"]["p99"] <= after["latency_ms"]["max"] + 0.01


def test_graceful_stop_finishes_requests_in_flight(backends):
    g = make_gateway(backends, workers=2)
    results = []

    def call():
        results.append(get(g.url("/api/delay/600"), timeout=10)[0])

    threads = [threading.Thread(target=call) for _ in range(6)]
    for t in threads:
        t.start()
    wait_until(lambda: g.stats()["requests"]["in_flight"] == 6, what="6 requests in flight")
    g.signal(signal.SIGTERM)
    # Draining: new connections are refused while in-flight ones finish.
    wait_until(lambda: _refused(g.port), timeout=3, what="listener closed")
    for t in threads:
        t.join(10)
    assert results == [200] * 6
    g.proc.wait(10)
    assert g.proc.returncode == 0
    assert "stopped after" in g.logs()


def _descriptor_tables(pid):
    """Per thread: the targets of its open descriptors (socket:[inode], file paths)."""
    tables = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        fds = set()
        d = f"/proc/{pid}/task/{tid}/fd"
        for fd in os.listdir(d):
            try:
                fds.add(os.readlink(f"{d}/{fd}"))
            except OSError:
                pass
        tables[int(tid)] = fds
    return tables


def _listening_inodes(pid, port):
    inodes = set()
    with open(f"/proc/{pid}/net/tcp") as f:
        for line in f.readlines()[1:]:
            cols = line.split()
            if int(cols[1].split(":")[1], 16) == port and cols[3] == "0A":
                inodes.add(f"socket:[{cols[9]}]")
    return inodes


def test_each_listener_lives_in_one_workers_descriptor_table_only(backends, tmp_path):
    """With `workers_private_fd_tables: true` (opt-in since issue 38; the default is one
    table, see test_operations.py) workers run with descriptor tables of their own: each listening
    socket is open in its worker's table and nowhere else, so a drain's close makes the
    kernel refuse connections at once; the access-log file is open only in the process's
    table (its writer thread's), so a rotated file is freed when it is reopened."""
    port, _ = backends
    text = CONFIG.replace("{BACKEND_PORT}", str(port)).replace("{DEAD_PORT}", str(free_port("127.0.0.5")))
    text = text.replace("{IPS}", ", ".join(BACKEND_IPS)).replace("{{", "{").replace("}}", "}")
    log_path = str(tmp_path / "access.log")
    g = Gateway(text.replace("admin:\n", f"workers_private_fd_tables: true\nlog: {{ access_log: {log_path} }}\nadmin:\n", 1), workers=2)
    try:
        assert get(g.url("/api/x"))[0] == 200
        pid = g.proc.pid
        listeners = _listening_inodes(pid, g.port)
        assert len(listeners) == 2, listeners   # one per worker (SO_REUSEPORT)
        tables = _descriptor_tables(pid)
        holders = {l: [tid for tid, fds in tables.items() if l in fds] for l in listeners}
        assert all(len(h) == 1 for h in holders.values()), holders
        owners = {h[0] for h in holders.values()}
        assert len(owners) == 2 and pid not in owners, (owners, pid)
        assert log_path in tables[pid], "the access log is open in the process's table"
        assert all(log_path not in tables[t] for t in owners), "a worker keeps a copy of the access log"
    finally:
        assert g.stop() == 0, g.logs()


def _refused(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return False
    except OSError:
        return True


def test_cli_check_help_version(tmp_path):
    qw = quickway_binary()
    out = subprocess.run([qw, "--help"], capture_output=True, text=True, timeout=10)
    assert out.returncode == 0 and "serve --config FILE" in out.stdout
    out = subprocess.run([qw, "--version"], capture_output=True, text=True, timeout=10)
    assert out.returncode == 0 and out.stdout.startswith("quickway ")
    bad = tmp_path / "bad.yaml"
    bad.write_text("listen: 127.0.0.1:8080\nservices:\n  s: { host: h, ips: [127.0.0.2] }\nroutes:\n  - name: r\n    match: { path_prefix: / }\n    service: nope\n")
    out = subprocess.run([qw, "check", "--config", str(bad)], capture_output=True, text=True, timeout=10)
    assert out.returncode == 1
    assert f"{bad}:7: routes[0].service: no service named \"nope\"" in out.stderr
    out = subprocess.run([qw, "serve", "--config", str(bad)], capture_output=True, text=True, timeout=10)
    assert out.returncode == 1
    out = subprocess.run([qw, "check", "--config", os.path.join(ROOT, "config.yaml")], capture_output=True, text=True, timeout=10)
    assert out.returncode == 0, out.stderr


def test_cli_flag_spellings_and_usage_errors(tmp_path):
    qw = quickway_binary()
    conf = os.path.join(ROOT, "config.yaml")
    for args in (["check", "-c", conf], ["check", f"--config={conf}"], ["check"]):
        out = subprocess.run([qw, *args], capture_output=True, text=True, timeout=10, cwd=ROOT)
        assert out.returncode == 0 and "config.yaml: valid" in out.stdout, (args, out.stderr)
    for args in ([], ["help"], ["help", "serve"], ["serve", "--help"]):
        out = subprocess.run([qw, *args], capture_output=True, text=True, timeout=10)
        assert out.returncode == 0 and "--config" in out.stdout, args
    assert "SIGHUP" in subprocess.run([qw, "--help"], capture_output=True, text=True, timeout=10).stdout
    out = subprocess.run([qw, "version"], capture_output=True, text=True, timeout=10)
    assert out.returncode == 0 and out.stdout.startswith("quickway ")
    # Usage errors: exit 2 with the reason on stderr.
    for args in (["bogus"], ["check", "--config"], ["check", "extra"], ["serve", "--port", "1"],
                 ["demo-backends", "--backend", "nope"], ["sign", "--key", "k"]):
        out = subprocess.run([qw, *args], capture_output=True, text=True, timeout=10)
        assert out.returncode == 2 and "Error:" in out.stderr, (args, out.returncode, out.stderr)


def test_idle_keepalive_connection_is_closed(backends):
    g = make_gateway(backends, workers=1)
    try:
        text = open(g.config_path).read()
        assert "client_idle_timeout: 5s" in text
        s = socket.create_connection(("127.0.0.1", g.port), timeout=10)
        s.sendall(b"GET /api/idle HTTP/1.1\r\nHost: x\r\n\r\n")
        st, _, _ = read_response(s.makefile("rb"))
        assert st == 200
        t0 = time.monotonic()
        assert s.recv(1) == b""          # the gateway closes the idle connection
        elapsed = time.monotonic() - t0
        assert 4.5 <= elapsed < 7.5, elapsed
        s.close()
    finally:
        g.stop()


def _manifest_code():
    """Package.swift without its comments (a comment may say "not -Ounchecked")."""
    import re
    text = open(os.path.join(ROOT, "Package.swift")).read()
    # String literals are kept whole (URLs hold "//"); comments are dropped.
    return re.sub(r'("(?:[^"\\\n]|\\.)*")|//[^\n]*|/\*.*?\*/',
                  lambda m: m.group(1) or "", text, flags=re.S)


def test_release_build_keeps_bounds_and_overflow_checks():
    """Issue 12: the shipped binary is built with SwiftPM's -O, the same checked build that
    is fuzzed. Nothing in the manifest may turn the checks off again: no -Ounchecked, no
    other "unchecked" compiler setting (e.g. -enforce-exclusivity=unchecked) and no
    -remove-runtime-asserts, for QuickwayCore, quickway or any other target."""
    import re
    code = _manifest_code()
    assert 'name: "QuickwayCore"' in code and 'name: "quickway"' in code, "manifest layout changed"
    literals = re.findall(r'"((?:[^"\\]|\\.)*)"', code)
    bad = [s for s in literals if "unchecked" in s.lower() or "remove-runtime-asserts" in s.lower()]
    assert not bad, f"Package.swift turns runtime checks off: {bad}"
    # The unchecked mode written without a string literal (a Swift setting or condition).
    assert not re.search(r"unchecked", code, flags=re.I), "Package.swift mentions 'unchecked' outside comments"
