"""Integration tests of WebSocket through the gateway (issue 15).

Client and backend are the `websockets` package (PyPI), independent of the gateway's
code; protocol violations are written by hand on raw sockets. The backend runs in its
own process (Tests/integration/ws_backend.py), so one can be killed mid-session.
"""
import base64
import hashlib
import contextlib
import json
import os
import select
import signal
import socket
import struct
import ssl
import subprocess
import sys
import threading
import time
import urllib.request

import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from harness import ROOT, Gateway, free_port, wait_until

sys.path.insert(0, os.path.join(ROOT, "examples"))
import qw1_client  # noqa: E402

HERE = os.path.dirname(__file__)
SALT = "pepper"
SECRET = "ws-secret"

CONFIG = """
listen: 127.0.0.1:{PORT}
workers: 1
admin: { listen: 127.0.0.1:{ADMIN} }
limits: { drain_timeout: 5s }
auth:
  salt: pepper
  keys:
    - id: ws-app
      secret: ws-secret
services:
  chat:
    host: chat.internal
    port: CHAT_PORT
    ips: [127.0.0.2]
    probe: { kind: tcp, interval: 1s }
  doomed:
    host: doomed.internal
    port: DOOMED_PORT
    ips: [127.0.0.3]
    probe: { kind: tcp, interval: 1s }
  raw:
    host: raw.internal
    port: RAW_PORT
    ips: [127.0.0.4]
    probe: { kind: tcp, interval: 1s }
routes:
  - name: ws
    match: { path_prefix: /ws/ }
    service: chat
    auth: off
    websocket: { heartbeat: 30s, heartbeat_timeout: 10s, max_message_bytes: MAX_MESSAGE }
  - name: ws-rewritten
    match: { path_prefix: /old-ws/ }
    service: chat
    auth: off
    rewrite: { path_regex: "^/old-ws/([a-z0-9]+)/(.*)$", to: "/ws/$1/v2/$2" }
    websocket: {}
  - name: hb
    match: { path_prefix: /hb/ }
    service: chat
    auth: off
    websocket: { heartbeat: 1s, heartbeat_timeout: 1s }
  - name: idle
    match: { path_prefix: /idle/ }
    service: chat
    auth: off
    websocket: { idle_timeout: 1s }
  - name: signed
    match: { path_prefix: /signed/ }
    service: chat
    auth: required
    websocket: {}
  - name: doomed
    match: { path_prefix: /doomed/ }
    service: doomed
    auth: off
    websocket: {}
  - name: raw
    match: { path_prefix: /raw/ }
    service: raw
    auth: off
    websocket: {}
  - name: plain
    match: { path_prefix: /plain/ }
    service: chat
    auth: off
"""


class WSBackend:
    """ws_backend.py in its own process, stopped (or killed) by its PID."""

    def __init__(self, host):
        self.port = free_port(host)
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "ws_backend.py"), host, str(self.port)],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        ready, _, _ = select.select([self.proc.stdout], [], [], 10)
        assert ready and self.proc.stdout.readline().strip() == b"ready", "ws backend did not start"

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


