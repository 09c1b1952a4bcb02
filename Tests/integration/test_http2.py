"""HTTP/2 for clients (issue 14): the real binary spoken to by independent HTTP/2
implementations (curl with nghttp2, python-hyper's `h2`) over TLS (ALPN h2) and
cleartext (h2c with prior knowledge), and attacked with raw frames. Expectations come
from RFC 9113 and the spec's config and stats names, not from the code."""
import hashlib
import json
import os
import resource
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time

import pytest

from harness import ROOT, Backend, Gateway, free_port, rss_kb, wait_until

h2 = pytest.importorskip("h2")
import h2.config  # noqa: E402
import h2.connection  # noqa: E402
import h2.events  # noqa: E402
import h2.exceptions  # noqa: E402
import h2.settings  # noqa: E402
import hpack  # noqa: E402
from hyperframe.frame import (ContinuationFrame, DataFrame, HeadersFrame, PingFrame, RstStreamFrame,  # noqa: E402
                              SettingsFrame, WindowUpdateFrame)

from test_tls_listener import CertAuthority  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "examples"))
import qw1_client  # noqa: E402

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
SALT = "h2-salt"
SECRET = "h2-secret"

CONFIG = """
listen: 127.0.0.1:{PORT}
workers: 1
admin: { listen: 127.0.0.1:{ADMIN} }
tls_listen:
  listen: 127.0.0.1:TLS_PORT
  certificates:
    - { cert_file: API_CERT, key_file: API_KEY }
  alpn: [h2, http/1.1]
http2:
  max_concurrent_streams: 16
  max_header_list_bytes: 8KiB
  initial_window_bytes: 64KiB
limits:
  max_body_bytes: 2MiB
  client_header_timeout: 2s
  client_idle_timeout: 4s
  drain_timeout: 10s
auth:
  salt: h2-salt
  keys:
    - { id: app, secret: h2-secret }
cache: { max_object_bytes: 64KiB }
services:
  api: { host: api.internal, port: BACKEND_PORT, ips: [127.0.0.2], timeouts: { connect: 500ms, response: 20s } }
routes:
  - { name: signed, match: { path_prefix: /signed/ }, service: api, strip_prefix: true, auth: required }
  - { name: cached, match: { path_prefix: /c/ }, service: api, strip_prefix: true, cache: { ttl: 60s }, coalesce: true, auth: off }
  - { name: api, match: { path_prefix: /api/ }, service: api, strip_prefix: true, auth: off }
"""


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("h2"))
    ca = CertAuthority(d)
    cert = ca.leaf("api", "api.test")
    backend = Backend("127.0.0.2", free_port("127.0.0.2"))
    tls_port = free_port()
    text = (CONFIG.replace("TLS_PORT", str(tls_port)).replace("BACKEND_PORT", str(backend.server.server_address[1]))
            .replace("API_CERT", cert[0]).replace("API_KEY", cert[1]))
    g = Gateway(text)
    g.tls_port = tls_port
    g.ca = ca
    yield g, backend
    assert g.stop() == 0, g.logs()
    backend.stop()


# MARK: an HTTP/2 client on h2 (python-hyper), plain or TLS