class RawBackend:
    """A WebSocket backend written by hand (a thread per connection), for what a correct
    library will not do. Paths: `/raw/masked` sends a masked frame, `/raw/badtext` a text
    frame that is not UTF-8; anything else echoes. Every close code it receives is kept
    in `closes`."""

    def __init__(self, host):
        self.port = free_port(host)
        self.closes = []
        self.sock = socket.create_server((host, self.port))
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        try:
            buf = b""
            while b"\r\n\r\n" not in buf:
                chunk = c.recv(4096)
                if not chunk:
                    return   # a TCP probe
                buf += chunk
            head, rest = buf.split(b"\r\n\r\n", 1)
            lines = head.decode("latin-1").split("\r\n")
            path = lines[0].split()[1]
            if path.endswith("/status200"):
                # Not a handshake answer: a 2xx instead of 101.
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok")
                return
            key = [l.split(":", 1)[1].strip() for l in lines if l.lower().startswith("sec-websocket-key:")][0]
            accept = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
            c.sendall(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                       f"Sec-WebSocket-Accept: {accept}\r\n\r\n").encode())
            if path.endswith("/masked"):
                c.sendall(frame(1, b"masked!", mask=True))
            elif path.endswith("/badtext"):
                c.sendall(frame(1, b"\xff\xfe", mask=False))
            r = FrameReader(c, rest)
            while True:
                raw_op, payload = self._read_masked(r)
                if raw_op == 8:
                    self.closes.append(struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else 1005)
                    c.sendall(frame(8, payload[:2], mask=False))
                    return
                if raw_op in (1, 2):
                    c.sendall(frame(raw_op, payload, mask=False))
        except (OSError, EOFError, TimeoutError):
            pass
        finally:
            c.close()

    @staticmethod
    def _read_masked(r):
        deadline = time.monotonic() + 30
        r._need(2, deadline)
        op, n, masked = r.buf[0] & 0x0F, r.buf[1] & 0x7F, r.buf[1] & 0x80
        hl = 2 + (2 if n == 126 else 8 if n == 127 else 0)
        r._need(hl, deadline)
        if n == 126:
            n = struct.unpack("!H", r.buf[2:4])[0]
        elif n == 127:
            n = struct.unpack("!Q", r.buf[2:10])[0]
        k = r.buf[hl:hl + 4] if masked else b"\0\0\0\0"
        hl += 4 if masked else 0
        r._need(hl + n, deadline)
        payload = bytes(b ^ k[i % 4] for i, b in enumerate(r.buf[hl:hl + n]))
        r.buf = r.buf[hl + n:]
        return op, payload

    def stop(self):
        self.sock.close()


@pytest.fixture(scope="module")
def backends():
    chat, doomed, raw = WSBackend("127.0.0.2"), WSBackend("127.0.0.3"), RawBackend("127.0.0.4")
    yield chat, doomed, raw
    chat.stop()
    doomed.stop()
    raw.stop()


def config(backends, max_message="64KiB"):
    chat, doomed, raw = backends
    return (CONFIG.replace("CHAT_PORT", str(chat.port)).replace("DOOMED_PORT", str(doomed.port))
            .replace("RAW_PORT", str(raw.port)).replace("MAX_MESSAGE", max_message))


@pytest.fixture(scope="module")
def gw(backends):
    g = Gateway(config(backends))
    yield g
    assert g.stop() == 0, g.logs()


def url(g, path):
    return f"ws://127.0.0.1:{g.port}{path}"


def ws_stats(g):
    return g.stats()["websocket"]


# ---- raw sockets: the handshake and frames written by hand ----

def raw_handshake(g, path="/ws/raw", extra=""):
    s = socket.create_connection(("127.0.0.1", g.port), timeout=5)
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall((f"GET {path} HTTP/1.1\r\nHost: gw\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n").encode())
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(65536)
        assert chunk, "closed during the handshake"
        buf += chunk
    head, rest = buf.split(b"\r\n\r\n", 1)
    return s, head.decode("latin-1"), rest


def frame(op, payload, fin=True, rsv=0, mask=True):
    b0 = (0x80 if fin else 0) | rsv | op
    n = len(payload)
    m = 0x80 if mask else 0
    if n < 126:
        out = struct.pack("!BB", b0, m | n)
    elif n < 65536:
        out = struct.pack("!BBH", b0, m | 126, n)
    else:
        out = struct.pack("!BBQ", b0, m | 127, n)
    if not mask:
        return out + payload
    key = os.urandom(4)
    return out + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))


class FrameReader:
    def __init__(self, sock, buf=b""):
        self.sock, self.buf = sock, buf

    def _need(self, n, deadline):
        while len(self.buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no frame in time")
            self.sock.settimeout(left)
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError("connection closed")
            self.buf += chunk

    def read(self, timeout=5.0):
        """(opcode, payload) of the next frame (server frames are unmasked)."""
        deadline = time.monotonic() + timeout
        self._need(2, deadline)
        op, n = self.buf[0] & 0x0F, self.buf[1] & 0x7F
        assert self.buf[1] & 0x80 == 0, "the gateway masked a frame to the client"
        hl = 2 + (2 if n == 126 else 8 if n == 127 else 0)
        self._need(hl, deadline)
        if n == 126:
            n = struct.unpack("!H", self.buf[2:4])[0]
        elif n == 127:
            n = struct.unpack("!Q", self.buf[2:10])[0]
        self._need(hl + n, deadline)
        payload = self.buf[hl:hl + n]
        self.buf = self.buf[hl + n:]
        return op, payload

    def close_code(self, timeout=5.0):
        """Reads frames (answering nothing) until a close; its code."""
        deadline = time.monotonic() + timeout
        while True:
            op, payload = self.read(max(0.01, deadline - time.monotonic()))
            if op == 8:
                return struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else 1005


def violation_code(g, frames):
    s, head, rest = raw_handshake(g)
    try:
        assert " 101 " in head.split("\r\n")[0], head
        s.sendall(b"".join(frames))
        return FrameReader(s, rest).close_code()
    finally:
        s.close()


# ---- tests ----

def test_echo_deflate_end_to_end_and_stats(gw):
    before = ws_stats(gw)
    with connect(url(gw, "/ws/echo"), ping_interval=None) as ws:
        # permessage-deflate is negotiated between client and backend; the gateway
        # passes the compressed frames through.
        assert "permessage-deflate" in ws.response.headers.get("Sec-WebSocket-Extensions", "")
        assert ws.response.headers.get("X-Request-Id")
        ws.send("hello")
        assert ws.recv(timeout=5) == "hello"
        ws.send(b"\x00\x01binary")
        assert ws.recv(timeout=5) == b"\x00\x01binary"
        s = ws_stats(gw)
        assert s["open"] == before["open"] + 1 and s["routes"]["ws"] >= 1
    wait_until(lambda: ws_stats(gw)["open"] == before["open"], timeout=5, what="connection counted closed")
    after = ws_stats(gw)
    assert after["messages_in"] - before["messages_in"] == 2
    assert after["messages_out"] - before["messages_out"] == 2
    assert after["bytes_in"] > before["bytes_in"] and after["bytes_out"] > before["bytes_out"]
    assert after["closes"].get("1000", 0) - before["closes"].get("1000", 0) == 1
    with urllib.request.urlopen(f"http://127.0.0.1:{gw.admin_port}/metrics", timeout=5) as r:
        metrics = r.read().decode()
    assert 'quickway_websocket_open{route="ws"}' in metrics
    assert 'quickway_websocket_messages_total{direction="in"}' in metrics
    assert 'quickway_websocket_closes_total{code="1000"}' in metrics
    assert "quickway_websocket_heartbeats_missed_total" in metrics


def test_a_rewritten_websocket_route_reaches_the_backend_on_the_new_path(gw):
    # The handshake is forwarded on the rewritten path, query kept (config.md `rewrite`),
    # and the relay then carries messages both ways as on any route.
    with connect(url(gw, "/old-ws/room7/x/path?since=5"), open_timeout=5) as ws:
        assert ws.recv(timeout=5) == "/ws/room7/v2/x/path?since=5"
        ws.send("after the rewrite")
        assert ws.recv(timeout=5) == "after the rewrite"
    # A path the pattern does not match goes upstream as routed.
    with connect(url(gw, "/old-ws/path"), open_timeout=5) as ws:
        assert ws.recv(timeout=5) == "/old-ws/path"


def test_large_and_fragmented_messages(gw):
    big = os.urandom(60 * 1024)
    with connect(url(gw, "/ws/echo"), ping_interval=None, compression=None, max_size=None) as ws:
        ws.send(big)
        assert ws.recv(timeout=10) == big
        # Fragmented text, a character split between fragments (UTF-8 checked across them).
        ws.send(["héllo ", "wörld ", "€" * 1000])
        assert ws.recv(timeout=5) == "héllo wörld " + "€" * 1000
        ws.send([b"a" * 20000, b"b" * 20000, b"c" * 20000])
        assert ws.recv(timeout=5) == b"a" * 20000 + b"b" * 20000 + b"c" * 20000


def test_message_over_max_closes_1009(gw):
    with connect(url(gw, "/ws/echo"), ping_interval=None, compression=None, max_size=None) as ws:
        ws.send(os.urandom(64 * 1024 + 1))
        with pytest.raises(ConnectionClosed) as e:
            ws.recv(timeout=5)
        assert e.value.rcvd is not None and e.value.rcvd.code == 1009
    # Fragments count together.
    assert violation_code(gw, [frame(2, b"x" * 40000, fin=False), frame(0, b"x" * 40000)]) == 1009


def test_ping_pong_both_ways(gw):
    with connect(url(gw, "/ws/ping"), ping_interval=None) as ws:
        # The backend pings first; the client library answers; the backend says so.
        assert ws.recv(timeout=5) == "pong-ok"
        # The client pings; the backend's pong comes back.
        assert ws.ping(b"from-client").wait(5)


def test_client_that_stops_answering_pings_is_closed(gw):
    before = ws_stats(gw)["heartbeats_missed"]
    s, head, rest = raw_handshake(gw, "/hb/silent")
    try:
        assert " 101 " in head.split("\r\n")[0]
        start = time.monotonic()
        r = FrameReader(s, rest)
        op, payload = r.read(timeout=3)
        assert op == 9, "the gateway pings the client"
        code = r.close_code(timeout=3)
        elapsed = time.monotonic() - start
        # heartbeat 1s + heartbeat_timeout 1s; both deadlines are checked by the worker's
        # 250 ms sweep (up to 0.5 s late together), plus slack for a loaded machine.
        assert code == 1001
        assert elapsed < 1 + 1 + 1.0, elapsed
    finally:
        s.close()
    wait_until(lambda: ws_stats(gw)["heartbeats_missed"] == before + 1, timeout=5, what="heartbeat counted")


def test_client_that_answers_pings_stays_open(gw):
    with connect(url(gw, "/hb/echo"), ping_interval=None) as ws:
        deadline = time.monotonic() + 2.6
        while time.monotonic() < deadline:   # heartbeats come and are answered by the library
            ws.send("still here")
            assert ws.recv(timeout=5) == "still here"
            ws.ping().wait(1)


def test_idle_connection_closed_1001(gw):
    start = time.monotonic()
    with connect(url(gw, "/idle/echo"), ping_interval=None) as ws:
        with pytest.raises(ConnectionClosed) as e:
            ws.recv(timeout=5)
        assert e.value.rcvd.code == 1001
    assert time.monotonic() - start < 2.5


@pytest.mark.parametrize("name,frames,code", [
    ("unmasked client frame", [frame(1, b"hi", mask=False)], 1002),
    ("RSV1 without a negotiated extension", [frame(1, b"hi", rsv=0x40)], 1002),
    ("RSV3", [frame(2, b"hi", rsv=0x10)], 1002),
    ("reserved opcode", [frame(3, b"")], 1002),
    ("control frame over 125 bytes", [frame(9, b"p" * 126)], 1002),
    ("fragmented control frame", [frame(9, b"p", fin=False)], 1002),
    ("continuation without a message", [frame(0, b"x")], 1002),
    ("close code not allowed on the wire", [frame(8, struct.pack("!H", 1005))], 1002),
    ("invalid UTF-8 in text", [frame(1, b"\xc3\x28")], 1007),
    ("invalid UTF-8 across fragments", [frame(1, b"ok \xe2\x82", fin=False), frame(0, b"\x28")], 1007),
])
def test_protocol_violation_closes_with_code(gw, name, frames, code):
    assert violation_code(gw, frames) == code, name


def test_close_handshake_forwarded(gw):
    s, head, rest = raw_handshake(gw, "/ws/echo")
    try:
        s.sendall(frame(1, b"one"))
        r = FrameReader(s, rest)
        assert r.read() == (1, b"one")
        s.sendall(frame(8, struct.pack("!H", 4001) + b"bye"))
        # The backend's answer to the client's close comes back with the client's code.
        assert r.close_code() == 4001
        s.settimeout(3)
        assert s.recv(10) == b"", "the gateway closes the TCP connection after the closing handshake"
    finally:
        s.close()


def test_signed_handshake_accepted_unsigned_refused(gw):
    target = "/signed/headers"
    auth = qw1_client.authorization("ws-app", SECRET, SALT, "GET", target, b"")
    with connect(url(gw, target), additional_headers={"Authorization": auth}, ping_interval=None) as ws:
        seen = json.loads(ws.recv(timeout=5))
        assert seen["x-quickway-key"] == "ws-app", seen
        assert "authorization" not in seen
        ws.send("signed")
        assert ws.recv(timeout=5) == "signed"
    with pytest.raises(InvalidStatus) as e:
        connect(url(gw, target), ping_interval=None, open_timeout=5)
    assert e.value.response.status_code == 401
    bad = qw1_client.authorization("ws-app", "wrong", SALT, "GET", target, b"")
    with pytest.raises(InvalidStatus) as e:
        connect(url(gw, target), additional_headers={"Authorization": bad}, ping_interval=None, open_timeout=5)
    assert e.value.response.status_code == 401


def test_handshake_refusals(gw):
    # An upgrade on a route without a websocket section.
    s, head, _ = raw_handshake(gw, "/plain/x")
    s.close()
    assert head.startswith("HTTP/1.1 400"), head
    # Version 8: 426 with the version the gateway speaks.
    s = socket.create_connection(("127.0.0.1", gw.port), timeout=5)
    s.sendall(b"GET /ws/x HTTP/1.1\r\nHost: gw\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
              b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 8\r\n\r\n")
    answer = s.recv(65536).decode("latin-1")
    s.close()
    assert answer.startswith("HTTP/1.1 426") and "Sec-WebSocket-Version: 13" in answer, answer
    assert '"code":"upgrade_required"' in answer
    # A key that is not 16 bytes of base64.
    s = socket.create_connection(("127.0.0.1", gw.port), timeout=5)
    s.sendall(b"GET /ws/x HTTP/1.1\r\nHost: gw\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
              b"Sec-WebSocket-Key: c2hvcnQ=\r\nSec-WebSocket-Version: 13\r\n\r\n")
    answer = s.recv(65536).decode("latin-1")
    s.close()
    assert answer.startswith("HTTP/1.1 400") and "Sec-WebSocket-Key" in answer, answer


def test_backend_violations_close_the_client_with_1011(gw, backends):
    raw = backends[2]
    for path, backend_code in (("/raw/masked", 1002), ("/raw/badtext", 1007)):
        before = list(raw.closes)
        with connect(url(gw, path), ping_interval=None, compression=None) as ws:
            with pytest.raises(ConnectionClosed) as e:
                ws.recv(timeout=5)
            assert e.value.rcvd is not None and e.value.rcvd.code == 1011, path
        # The backend at fault got the violation's code.
        wait_until(lambda: raw.closes[len(before):] == [backend_code], timeout=5, what=f"backend close for {path}")


def test_client_gone_closes_the_backend_with_1011(gw, backends):
    raw = backends[2]
    before = len(raw.closes)
    s, head, rest = raw_handshake(gw, "/raw/echo")
    assert " 101 " in head.split("\r\n")[0], head
    s.sendall(frame(2, b"payload"))
    assert FrameReader(s, rest).read() == (2, b"payload")
    s.close()
    wait_until(lambda: raw.closes[before:] == [1011], timeout=5, what="backend told 1011")


def test_wss_through_the_tls_listener(backends, tmp_path):
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1",
                    "-subj", "/CN=gw.test", "-addext", "subjectAltName=DNS:gw.test", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    tls_port = free_port()
    text = config(backends).replace("admin: { listen: 127.0.0.1:{ADMIN} }", f"""admin: {{ listen: 127.0.0.1:{{ADMIN}} }}
tls_listen:
  listen: 127.0.0.1:{tls_port}
  certificates: [ {{ cert_file: {cert}, key_file: {key} }} ]
  alpn: [http/1.1]""")
    g = Gateway(text)
    try:
        ctx = ssl.create_default_context(cafile=str(cert))
        with connect(f"wss://127.0.0.1:{tls_port}/ws/echo", ssl=ctx, server_hostname="gw.test", ping_interval=None) as ws:
            ws.send("over tls")
            assert ws.recv(timeout=5) == "over tls"
            big = os.urandom(50000)
            ws.send(big)
            assert ws.recv(timeout=5) == big
    finally:
        assert g.stop() == 0


def test_backend_killed_mid_session_closes_client_1011(gw, backends):
    doomed = backends[1]
    with connect(url(gw, "/doomed/echo"), ping_interval=None) as ws:
        ws.send("before")
        assert ws.recv(timeout=5) == "before"
        doomed.proc.send_signal(signal.SIGKILL)
        doomed.proc.wait()
        with pytest.raises(ConnectionClosed) as e:
            ws.recv(timeout=5)
        assert e.value.rcvd is not None and e.value.rcvd.code == 1011


def test_client_gone_without_close_is_counted_1006(gw):
    before = ws_stats(gw)
    s, head, rest = raw_handshake(gw, "/ws/echo")
    assert " 101 " in head.split("\r\n")[0]
    s.sendall(frame(1, b"x"))
    assert FrameReader(s, rest).read() == (1, b"x")
    s.close()   # no closing handshake: the backend gets 1011 from the gateway
    wait_until(lambda: ws_stats(gw)["closes"].get("1006", 0) == before["closes"].get("1006", 0) + 1,
               timeout=5, what="abnormal close counted")
    wait_until(lambda: ws_stats(gw)["open"] == before["open"], timeout=5, what="connection counted closed")


def test_backpressure_bounds_memory_both_ways(gw):
    """The client sends 24 MiB of 60 KiB messages without reading; the echoes pile up
    until the gateway stops reading the backend, the backend stops reading the gateway,
    and the gateway stops reading the client. Then the client reads everything back,
    in order, and the gateway held a bounded amount meanwhile."""
    s, head, rest = raw_handshake(gw, "/ws/echo")
    assert " 101 " in head.split("\r\n")[0]
    n, size = 400, 60 * 1024
    messages = [bytes([i % 251]) * size for i in range(n)]
    base = rss_bytes(gw.proc.pid)
    peak = [base]
    sent = [0]

    def send_all():
        for m in messages:
            s.sendall(frame(2, m))
            sent[0] += 1
            peak[0] = max(peak[0], rss_bytes(gw.proc.pid))

    t = threading.Thread(target=send_all, daemon=True)
    t.start()
    def sender_stalled():
        # Nobody reads: the sender must come to a stop well before the end (no
        # progress while waiting up to 0.3 s for it to finish).
        before = sent[0]
        t.join(0.3)
        return t.is_alive() and sent[0] == before

    wait_until(sender_stalled, timeout=15, what="the sender blocked by backpressure")
    held = sent[0]
    assert held < n, "everything fitted in buffers: no backpressure seen"
    r = FrameReader(s, rest)
    for i in range(n):
        op, payload = r.read(timeout=10)
        assert op == 2 and payload == messages[i], i
    t.join(10)
    s.close()
    grown = (peak[0] - base) / 2**20
    print(f"\nbackpressure: sender stopped after {held} of {n} messages; gateway RSS grew at most {grown:.1f} MiB")
    assert grown < 16, grown


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def test_thousand_idle_connections_memory(gw):
    n = 1000
    # Warm up (first-use allocations), then measure.
    warm = [raw_handshake(gw, "/ws/idle")[0] for _ in range(20)]
    for s in warm:
        s.close()
    wait_until(lambda: ws_stats(gw)["routes"]["ws"] == 0, timeout=10, what="warm-up connections closed")
    base = rss_bytes(gw.proc.pid)
    socks = []
    try:
        for _ in range(n):
            s, head, _ = raw_handshake(gw, "/ws/idle")
            assert " 101 " in head.split("\r\n")[0]
            socks.append(s)
        wait_until(lambda: ws_stats(gw)["routes"]["ws"] == n, timeout=10, what="1000 open")
        per = (rss_bytes(gw.proc.pid) - base) / n
        print(f"\nwebsocket idle connections: {n}, gateway RSS {base / 2**20:.1f} MiB -> "
              f"{rss_bytes(gw.proc.pid) / 2**20:.1f} MiB, {per:.0f} bytes per connection")
        assert per < 16 * 1024, per
        # Still alive: one of them echoes.
        socks[500].sendall(frame(1, b"alive"))
        assert FrameReader(socks[500]).read() == (1, b"alive")
    finally:
        for s in socks:
            s.close()
    wait_until(lambda: ws_stats(gw)["routes"]["ws"] == 0, timeout=15, what="1000 closed")


def test_reload_keeps_settings_and_drain_sends_1001(backends):
    g = Gateway(config(backends, max_message="1KiB"))
    try:
        with contextlib.ExitStack() as stack:
            old = stack.enter_context(connect(url(g, "/ws/echo"), ping_interval=None, compression=None))
            with open(g.config_path, "w") as f:
                f.write(config(backends, max_message="1MiB").replace("{PORT}", str(g.port)).replace("{ADMIN}", str(g.admin_port)))
            g.signal(signal.SIGHUP)
            wait_until(lambda: "reload: applied" in g.logs(), timeout=5, what="reloaded")
            new = stack.enter_context(connect(url(g, "/ws/echo"), ping_interval=None, compression=None))
            new.send(b"n" * 2048)
            assert new.recv(timeout=5) == b"n" * 2048, "new connections get the new limit"
            old.send(b"o" * 2048)
            with pytest.raises(ConnectionClosed) as e:
                old.recv(timeout=5)
            assert e.value.rcvd.code == 1009, "open connections keep the limit they started with"
            # Drain: every open connection gets 1001, then the gateway exits.
            start = time.monotonic()
            g.signal(signal.SIGTERM)
            with pytest.raises(ConnectionClosed) as e:
                new.recv(timeout=5)
            assert e.value.rcvd.code == 1001
            g.proc.wait(10)
            assert time.monotonic() - start < 5
            assert g.proc.returncode == 0
    finally:
        g.stop()


def _h2_ws_connect(g, path):
    """An extended CONNECT (RFC 8441) with python `h2`; returns (conn, sock, stream id, status)."""
    import h2.config
    import h2.connection
    import h2.events
    import h2.settings
    s = socket.create_connection(("127.0.0.1", g.port), timeout=10)
    c = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
    c.initiate_connection()
    s.sendall(c.data_to_send())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not c.remote_settings.enable_connect_protocol:
        s.settimeout(max(0.01, deadline - time.monotonic()))
        for _ in c.receive_data(s.recv(65536)):
            pass
        s.sendall(c.data_to_send())
    assert c.remote_settings.enable_connect_protocol == 1, "SETTINGS_ENABLE_CONNECT_PROTOCOL not announced"
    sid = c.get_next_available_stream_id()
    c.send_headers(sid, [(":method", "CONNECT"), (":protocol", "websocket"), (":scheme", "http"), (":path", path),
                         (":authority", "chat.test"), ("sec-websocket-version", "13")])
    s.sendall(c.data_to_send())
    status, data = None, b""
    while status is None and time.monotonic() < deadline + 5:
        s.settimeout(1)
        for ev in c.receive_data(s.recv(65536)):
            if isinstance(ev, h2.events.ResponseReceived):
                status = dict(ev.headers)[":status"]
            elif isinstance(ev, h2.events.DataReceived):
                data += ev.data
                c.acknowledge_received_data(ev.flow_controlled_length, sid)
        s.sendall(c.data_to_send())
    return c, s, sid, status, data


def test_websocket_over_http2_extended_connect(gw):
    """RFC 8441: the same WebSocket route reached by an extended CONNECT on an HTTP/2
    connection (h2c here); the stream carries RFC 6455 frames to the same HTTP/1.1 backend."""
    import h2.events
    closes_before = ws_stats(gw)["closes"].get("1000", 0)
    c, s, sid, status, data = _h2_ws_connect(gw, "/ws/h2")
    try:
        assert status == "200", status
        c.send_data(sid, frame(0x1, b"hello over h2"))
        s.sendall(c.data_to_send())
        got = FrameReader(socket.socket(), data)   # parse from the DATA collected below

        def more():
            s.settimeout(1)
            for ev in c.receive_data(s.recv(65536)):
                if isinstance(ev, h2.events.DataReceived):
                    got.buf += ev.data
                    c.acknowledge_received_data(ev.flow_controlled_length, sid)
            s.sendall(c.data_to_send())
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and len(got.buf) < 2 + len(b"hello over h2"):
            more()
        op, payload = got.read(timeout=0.1)
        assert (op, payload) == (0x1, b"hello over h2")
        # A close from the client is answered and the stream ends.
        c.send_data(sid, frame(0x8, struct.pack("!H", 1000)))
        s.sendall(c.data_to_send())
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and len(got.buf) < 4:
            more()
        assert got.close_code(timeout=0.1) == 1000
    finally:
        s.close()
    wait_until(lambda: ws_stats(gw)["closes"].get("1000", 0) > closes_before, timeout=5,
               what="the h2 WebSocket counted as closed with 1000")


def test_extended_connect_refused_where_http11_would_be(gw):
    """Over HTTP/2 the same rules hold: a route without `websocket` answers 400, an
    unsigned handshake on a signed route 401, and the backend never sees either."""
    for path, expect in (("/plain/x", "400"), ("/signed/x", "401")):
        c, s, sid, status, _ = _h2_ws_connect(gw, path)
        s.close()
        assert status == expect, (path, status)


def test_a_handshake_answered_200_is_a_502_on_both_protocols(gw):
    """Attack round 3, item 10: a backend that answers the handshake with 200 instead of
    101 gave an HTTP/2 client `:status 200`, which RFC 8441 reads as an open tunnel."""
    c, s, sid, status, _ = _h2_ws_connect(gw, "/raw/status200")
    s.close()
    assert status == "502", status
    s, head, _ = raw_handshake(gw, "/raw/status200")
    s.close()
    assert head.startswith("HTTP/1.1 502 "), head


def test_an_h2_tunnel_ended_by_the_relay_leaves_no_connection_behind(gw):
    """Item 3: extended CONNECT, one invalid frame (the relay closes with 1002 and ends its
    side), then the client sends GOAWAY and closes at once: the connection stayed in
    CLOSE-WAIT holding its max_connections slot, 5 of 5 tries. Now the count is back to
    its baseline within a second of the client leaving."""
    import h2.events
    base = gw.stats()["connections"]
    for _ in range(5):
        c, s, sid, status, _ = _h2_ws_connect(gw, "/ws/leak")
        assert status == "200", status
        c.send_data(sid, frame(1, b"hi", mask=False))   # unmasked from a client: 1002
        s.sendall(c.data_to_send())
        got = b""
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and len(got) < 4:
            s.settimeout(1)
            try:
                data = s.recv(65536)
            except socket.timeout:
                continue
            if not data:
                break
            for ev in c.receive_data(data):
                if isinstance(ev, h2.events.DataReceived):
                    got += ev.data
        assert got[:1] == b"\x88" and struct.unpack("!H", got[2:4])[0] == 1002, got
        # GOAWAY and the FIN in one segment (corked), as a client that leaves at once sends them.
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
        c.close_connection()
        s.sendall(c.data_to_send())
        s.close()
        left = time.monotonic()
        wait_until(lambda: gw.stats()["connections"] <= base, timeout=3, what="the connection count back to its baseline")
        assert time.monotonic() - left < 3


def test_max_message_bytes_holds_on_the_inflated_size(gw):
    """Attack round 3, item 11: with permessage-deflate a 200 kB message passed a 64 KiB
    limit (only its compressed bytes were counted), and a small frame could inflate to
    gigabytes at the backend. The gateway now inflates (into a scratch buffer, bounded by
    the limit) to count, and closes with 1009."""
    with connect(url(gw, "/ws/echo"), ping_interval=None, max_size=None) as ws:
        assert "permessage-deflate" in ws.response.headers.get("Sec-WebSocket-Extensions", "")
        small = "ok " * 1000                      # 3 kB, well under the limit: passes
        ws.send(small)
        assert ws.recv(timeout=5) == small
        ws.send("a" * 200_000)                    # a few hundred bytes on the wire, 200 kB inflated
        with pytest.raises(ConnectionClosed) as e:
            ws.recv(timeout=5)
        assert e.value.rcvd is not None and e.value.rcvd.code == 1009, e.value
    # A bomb in many fragments: 64 MB of zeros compressed to ~64 kB, as raw frames.
    import zlib
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    data = c.compress(b"\0" * (64 << 20)) + c.flush(zlib.Z_SYNC_FLUSH)
    assert data.endswith(b"\x00\x00\xff\xff")
    data = data[:-4]
    s, head, rest = raw_handshake(gw, extra="Sec-WebSocket-Extensions: permessage-deflate\r\n")
    try:
        assert " 101 " in head.split("\r\n")[0] and "permessage-deflate" in head, head
        pieces = [data[i:i + 8192] for i in range(0, len(data), 8192)]
        out = frame(2, pieces[0], fin=len(pieces) == 1, rsv=0x40)
        for k, p in enumerate(pieces[1:], 1):
            out += frame(0, p, fin=k == len(pieces) - 1)
        try:
            s.sendall(out)
        except OSError:
            pass   # closed before all of it went: fine, the close code says why
        assert FrameReader(s, rest).close_code() == 1009
    finally:
        s.close()