class H2Client:
    """One HTTP/2 connection driven by the `h2` state machine. `raw()` writes bytes that
    bypass it (for attacks)."""

    def __init__(self, g, tls=False, settings=None, window=None):
        raw = socket.create_connection(("127.0.0.1", g.tls_port if tls else g.port), timeout=10)
        if tls:
            ctx = ssl.create_default_context(cafile=g.ca.ca_file)
            ctx.set_alpn_protocols(["h2", "http/1.1"])
            raw = ctx.wrap_socket(raw, server_hostname="api.test")
            assert raw.selected_alpn_protocol() == "h2"
        self.sock = raw
        self.conn = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self.conn.initiate_connection()
        if settings:
            self.conn.update_settings(settings)
        self.flush()
        self.responses = {}   # stream id -> {"headers", "data", "ended", "reset"}
        self.goaway = None
        self.closed = False
        self.got_settings = False
        deadline = time.monotonic() + 5
        while not self.got_settings and time.monotonic() < deadline and self.pump(0.2):
            pass
        assert self.got_settings, "no SETTINGS from the gateway"

    def flush(self):
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def request(self, method, path, headers=(), body=None, end=True):
        sid = self.conn.get_next_available_stream_id()
        hs = [(":method", method), (":path", path), (":scheme", "https"), (":authority", "api.test")] + list(headers)
        self.conn.send_headers(sid, hs, end_stream=body is None and end)
        self.responses[sid] = {"headers": None, "data": bytearray(), "ended": False, "reset": None}
        if body is not None:
            self.send_body(sid, body, end=end)
        self.flush()
        return sid

    def send_body(self, sid, body, end=True):
        view = memoryview(body)
        while view:
            if self.responses[sid]["reset"] is not None or self.closed:
                return   # answered and reset before the whole body was sent
            try:
                window = min(self.conn.local_flow_control_window(sid), self.conn.max_outbound_frame_size)
            except h2.exceptions.StreamClosedError:
                return
            if window <= 0:
                self.pump(0.5)
                continue
            try:
                self.conn.send_data(sid, bytes(view[:window]))
            except h2.exceptions.StreamClosedError:
                return   # answered (and reset) before the whole body was sent
            view = view[window:]
            self.flush()
        if end:
            self.conn.end_stream(sid)
            self.flush()

    def pump(self, timeout=5.0):
        """Reads once (up to `timeout`) and handles the events; False once closed."""
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(65536)
        except socket.timeout:
            return True
        except (ConnectionResetError, ssl.SSLError, OSError):
            data = b""
        if not data:
            self.closed = True
            return False
        for ev in self.conn.receive_data(data):
            r = self.responses.get(getattr(ev, "stream_id", None))
            if isinstance(ev, h2.events.ResponseReceived):
                r["headers"] = dict(ev.headers)
            elif isinstance(ev, h2.events.DataReceived):
                r["data"] += ev.data
                self.conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            elif isinstance(ev, h2.events.StreamEnded):
                r["ended"] = True
            elif isinstance(ev, h2.events.StreamReset):
                if r is not None:
                    r["reset"] = ev.error_code
            elif isinstance(ev, h2.events.ConnectionTerminated):
                self.goaway = ev
            elif isinstance(ev, h2.events.RemoteSettingsChanged):
                self.got_settings = True
        self.flush()
        return True

    def wait(self, sids, timeout=15):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(self.responses[s]["ended"] or self.responses[s]["reset"] is not None for s in sids):
                return [self.responses[s] for s in sids]
            if not self.pump(0.2) and not all(self.responses[s]["ended"] for s in sids):
                raise AssertionError(f"connection closed; goaway={self.goaway}")
        raise AssertionError("timed out waiting for responses")

    def get(self, path, headers=()):
        r = self.wait([self.request("GET", path, headers)])[0]
        return int(r["headers"][":status"]), r["headers"], bytes(r["data"])

    def raw(self, data):
        self.sock.sendall(data)

    def read_until_closed(self, timeout=10):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.pump(0.2):
                return True
        return False

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def raw_h2(g):
    """A socket that has sent the preface and an empty SETTINGS (h2c), for raw frames."""
    s = socket.create_connection(("127.0.0.1", g.port), timeout=10)
    s.sendall(PREFACE + SettingsFrame(0).serialize())
    return s


def read_all_until_close(s, timeout=10):
    """Reads until the gateway closes (True) or the time is up (False); returns (closed, bytes)."""
    s.settimeout(0.2)
    out = bytearray()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            b = s.recv(65536)
        except socket.timeout:
            continue
        except (ConnectionResetError, OSError):
            return True, bytes(out)
        if not b:
            return True, bytes(out)
        out += b
    return False, bytes(out)


def frames(data):
    """The frames in a byte stream: (type, flags, stream id, payload)."""
    i, out = 0, []
    while i + 9 <= len(data):
        length = int.from_bytes(data[i:i + 3], "big")
        if i + 9 + length > len(data):
            break
        out.append((data[i + 3], data[i + 4], int.from_bytes(data[i + 5:i + 9], "big") & 0x7FFFFFFF, data[i + 9:i + 9 + length]))
        i += 9 + length
    return out


def goaway_code(data):
    """The error code of the first GOAWAY frame (type 7) in a byte stream, or None."""
    return next((int.from_bytes(p[4:8], "big") for t, _, _, p in frames(data) if t == 7 and len(p) >= 8), None)


def still_serves(g):
    c = H2Client(g)
    try:
        status, _, _ = c.get("/api/still-ok")
        assert status == 200
    finally:
        c.close()


# MARK: protocols

@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is installed by .ci/run")
def test_curl_h2c_prior_knowledge_and_h2_over_tls_and_http11(env):
    g, _ = env
    for args, url, version in ((["--http2-prior-knowledge"], f"http://127.0.0.1:{g.port}/api/curl", "2"),
                               (["--http2", "--cacert", g.ca.ca_file, "--resolve", f"api.test:{g.tls_port}:127.0.0.1"],
                                f"https://api.test:{g.tls_port}/api/curl", "2"),
                               (["--http1.1", "--cacert", g.ca.ca_file, "--resolve", f"api.test:{g.tls_port}:127.0.0.1"],
                                f"https://api.test:{g.tls_port}/api/curl", "1.1"),
                               ([], f"http://127.0.0.1:{g.port}/api/curl", "1.1")):
        out = subprocess.run(["curl", "-sS", *args, "-o", "-", "-w", "\n%{http_code} %{http_version}", url],
                             capture_output=True, text=True, timeout=20)
        assert out.returncode == 0, out.stderr
        body, _, tail = out.stdout.rpartition("\n")
        assert tail == f"200 {version}", (args, tail)
        assert json.loads(body)["path"] == "/curl"


def test_alpn_picks_h2_when_offered_and_http11_otherwise(env):
    g, _ = env
    for offered, chosen in ((["h2", "http/1.1"], "h2"), (["http/1.1", "h2"], "h2"), (["http/1.1"], "http/1.1")):
        ctx = ssl.create_default_context(cafile=g.ca.ca_file)
        ctx.set_alpn_protocols(offered)
        with ctx.wrap_socket(socket.create_connection(("127.0.0.1", g.tls_port), timeout=5), server_hostname="api.test") as s:
            assert s.selected_alpn_protocol() == chosen, offered


def test_many_streams_on_one_connection_each_one_exchange(env):
    g, backend = env
    c = H2Client(g, tls=True)
    try:
        sids = [c.request("GET", f"/api/multi/{i}") for i in range(12)]
        for i, r in enumerate(c.wait(sids)):
            assert r["headers"][":status"] == "200"
            assert json.loads(bytes(r["data"]))["path"] == f"/multi/{i}"
            assert r["headers"]["x-request-id"]
            assert "connection" not in r["headers"] and "transfer-encoding" not in r["headers"]
        # The backend saw HTTP/1.1 requests with the host the client named.
        seen = [r for r in backend.requests if r["path"].startswith("/multi/")]
        assert len(seen) == 12 and all(r["headers"]["X-Forwarded-Host"] == "api.test" for r in seen)
    finally:
        c.close()


def test_signed_calls_over_h2(env):
    g, backend = env
    c = H2Client(g)
    try:
        target = "/signed/orders?b=2&a=1"
        auth = qw1_client.authorization("app", SECRET, SALT, "GET", target, b"")
        status, headers, body = c.get(target, [("authorization", auth)])
        assert status == 200, body
        assert json.loads(body)["headers"]["X-Quickway-Key"] == "app"
        status, headers, body = c.get("/signed/orders")
        assert status == 401 and json.loads(body)["error"]["code"] == "auth_missing"
        assert headers["content-type"] == "application/json"
        # A signed POST with a body that arrives in DATA frames.
        payload = b'{"order": 7}' * 1000
        auth = qw1_client.authorization("app", SECRET, SALT, "POST", "/signed/post", payload)
        sid = c.request("POST", "/signed/post", [("authorization", auth), ("content-type", "application/json")], body=payload)
        r = c.wait([sid])[0]
        assert r["headers"][":status"] == "200", bytes(r["data"])
        assert json.loads(bytes(r["data"]))["body"] == payload.decode()
    finally:
        c.close()


def test_a_connection_idle_past_a_sweep_keeps_answering_after_its_frame_pages_go_back(env):
    """An idle connection's frame buffer pages are handed back to the kernel (idle for
    250 ms, at the worker's 250 ms sweep) and read as zeros after: the answers that
    follow on the same connection, small and of many frames, and over TLS, arrive
    whole. The idle wait is the scenario, not a wait for a result."""
    g, backend = env
    expected = (hashlib.sha256(b"seed").hexdigest().encode() * (300_000 // 64 + 1))[:300_000]
    for tls in (False, True):
        c = H2Client(g, tls=tls)
        try:
            for _ in range(3):
                status, headers, body = c.get("/api/anything")
                assert status == 200, body
                status, headers, body = c.get("/api/big/300000")
                assert status == 200 and body == expected
                time.sleep(0.8)
        finally:
            c.close()


def test_cache_hits_and_merged_requests_over_h2(env):
    g, backend = env
    c = H2Client(g, tls=True)
    try:
        first = c.get("/c/h2-cached")
        second = c.get("/c/h2-cached")
        assert first[0] == second[0] == 200 and first[2] == second[2]
        assert second[1]["x-cache"] == "HIT" and int(second[1]["age"]) >= 0
        # 10 identical requests at once on one connection, to a slow path: one upstream call.
        before = backend.path_hits("/delay/400")
        sids = [c.request("GET", "/c/delay/400") for _ in range(10)]
        rs = c.wait(sids)
        assert all(r["headers"][":status"] == "200" for r in rs)
        assert backend.path_hits("/delay/400") - before == 1
        assert sum(r["headers"]["x-cache"] == "COALESCED" for r in rs) == 9
    finally:
        c.close()


def test_large_bodies_stream_both_ways_with_flow_control(env):
    g, backend = env
    c = H2Client(g, tls=True)
    try:
        # 3 MB down: far over the 64 KiB stream window, so it moves only as we open it.
        status, headers, body = c.get("/api/big/3000000")
        assert status == 200 and len(body) == 3_000_000
        expect = (hashlib.sha256(b"seed").hexdigest().encode() * (3_000_000 // 64 + 1))[:3_000_000]
        assert hashlib.sha256(body).digest() == hashlib.sha256(expect).digest()
        # 1.5 MB up, in DATA frames limited by the gateway's window.
        payload = os.urandom(750_000).hex().encode()
        sid = c.request("POST", "/api/upload", [("content-type", "application/octet-stream")], body=payload)
        r = c.wait([sid])[0]
        assert r["headers"][":status"] == "200"
        got = [x for x in backend.requests if x["path"] == "/upload"][-1]["body"]
        assert got == payload
        # Over max_body_bytes (2 MiB): 413, and the rest of the body is not wanted.
        sid = c.request("POST", "/api/upload", body=b"x" * (3 * 1024 * 1024))
        r = c.wait([sid])[0]
        assert r["headers"][":status"] == "413"
    finally:
        c.close()


def test_stream_reset_cancels_the_upstream_call(env):
    g, backend = env
    backend.hangups.clear()
    c = H2Client(g)
    try:
        sid = c.request("GET", "/api/hang")
        wait_until(lambda: any(r["path"] == "/hang" for r in backend.requests), timeout=5, what="the call upstream")
        c.conn.reset_stream(sid, error_code=8)   # CANCEL
        c.flush()
        assert backend.hangups.wait(5), "the upstream call was not cancelled by the stream reset"
        # The connection goes on serving.
        assert c.get("/api/after-reset")[0] == 200
    finally:
        c.close()


def test_h2_limits_from_config(env):
    g, _ = env
    c = H2Client(g)
    try:
        settings = c.conn.remote_settings
        assert settings.max_concurrent_streams == 16
        assert settings.max_header_list_size == 8192
        assert settings.initial_window_size == 65536
        # A header list over max_header_list_bytes: 431, the connection goes on.
        status, _, body = c.get("/api/big-headers", [("x-big", "a" * 9000)])
        assert status == 431 and json.loads(body)["error"]["code"] == "headers_too_large"
        assert c.get("/api/after")[0] == 200
    finally:
        c.close()
    # Over max_concurrent_streams (raw frames: the h2 client would not let us): RFC 9113
    # 5.1.2 allows a stream error (REFUSED_STREAM) or a connection error (PROTOCOL_ERROR).
    s = raw_h2(g)
    try:
        enc = hpack.Encoder()
        out = b""
        for i in range(20):
            block = enc.encode([(":method", "GET"), (":path", f"/api/limit/{i}"), (":scheme", "http"), (":authority", "a")])
            out += HeadersFrame(1 + 2 * i, block, flags=["END_HEADERS", "END_STREAM"]).serialize()
        s.sendall(SettingsFrame(0, flags=["ACK"]).serialize() + out)
        _, data = read_all_until_close(s, timeout=2)
        fs = frames(data)
        refused = sum(1 for f in fs if f[0] == 3 and int.from_bytes(f[3][:4], "big") == 7)
        goaway = [int.from_bytes(f[3][4:8], "big") for f in fs if f[0] == 7]
        assert refused >= 4 or goaway == [1], (refused, goaway)
    finally:
        s.close()


def test_malformed_requests_get_a_400_on_their_stream(env):
    g, backend = env
    s = raw_h2(g)
    try:
        enc = hpack.Encoder()
        cases = [
            [(":method", "GET"), (":path", "/api/malformed-1"), (":scheme", "http"), (":authority", "a.test"), ("host", "b.test")],
            [(":method", "CONNECT"), (":authority", "internal:22")],
            [(":method", "GET"), (":path", "/api/malformed-3/%2e%2e/admin"), (":scheme", "http"), (":authority", "a.test")],
        ]
        out = b""
        for i, hs in enumerate(cases):
            out += HeadersFrame(1 + 2 * i, enc.encode(hs), flags=["END_HEADERS", "END_STREAM"]).serialize()
        s.sendall(SettingsFrame(0, flags=["ACK"]).serialize() + out)
        _, data = read_all_until_close(s, timeout=1.5)
        dec = hpack.Decoder()
        statuses = {}
        for ftype, _, sid, payload in frames(data):
            if ftype == 1:   # HEADERS
                statuses[sid] = dict(dec.decode(payload))[":status"]
            elif ftype == 3:   # RST_STREAM
                statuses.setdefault(sid, "reset")
        assert statuses.get(1) == "400", statuses       # :authority and host differ
        assert statuses.get(3) in ("400", "reset"), statuses   # CONNECT
        assert statuses.get(5) == "400", statuses       # an encoded dot segment, as for HTTP/1.1
        time.sleep(0.3)   # (a request wrongly forwarded would reach the backend by now)
        assert not [r for r in backend.requests if "malformed" in r["path"] or "admin" in r["path"]], \
            "a malformed request reached the backend"
    finally:
        s.close()


# MARK: attacks

def test_rapid_reset_is_cut_off(env):
    """CVE-2023-44487: streams opened and reset in a loop. The gateway ends the
    connection (GOAWAY) long before the loop ends, and keeps serving others."""
    g, backend = env
    s = raw_h2(g)
    before_hits = backend.hits
    enc = hpack.Encoder()
    sent, closed = 0, False
    try:
        s.sendall(SettingsFrame(0, flags=["ACK"]).serialize())
        for i in range(5000):
            sid = 1 + 2 * i
            block = enc.encode([(":method", "GET"), (":path", f"/api/rr/{i}"), (":scheme", "http"), (":authority", "a")])
            try:
                s.sendall(HeadersFrame(sid, block, flags=["END_HEADERS", "END_STREAM"]).serialize()
                          + RstStreamFrame(sid, error_code=8).serialize())
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            sent += 1
        if not closed:
            closed, data = read_all_until_close(s, timeout=5)
        assert closed, "the connection survived 5,000 rapid resets"
    finally:
        s.close()
    assert sent < 5000 or g.stats()["protocols"]["h2"]["protocol_errors"] >= 1
    # Once the reset rate is exceeded nothing more is dispatched: few of the 5,000 reset
    # streams cost an upstream call (the limit is a burst of 200).
    time.sleep(0.3)   # (calls wrongly started would reach the backend by now)
    assert backend.hits - before_hits <= 250, backend.hits - before_hits
    still_serves(g)


def test_continuation_flood_is_cut_off(env):
    g, _ = env
    s = raw_h2(g)
    try:
        enc = hpack.Encoder()
        first = enc.encode([(":method", "GET"), (":path", "/api/x"), (":scheme", "http"), (":authority", "a")])
        s.sendall(SettingsFrame(0, flags=["ACK"]).serialize() + HeadersFrame(1, first).serialize())
        closed = False
        for i in range(10000):
            try:
                s.sendall(ContinuationFrame(1, enc.encode([(f"x-h{i}", "v" * 100)])).serialize())
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
        if not closed:
            closed, _ = read_all_until_close(s, timeout=5)
        assert closed, "10,000 CONTINUATION frames were taken"
    finally:
        s.close()
    still_serves(g)


@pytest.mark.parametrize("flood", ["settings", "ping"])
def test_settings_and_ping_floods_from_a_client_that_reads_nothing(env, flood):
    g, _ = env
    rss_before = rss_kb(g.proc.pid)
    s = raw_h2(g)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    frame = (SettingsFrame(0, settings={h2.settings.SettingCodes.ENABLE_PUSH: 0}) if flood == "settings"
             else PingFrame(0, opaque_data=b"12345678")).serialize()
    closed = False
    try:
        batch = frame * 1000
        for _ in range(200):   # 200,000 frames, none of whose ACKs is read
            try:
                s.settimeout(2)
                s.sendall(batch)
            except (BrokenPipeError, ConnectionResetError, socket.timeout):
                closed = True
                break
        if not closed:
            closed, _ = read_all_until_close(s, timeout=5)
    finally:
        s.close()
    # Either cut off, or stalled by backpressure; memory did not grow with the flood.
    assert rss_kb(g.proc.pid) - rss_before < 20_000, "the gateway's memory grew with the flood"
    still_serves(g)


def test_hpack_bomb_is_bounded_by_the_header_list_limit(env):
    """One 4 KiB header in the dynamic table, then referenced 2,000 times (one byte each):
    8 MB of decoded headers from a few KB on the wire."""
    g, backend = env
    before = len(backend.requests)
    c = H2Client(g)
    rss_before = rss_kb(g.proc.pid)
    try:
        enc = hpack.Encoder()
        block = enc.encode([(":method", "GET"), (":path", "/api/bomb"), (":scheme", "http"), (":authority", "a"),
                            ("x-bomb", "b" * 4000)])
        # Index 62 is the newest dynamic entry (x-bomb): 0x80 | 62 = 0xBE, one byte per copy.
        block += b"\xbe" * 2000
        c.raw(HeadersFrame(1, block[:16000], flags=(["END_HEADERS", "END_STREAM"] if len(block) <= 16000 else ["END_STREAM"])).serialize())
        if len(block) > 16000:
            c.raw(ContinuationFrame(1, block[16000:], flags=["END_HEADERS"]).serialize())
        closed, data = read_all_until_close(c.sock, timeout=2)
        assert b"431" in data or closed or goaway_code(data) is not None
        assert len(backend.requests) == before
    finally:
        c.close()
    assert rss_kb(g.proc.pid) - rss_before < 20_000
    still_serves(g)


def test_a_window_never_opened_holds_no_memory_and_is_reset(env):
    """The client sets its stream window to 0 and asks for 3 MB answers it never takes.
    The gateway holds a bounded amount per stream (not the answers), and resets the
    streams after client_idle_timeout (4s here)."""
    g, backend = env
    rss_before = rss_kb(g.proc.pid)
    s = socket.create_connection(("127.0.0.1", g.port), timeout=10)
    try:
        s.sendall(PREFACE + SettingsFrame(0, settings={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0}).serialize())
        enc = hpack.Encoder()
        out = b""
        for i in range(10):
            out += HeadersFrame(1 + 2 * i, enc.encode([(":method", "GET"), (":path", f"/api/big/3000000?n={i}"),
                                                      (":scheme", "http"), (":authority", "a")]),
                                flags=["END_HEADERS", "END_STREAM"]).serialize()
        s.sendall(SettingsFrame(0, flags=["ACK"]).serialize() + out)
        wait_until(lambda: sum(r["path"].startswith("/big/3000000") for r in backend.requests) >= 10, timeout=10,
                   what="the 10 calls upstream")
        time.sleep(0.5)
        grown = rss_kb(g.proc.pid) - rss_before
        assert grown < 12_000, f"RSS grew {grown} KiB for 30 MB of answers nobody reads"
        # The streams are reset (RST_STREAM, type 3) once they make no progress.
        s.settimeout(0.5)
        data = bytearray()
        deadline = time.monotonic() + 10
        resets = 0
        while time.monotonic() < deadline and resets < 10:
            try:
                b = s.recv(65536)
            except socket.timeout:
                continue
            if not b:
                break
            data += b
            resets = sum(1 for f in frames(data) if f[0] == 3)
        assert resets >= 10, f"{resets} of 10 stuck streams reset"
    finally:
        s.close()
    still_serves(g)


def test_invalid_preface(env):
    g, _ = env
    # On the plain listener, something that is not the preface is HTTP/1.1 (here: bad).
    s = socket.create_connection(("127.0.0.1", g.port), timeout=5)
    s.sendall(b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n")
    _, data = read_all_until_close(s, timeout=3)
    s.close()
    assert data.startswith(b"HTTP/1.1 400"), data[:60]
    # Over TLS with ALPN h2, a connection that does not open with the preface is closed.
    before = g.stats()["protocols"]["h2"]["protocol_errors"]
    ctx = ssl.create_default_context(cafile=g.ca.ca_file)
    ctx.set_alpn_protocols(["h2"])
    t = ctx.wrap_socket(socket.create_connection(("127.0.0.1", g.tls_port), timeout=5), server_hostname="api.test")
    t.sendall(b"GET / HTTP/1.1\r\nHost: api.test\r\n\r\n")
    closed, data = read_all_until_close(t, timeout=5)
    t.close()
    assert closed and not data.startswith(b"HTTP/1.1")
    wait_until(lambda: g.stats()["protocols"]["h2"]["protocol_errors"] > before, timeout=5, what="the error counted")


# MARK: stats, drain

def test_stats_and_metrics_per_protocol(env):
    g, _ = env
    c = H2Client(g)
    try:
        assert c.get("/api/count")[0] == 200
    finally:
        c.close()
    st = g.stats()
    assert st["protocols"]["h2"]["connections"] >= 1 and st["protocols"]["h2"]["requests"] >= 1
    assert st["protocols"]["http/1.1"]["connections"] >= 1
    assert st["tls"]["handshakes"] >= 1 and 0 <= st["tls"]["resumption_rate"] <= 1
    cert = st["tls"]["certificates"][0]
    assert cert["names"] == ["api.test"] and 0.5 < cert["expires_in_days"] <= 1.01
    import urllib.request
    text = urllib.request.urlopen(f"http://127.0.0.1:{g.admin_port}/metrics", timeout=5).read().decode()
    assert 'quickway_connections_total{protocol="h2"}' in text
    assert 'quickway_protocol_requests_total{protocol="h2"}' in text
    assert "quickway_tls_certificate_expiry_seconds{" in text
    assert 'quickway_tls_handshake_failures_total{reason="not_tls"}' in text


def test_goaway_on_drain_lets_open_streams_finish(tmp_path):
    """SIGTERM: GOAWAY (NO_ERROR) naming the last stream taken, that stream still gets its
    whole answer, then the connection closes and the process exits 0. Raw frames: the
    `h2` client stops taking frames once it sees a GOAWAY."""
    backend = Backend("127.0.0.2", free_port("127.0.0.2"))
    text = CONFIG.replace("BACKEND_PORT", str(backend.server.server_address[1]))
    text = text[:text.index("tls_listen:")] + text[text.index("http2:"):]
    g = Gateway(text)
    try:
        s = raw_h2(g)
        block = hpack.Encoder().encode([(":method", "GET"), (":path", "/api/delay/800"), (":scheme", "http"), (":authority", "a")])
        s.sendall(SettingsFrame(0, flags=["ACK"]).serialize() + HeadersFrame(1, block, flags=["END_HEADERS", "END_STREAM"]).serialize())
        wait_until(lambda: any(r["path"] == "/delay/800" for r in backend.requests), timeout=5, what="the slow call")
        g.signal(signal.SIGTERM)
        closed, data = read_all_until_close(s, timeout=10)
        s.close()
        assert closed, "the connection was not closed after the drain"
        fs = frames(data)
        goaways = [(int.from_bytes(f[3][0:4], "big") & 0x7FFFFFFF, int.from_bytes(f[3][4:8], "big")) for f in fs if f[0] == 7]
        # Two steps (RFC 9113 6.8): a notice naming 2^31-1, then the final one naming stream 1.
        assert goaways == [(2**31 - 1, 0), (1, 0)], goaways
        heads = [f for f in fs if f[0] == 1 and f[2] == 1]
        assert heads and dict(hpack.Decoder().decode(heads[0][3]))[":status"] == "200"
        assert any(f[0] == 0 and f[2] == 1 and f[1] & 1 for f in fs) or heads[0][1] & 1, "stream 1 did not end"
        assert g.proc.wait(15) == 0
    finally:
        g.stop()
        backend.stop()


def test_certificates_reload_under_h2_load_with_no_failed_request(tmp_path):
    ca = CertAuthority(str(tmp_path))
    cert = ca.leaf("api", "api.test")
    backend = Backend("127.0.0.2", free_port("127.0.0.2"))
    tls_port = free_port()
    text = (CONFIG.replace("TLS_PORT", str(tls_port)).replace("BACKEND_PORT", str(backend.server.server_address[1]))
            .replace("API_CERT", cert[0]).replace("API_KEY", cert[1]))
    g = Gateway(text)
    g.tls_port, g.ca = tls_port, ca
    failures, done = [], [0]
    stop = threading.Event()

    def load():
        while not stop.is_set():
            try:
                c = H2Client(g, tls=True)
                for _ in range(5):
                    if c.get("/api/reload-load")[0] != 200:
                        failures.append("status")
                    done[0] += 1
                c.close()
            except Exception as e:   # noqa: BLE001 - any failure counts
                failures.append(repr(e))
    threads = [threading.Thread(target=load) for _ in range(3)]
    try:
        for t in threads:
            t.start()
        wait_until(lambda: done[0] >= 30, timeout=15, what="load running")
        new = ca.leaf("api", "api.test")   # renewed on disk, same paths
        g.signal(signal.SIGHUP)

        def serves_new():
            ctx = ssl.create_default_context(cafile=ca.ca_file)
            with ctx.wrap_socket(socket.create_connection(("127.0.0.1", tls_port), timeout=5), server_hostname="api.test") as s:
                from cryptography import x509
                return x509.load_der_x509_certificate(s.getpeercert(binary_form=True)).serial_number == new[2]
        wait_until(serves_new, timeout=10, what="the renewed certificate served")
        mark = done[0]
        wait_until(lambda: done[0] >= mark + 30, timeout=15, what="load after the reload")
    finally:
        stop.set()
        for t in threads:
            t.join(20)
        g.stop()
        backend.stop()
    assert not failures, failures[:5]


# MARK: memory per connection (review findings)

BUDGET_CONFIG = """
listen: 127.0.0.1:{PORT}
workers: 1
admin: { listen: 127.0.0.1:{ADMIN} }
http2: { max_concurrent_streams: 128 }
# Bodies held in memory up to 1 MiB each (not spooled at 64 KiB), so many streams'
# bodies meet the connection's budget.
limits: { max_body_bytes: 2MiB, client_idle_timeout: 30s, client_body_buffer_size: 1MiB }
cache: { max_object_bytes: 1MiB }
services:
  api: { host: api.internal, port: BACKEND_PORT, ips: [127.0.0.2], timeouts: { response: 20s } }
routes:
  - { name: api, match: { path_prefix: /api/ }, service: api, strip_prefix: true, coalesce: false }
"""


@pytest.fixture()
def budget_env():
    backend = Backend("127.0.0.2", free_port("127.0.0.2"))
    g = Gateway(BUDGET_CONFIG.replace("BACKEND_PORT", str(backend.server.server_address[1])))
    yield g, backend
    g.stop()
    backend.stop()


def test_a_client_that_reads_nothing_cannot_pin_many_whole_answers(budget_env):
    """Window 0 and 100 requests for 900 KB answers (buffered whole: under
    max_object_bytes), never read: only a budget's worth (8 MiB) enters the pipeline, the
    rest wait; memory stays bounded; once the client reads, every answer arrives."""
    g, backend = budget_env
    rss_before = rss_kb(g.proc.pid)
    s = socket.create_connection(("127.0.0.1", g.port), timeout=10)
    try:
        s.sendall(PREFACE + SettingsFrame(0, settings={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0}).serialize())
        enc = hpack.Encoder()
        out = SettingsFrame(0, flags=["ACK"]).serialize()
        for i in range(100):
            out += HeadersFrame(1 + 2 * i, enc.encode([(":method", "GET"), (":path", f"/api/sized/900000/{i}"),
                                                      (":scheme", "http"), (":authority", "a")]),
                                flags=["END_HEADERS", "END_STREAM"]).serialize()
        s.sendall(out)
        wait_until(lambda: backend.hits >= 8, timeout=10, what="the first calls upstream")
        time.sleep(1.0)   # (more calls, if any were let through, would have started by now)
        assert backend.hits <= 10, f"{backend.hits} answers pinned by a client that reads nothing"
        assert rss_kb(g.proc.pid) - rss_before < 30_000
        # Now read: open the connection window and every stream's, and take all answers.
        s.sendall(WindowUpdateFrame(0, window_increment=2**31 - 1 - 65535).serialize()
                  + b"".join(WindowUpdateFrame(1 + 2 * i, window_increment=2**31 - 1).serialize() for i in range(100)))
        got, ended, data = 0, set(), bytearray()
        s.settimeout(0.5)
        deadline = time.monotonic() + 60
        while len(ended) < 100 and time.monotonic() < deadline:
            try:
                b = s.recv(1 << 20)
            except socket.timeout:
                continue
            if not b:
                break
            data += b
            i = 0
            while i + 9 <= len(data):
                length = int.from_bytes(data[i:i + 3], "big")
                if i + 9 + length > len(data):
                    break
                if data[i + 3] == 0:
                    got += length
                    if data[i + 4] & 1:
                        ended.add(int.from_bytes(data[i + 5:i + 9], "big") & 0x7FFFFFFF)
                    if length:   # keep the windows open
                        s.sendall(WindowUpdateFrame(0, window_increment=length).serialize())
                i += 9 + length
            del data[:i]
        assert len(ended) == 100 and got == 100 * 900000, (len(ended), got)
    finally:
        s.close()


def test_many_streams_sending_bodies_at_once_are_bounded(budget_env):
    """48 streams each send 400 KB of a POST body without ending it (19 MB): the connection
    holds at most its budget of request bodies; the streams over it get 503."""
    g, backend = budget_env
    rss_before = rss_kb(g.proc.pid)
    c = H2Client(g, settings={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 1 << 20})
    try:
        sids = [c.request("POST", f"/api/upload/{i}", [("content-length", str(2_000_000))], body=None, end=False) for i in range(48)]
        chunk = b"x" * 16384
        sent = dict.fromkeys(sids, 0)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and any(v < 400_000 for v in sent.values()):
            for sid in sids:   # 400 KB per stream, as fast as the windows allow
                if sent[sid] >= 400_000 or c.responses[sid]["headers"]:
                    sent[sid] = max(sent[sid], 400_000)
                    continue
                if min(c.conn.local_flow_control_window(sid), c.conn.outbound_flow_control_window) < len(chunk):
                    continue
                try:
                    c.conn.send_data(sid, chunk)
                    sent[sid] += len(chunk)
                except (h2.exceptions.StreamClosedError, h2.exceptions.FlowControlError):
                    sent[sid] = 400_000
            c.flush()
            c.pump(0.01)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and sum(1 for s in sids if c.responses[s]["headers"]) == 0:
            c.pump(0.2)
        statuses = [c.responses[s]["headers"][":status"] for s in sids if c.responses[s]["headers"]]
        assert statuses and all(st == "503" for st in statuses), statuses
        assert rss_kb(g.proc.pid) - rss_before < 40_000
    finally:
        c.close()
    still_serves(g)


def test_head_of_a_streamed_answer_is_counted_once_as_2xx(env):
    g, backend = env
    wait_until(lambda: g.stats()["requests"]["in_flight"] == 0, timeout=10, what="quiet")
    before = g.stats()["requests"]["by_status"]
    c = H2Client(g)
    try:
        r = c.wait([c.request("HEAD", "/c/big/300000")])[0]   # over max_object_bytes: streamed
        assert r["headers"][":status"] == "200" and not r["data"]
    finally:
        c.close()
    wait_until(lambda: g.stats()["requests"]["in_flight"] == 0, timeout=10, what="the HEAD done")
    after = g.stats()["requests"]["by_status"]
    assert after["4xx"] == before["4xx"], "the HEAD was counted as a client hang-up (499)"
    assert after["2xx"] >= before["2xx"] + 1


def test_h2c_can_be_switched_off(tmp_path):
    backend = Backend("127.0.0.2", free_port("127.0.0.2"))
    g = Gateway(BUDGET_CONFIG.replace("BACKEND_PORT", str(backend.server.server_address[1]))
                .replace("http2: { max_concurrent_streams: 128 }", "http2: { h2c: false }"))
    try:
        s = socket.create_connection(("127.0.0.1", g.port), timeout=5)
        s.sendall(PREFACE + SettingsFrame(0).serialize())
        _, data = read_all_until_close(s, timeout=3)
        s.close()
        assert data.startswith(b"HTTP/1.1 400"), data[:40]
    finally:
        g.stop()
        backend.stop()
