"""Request bodies that stream (issue 34, second half): `request_buffering: false` routes
send the body upstream as it arrives, with backpressure both ways, chunked when the
length is unknown, 408 after `client_body_timeout`, and a 502 never retried when the
upstream fails mid-upload; buffered routes keep a body past `client_body_buffer_size`
in a file with no name, gone on every path out.

The backend here is a raw HTTP/1.1 server of the test's own (independent of the
gateway): it decodes `Content-Length` and chunked bodies itself, hashes what it reads
without keeping it, and records when the first body bytes came."""
import hashlib
import json
import os
import socket
import socketserver
import ssl
import sys
import threading
import time

import pytest

from harness import ROOT, Gateway, free_port, rss_kb, wait_until

sys.path.insert(0, os.path.join(ROOT, "examples"))
import qw1_client  # noqa: E402

MiB = 1024 * 1024


class _Handler(socketserver.BaseRequestHandler):
    def handle(self):
        srv = self.server
        sock = self.request
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        f = sock.makefile("rb", buffering=65536)
        with srv.lock:
            srv.connections += 1
        while True:
            line = f.readline()
            if not line:
                return
            method, target, _ = line.decode().split(" ", 2)
            headers = {}
            while True:
                h = f.readline()
                if h in (b"\r\n", b""):
                    break
                k, v = h.decode().split(":", 1)
                headers[k.strip().lower()] = v.strip()
            rec = {"method": method, "target": target, "headers": headers, "bytes": 0, "first_byte": None,
                   "complete": False}
            with srv.lock:
                srv.requests.append(rec)
            if target.startswith("/early"):
                # Answers before reading the body (as a backend refusing an upload does),
                # then closes the way servers do (nginx's lingering close): its side
                # first, reading and dropping what still comes for a moment, so the
                # kernel does not reset the connection over our answer.
                body = b'{"too":"large"}'
                sock.sendall(b"HTTP/1.1 413 Payload Too Large\r\nContent-Type: application/json\r\nContent-Length: "
                             + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)
                sock.shutdown(socket.SHUT_WR)
                sock.settimeout(0.5)
                end = time.monotonic() + 2
                try:
                    while time.monotonic() < end and sock.recv(65536):
                        pass
                except OSError:
                    pass
                return
            digest = hashlib.sha256()
            fail_after = 128 * 1024 if target.startswith("/fail") else None
            pause = {"after": MiB if target.startswith("/pause") else None}

            def take(data):
                if rec["first_byte"] is None and data:
                    rec["first_byte"] = time.monotonic()
                digest.update(data)
                rec["bytes"] += len(data)
                if fail_after is not None and rec["bytes"] >= fail_after:
                    # A reset mid-upload: the backend dies with the body half read.
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                    sock.close()
                    raise ConnectionAbortedError
                if pause["after"] is not None and rec["bytes"] >= pause["after"]:
                    pause["after"] = None
                    rec["paused"] = True
                    srv.release.wait(30)   # stops reading until the test lets it go

            try:
                if headers.get("transfer-encoding", "").lower() == "chunked":
                    while True:
                        size = int(f.readline().split(b";")[0].strip(), 16)
                        if size == 0:
                            while f.readline() not in (b"\r\n", b""):
                                pass
                            break
                        left = size
                        while left:
                            data = f.read(min(left, 65536))
                            if not data:
                                return
                            take(data)
                            left -= len(data)
                        f.readline()
                else:
                    left = int(headers.get("content-length", "0"))
                    while left:
                        data = f.read1(min(left, 65536))
                        if not data:
                            return
                        take(data)
                        left -= len(data)
            except ConnectionAbortedError:
                return
            rec["complete"] = True
            out = json.dumps({"bytes": rec["bytes"], "sha256": digest.hexdigest(),
                              "chunked": "transfer-encoding" in headers,
                              "content_length": headers.get("content-length")}).encode()
            sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                         + str(len(out)).encode() + b"\r\n\r\n" + out)


class _Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    request_queue_size = 128   # many uploads connect at once


class BodyBackend:
    def __init__(self, host, ssl_context=None):
        self.port = free_port(host)
        self.server = _Server((host, self.port), _Handler)
        if ssl_context is not None:
            self.server.socket = ssl_context.wrap_socket(self.server.socket, server_side=True)
        self.server.daemon_threads = True
        self.server.lock = threading.Lock()
        self.server.requests = []
        self.server.connections = 0
        self.server.release = threading.Event()
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    @property
    def requests(self):
        return self.server.requests

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


CONFIG = """
listen: 127.0.0.1:{PORT}
workers: 1
admin: { listen: 127.0.0.1:{ADMIN} }
http2: { h2c: true }
limits:
  max_body_bytes: 2GiB
  client_body_timeout: 1s
  client_body_buffer_size: 64KiB
  client_body_temp_path: TEMP_DIR
auth:
  salt: pepper
  keys: [{id: app, secret: app-secret}]
services:
  api: { host: api.internal, port: BACKEND_PORT, ips: [127.0.0.2], timeouts: { response: 30s } }
  pair: { host: api.internal, port: PAIR_PORT, ips: [127.0.0.3, 127.0.0.4], timeouts: { response: 5s } }
routes:
  - { name: stream, match: { path_prefix: /stream/ }, service: api, strip_prefix: true, auth: off, request_buffering: false }
  - { name: pair, match: { path_prefix: /pair/ }, service: pair, strip_prefix: true, auth: off, request_buffering: false }
  - { name: buffered, match: { path_prefix: /buffered/ }, service: api, strip_prefix: true, auth: off }
  - { name: signed, match: { path_prefix: /signed/ }, service: api, strip_prefix: true }
"""


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    temp = str(tmp_path_factory.mktemp("bodies"))
    backend = BodyBackend("127.0.0.2")
    pair_port = free_port("127.0.0.3", also=("127.0.0.4",))
    pair = []
    for host in ("127.0.0.3", "127.0.0.4"):
        b = BodyBackend.__new__(BodyBackend)
        b.port = pair_port
        b.server = _Server((host, pair_port), _Handler)
        b.server.daemon_threads = True
        b.server.lock = threading.Lock()
        b.server.requests = []
        b.server.connections = 0
        threading.Thread(target=b.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        pair.append(b)
    g = Gateway(CONFIG.replace("BACKEND_PORT", str(backend.port)).replace("PAIR_PORT", str(pair_port))
                .replace("TEMP_DIR", temp))
    yield g, backend, pair, temp
    assert g.stop() == 0, g.logs()
    backend.stop()
    for b in pair:
        b.stop()


def head(method, path, extra=""):
    return f"{method} {path} HTTP/1.1\r\nHost: api.example\r\n{extra}\r\n".encode()


def read_answer(sock, timeout=10):
    """One HTTP/1.1 answer with a Content-Length (status, lower-case headers, body)."""
    sock.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        b = sock.recv(65536)
        if not b:
            raise AssertionError(f"closed before an answer: {data!r}")
        data += b
    head_bytes, rest = data.split(b"\r\n\r\n", 1)
    lines = head_bytes.decode().split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (l.split(":", 1) for l in lines[1:])}
    n = int(headers.get("content-length", "0"))
    while len(rest) < n:
        b = sock.recv(65536)
        if not b:
            break
        rest += b
    return int(lines[0].split()[1]), headers, rest[:n]


def pattern(n, seed=7):
    block = hashlib.sha256(str(seed).encode()).digest() * 2048   # 64 KiB
    return (block * (n // len(block) + 1))[:n]


def deleted_spool_fds(pid, temp):
    """The gateway's descriptors on files with no name in `temp` (O_TMPFILE)."""
    out = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith(temp) and "(deleted)" in target or target.startswith(temp + "/#"):
            out.append(target)
    return out


def test_a_streamed_body_reaches_the_backend_before_the_client_has_sent_it_all(env):
    g, backend, _, _ = env
    body = pattern(4 * MiB)
    s = socket.create_connection(("127.0.0.1", g.port))
    try:
        s.sendall(head("PUT", "/stream/up", f"Content-Length: {len(body)}\r\n") + body[:MiB])
        # Only a quarter is sent: a buffering gateway would hold it all and call nobody.
        wait_until(lambda: backend.requests and backend.requests[-1]["bytes"] >= 512 * 1024, timeout=10,
                   what="the backend reading the body while the client still sends it")
        assert not backend.requests[-1]["complete"]
        s.sendall(body[MiB:])
        status, _, answer = read_answer(s)
    finally:
        s.close()
    assert status == 200, answer
    got = json.loads(answer)
    assert got == {"bytes": len(body), "sha256": hashlib.sha256(body).hexdigest(), "chunked": False,
                   "content_length": str(len(body))}


def test_a_chunked_body_goes_upstream_chunked_and_whole(env):
    g, backend, _, _ = env
    pieces = [pattern(n, seed=n) for n in (1, 4095, 70000, 300000, 17)]
    wire = b"".join(b"%x\r\n" % len(p) + p + b"\r\n" for p in pieces) + b"0\r\n\r\n"
    s = socket.create_connection(("127.0.0.1", g.port))
    try:
        s.sendall(head("POST", "/stream/chunks", "Transfer-Encoding: chunked\r\n") + wire)
        status, _, answer = read_answer(s)
        # The connection is kept: the next request on it is answered too.
        s.sendall(head("POST", "/stream/again", "Content-Length: 3\r\n") + b"abc")
        status2, _, answer2 = read_answer(s)
    finally:
        s.close()
    assert status == 200, answer
    whole = b"".join(pieces)
    assert json.loads(answer) == {"bytes": len(whole), "sha256": hashlib.sha256(whole).hexdigest(), "chunked": True,
                                  "content_length": None}
    assert status2 == 200 and json.loads(answer2)["bytes"] == 3


def test_a_client_that_stalls_mid_body_gets_408_and_the_upstream_call_ends(env):
    g, backend, _, _ = env
    before = len(backend.requests)
    s = socket.create_connection(("127.0.0.1", g.port))
    try:
        start = time.monotonic()
        s.sendall(head("POST", "/stream/stall", "Content-Length: 100000\r\n") + b"x" * 1000)
        status, headers, answer = read_answer(s, timeout=15)
        took = time.monotonic() - start
        s.settimeout(5)
        assert s.recv(100) == b"", "the connection must close after a 408 mid-body"
    finally:
        s.close()
    assert status == 408, answer
    assert json.loads(answer)["error"]["code"] == "request_timeout"
    assert "body" in json.loads(answer)["error"]["message"]
    assert took >= 0.9, took   # client_body_timeout: 1s, between reads
    wait_until(lambda: len(backend.requests) > before, what="the backend seeing the call")
    rec = backend.requests[before]
    assert rec["bytes"] == 1000 and not rec["complete"]


def test_an_upstream_that_fails_mid_upload_is_a_502_and_never_retried(env):
    g, _, pair, _ = env
    before = sum(len(b.requests) for b in pair)
    body = pattern(2 * MiB)
    s = socket.create_connection(("127.0.0.1", g.port))
    try:
        # PUT is idempotent: a buffered PUT would be retried on the other IP.
        s.sendall(head("PUT", "/pair/fail", f"Content-Length: {len(body)}\r\n"))
        try:
            s.sendall(body)
        except OSError:
            pass   # the gateway may stop reading once it has answered
        status, _, answer = read_answer(s)
    finally:
        s.close()
    assert status == 502, answer
    assert json.loads(answer)["error"]["code"] == "upstream_bad_response"
    time.sleep(0.3)   # a retry, if there were one, would be sent at once
    assert sum(len(b.requests) for b in pair) - before == 1


def test_a_backend_answering_before_the_body_is_read_gets_its_answer_relayed(env):
    g, _, _, _ = env
    body = pattern(8 * MiB)
    s = socket.create_connection(("127.0.0.1", g.port))
    try:
        s.sendall(head("POST", "/stream/early", f"Content-Length: {len(body)}\r\n"))
        try:
            s.sendall(body[:MiB])
        except OSError:
            pass
        status, headers, answer = read_answer(s)
    finally:
        s.close()
    assert status == 413 and json.loads(answer) == {"too": "large"}
    assert headers.get("connection") == "close"


def test_a_large_streamed_upload_holds_bounded_memory(env):
    g, backend, _, _ = env
    total = 256 * MiB
    block = pattern(MiB)
    base = rss_kb(g.proc.pid)
    peak = base
    s = socket.create_connection(("127.0.0.1", g.port))
    try:
        s.sendall(head("POST", "/stream/big", f"Content-Length: {total}\r\n"))
        sent = 0
        deadline = time.monotonic() + 120
        while sent < total and time.monotonic() < deadline:
            s.sendall(block)
            sent += len(block)
            if sent % (16 * MiB) == 0:
                peak = max(peak, rss_kb(g.proc.pid))
        status, _, answer = read_answer(s, timeout=60)
    finally:
        s.close()
    peak = max(peak, rss_kb(g.proc.pid))
    assert status == 200, answer
    assert json.loads(answer)["bytes"] == total
    # The body is never held: what the gateway grew is its buffers (a few 64 KiB pieces).
    assert peak - base <= 8 * 1024, f"RSS grew by {peak - base} KiB for a {total // MiB} MiB upload"


def test_a_backend_that_stops_reading_holds_the_client_back_without_the_gateway_holding_the_body(env):
    g, backend, _, _ = env
    total = 64 * MiB
    body = pattern(total, seed=5)
    base = rss_kb(g.proc.pid)
    backend.server.release.clear()
    s = socket.create_connection(("127.0.0.1", g.port))
    try:
        s.sendall(head("POST", "/stream/pause", f"Content-Length: {total}\r\n"))
        s.settimeout(1.0)
        sent = 0
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and sent < total:
            try:
                sent += s.send(body[sent:sent + MiB])
            except socket.timeout:
                break   # held back: nothing moved for a second
        rec = backend.requests[-1]
        assert rec.get("paused"), rec
        peak = rss_kb(g.proc.pid)
        # The backend read 1 MiB and stopped: the client is held to what the sockets'
        # buffers between them take, not let through to the gateway's memory.
        assert sent < total, "the client sent the whole body to a backend that reads nothing"
        held = sent - rec["bytes"]
        assert peak - base <= 8 * 1024, f"RSS grew by {peak - base} KiB with {held} bytes held back"
        backend.server.release.set()
        s.settimeout(30)
        s.sendall(body[sent:])
        status, _, answer = read_answer(s, timeout=30)
    finally:
        backend.server.release.set()
        s.close()
    assert status == 200, answer
    assert json.loads(answer)["sha256"] == hashlib.sha256(body).hexdigest()


def test_a_buffered_body_past_the_buffer_size_is_kept_in_a_file_with_no_name(env):
    g, backend, _, temp = env
    spooled = g.stats()["requests"]["bodies_spooled"]
    body = pattern(3 * MiB, seed=3)
    s = socket.create_connection(("127.0.0.1", g.port))
    try:
        s.sendall(head("POST", "/buffered/spool", f"Content-Length: {len(body)}\r\n") + body[:2 * MiB])
        # Half sent: the gateway holds it in a file in client_body_temp_path, unnamed.
        wait_until(lambda: deleted_spool_fds(g.proc.pid, temp), what="a spool file in the temp path")
        assert os.listdir(temp) == [], "a spool file has no name in the directory"
        s.sendall(body[2 * MiB:])
        status, _, answer = read_answer(s)
    finally:
        s.close()
    assert status == 200, answer
    assert json.loads(answer)["sha256"] == hashlib.sha256(body).hexdigest()
    assert json.loads(answer)["content_length"] == str(len(body))
    wait_until(lambda: not deleted_spool_fds(g.proc.pid, temp), what="the spool file closed after the answer")
    assert g.stats()["requests"]["bodies_spooled"] == spooled + 1

    # A client that leaves mid-body: the file goes too.
    s = socket.create_connection(("127.0.0.1", g.port))
    s.sendall(head("POST", "/buffered/gone", f"Content-Length: {len(body)}\r\n") + body[:MiB])
    wait_until(lambda: deleted_spool_fds(g.proc.pid, temp), what="a spool file for the second upload")
    s.close()
    wait_until(lambda: not deleted_spool_fds(g.proc.pid, temp), what="the spool file closed when the client left")


def test_many_concurrent_signed_uploads_do_not_hold_their_bodies_in_memory(env):
    g, backend, _, _ = env
    n, size = 40, 10 * MiB
    body = pattern(size, seed=11)
    digest = hashlib.sha256(body).hexdigest()
    base = rss_kb(g.proc.pid)
    peak = [base]
    results = []
    lock = threading.Lock()
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], rss_kb(g.proc.pid))
            time.sleep(0.05)

    def upload(i):
        target = f"/signed/up{i}"
        auth = qw1_client.authorization("app", "app-secret", "pepper", "POST", target, body)
        s = socket.create_connection(("127.0.0.1", g.port))
        try:
            s.sendall(head("POST", target, f"Content-Length: {size}\r\nAuthorization: {auth}\r\n"))
            for at in range(0, size, MiB):
                s.sendall(body[at:at + MiB])
                time.sleep(0.01)   # all uploads in flight together
            status, _, answer = read_answer(s, timeout=60)
        finally:
            s.close()
        with lock:
            results.append((status, answer))

    sampler = threading.Thread(target=sample)
    sampler.start()
    threads = [threading.Thread(target=upload, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    stop.set()
    sampler.join()
    assert len(results) == n
    for status, answer in results:
        assert status == 200, answer
        assert json.loads(answer)["sha256"] == digest
    # In memory the bodies would be 400 MiB; each holds 64 KiB and a file instead.
    grew = peak[0] - base
    print(f"{n} concurrent {size // MiB} MiB signed uploads: RSS {base} KiB -> peak {peak[0]} KiB (+{grew} KiB)")
    assert grew <= 48 * 1024, f"RSS grew by {grew} KiB"


def test_a_streamed_body_goes_chunked_to_an_https_service_too(tmp_path):
    pytest.importorskip("cryptography")
    from test_routing import make_ca_and_cert
    paths = make_ca_and_cert(str(tmp_path), "api.internal")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(paths["cert.pem"], paths["key.pem"])
    backend = BodyBackend("127.0.0.2", ssl_context=ctx)
    g = Gateway(f"""
listen: 127.0.0.1:{{PORT}}
workers: 1
admin: {{ listen: 127.0.0.1:{{ADMIN}} }}
limits: {{ client_body_timeout: 1s }}
services:
  secure: {{ host: api.internal, scheme: https, port: {backend.port}, ips: [127.0.0.2], tls: {{ verify: true, ca_file: {paths["ca.pem"]} }} }}
routes:
  - {{ name: up, match: {{ path_prefix: /up/ }}, service: secure, strip_prefix: true, auth: off, request_buffering: false }}
""")
    try:
        pieces = [pattern(n, seed=n) for n in (100, 200000, 5)]
        wire = b"".join(b"%x\r\n" % len(p) + p + b"\r\n" for p in pieces) + b"0\r\n\r\n"
        s = socket.create_connection(("127.0.0.1", g.port))
        try:
            s.sendall(head("POST", "/up/x", "Transfer-Encoding: chunked\r\n") + wire[:1000])
            wait_until(lambda: backend.requests and backend.requests[-1]["bytes"] > 0, what="bytes at the https backend")
            s.sendall(wire[1000:])
            status, _, answer = read_answer(s)
        finally:
            s.close()
        whole = b"".join(pieces)
        assert status == 200, answer
        assert json.loads(answer) == {"bytes": len(whole), "sha256": hashlib.sha256(whole).hexdigest(), "chunked": True,
                                      "content_length": None}
        # And a stall there is a 408 too.
        s = socket.create_connection(("127.0.0.1", g.port))
        try:
            s.sendall(head("POST", "/up/stall", "Content-Length: 5000\r\n") + b"y" * 10)
            status, _, answer = read_answer(s, timeout=15)
        finally:
            s.close()
        assert status == 408, answer
    finally:
        assert g.stop() == 0, g.logs()
        backend.stop()


def h2_client(g):
    pytest.importorskip("h2")
    from test_http2 import H2Client
    return H2Client(g)


def test_over_http2_a_streamed_body_moves_as_the_upstream_takes_it(env):
    g, backend, _, _ = env
    body = pattern(4 * MiB, seed=21)
    c = h2_client(g)
    try:
        sid = c.request("PUT", "/stream/h2", [("content-length", str(len(body)))], body=body[:MiB], end=False)
        wait_until(lambda: backend.requests and backend.requests[-1]["target"] == "/h2"
                   and backend.requests[-1]["bytes"] >= 512 * 1024, timeout=10,
                   what="the backend reading the HTTP/2 body while the client still sends it")
        assert not backend.requests[-1]["complete"]
        c.send_body(sid, body[MiB:])
        r = c.wait([sid], timeout=30)[0]
        assert r["headers"][":status"] == "200", r
        assert json.loads(bytes(r["data"])) == {"bytes": len(body), "sha256": hashlib.sha256(body).hexdigest(),
                                                "chunked": False, "content_length": str(len(body))}
        # No length given: the body goes upstream chunked. And the connection still
        # serves (its window was given back whole).
        small = pattern(300000, seed=22)
        sid = c.request("POST", "/stream/h2b", body=small)
        r = c.wait([sid], timeout=30)[0]
        assert r["headers"][":status"] == "200"
        assert json.loads(bytes(r["data"]))["chunked"] is True
        assert json.loads(bytes(r["data"]))["sha256"] == hashlib.sha256(small).hexdigest()
    finally:
        c.close()


def test_over_http2_a_backend_that_stops_reading_closes_the_client_window(env):
    g, backend, _, _ = env
    backend.server.release.clear()
    # Past what the sockets' buffers between the gateway and the backend take.
    body = pattern(40 * MiB, seed=23)
    base = rss_kb(g.proc.pid)
    c = h2_client(g)
    try:
        sid = c.request("POST", "/stream/pause", [("content-length", str(len(body)))], body=None, end=False)
        view = memoryview(body)
        sent = 0
        deadline = time.monotonic() + 60
        stuck_since = None
        while time.monotonic() < deadline and sent < len(body):
            window = min(c.conn.local_flow_control_window(sid), c.conn.max_outbound_frame_size)
            if window <= 0:
                stuck_since = stuck_since or time.monotonic()
                if time.monotonic() - stuck_since > 1.5:
                    break   # the window stayed shut: the gateway holds the client back
                c.pump(0.2)
                continue
            stuck_since = None
            c.conn.send_data(sid, bytes(view[sent:sent + window]))
            c.flush()
            sent += window
        assert stuck_since is not None and sent < len(body), f"sent {sent} of {len(body)} with the backend not reading"
        rec = backend.requests[-1]
        assert rec.get("paused"), rec
        assert rss_kb(g.proc.pid) - base <= 8 * 1024
        backend.server.release.set()
        c.send_body(sid, body[sent:])
        r = c.wait([sid], timeout=30)[0]
        assert r["headers"][":status"] == "200", r
        assert json.loads(bytes(r["data"]))["sha256"] == hashlib.sha256(body).hexdigest()
    finally:
        backend.server.release.set()
        c.close()


def test_over_http2_a_stalled_stream_gets_408_and_the_connection_serves_on(env):
    g, backend, _, _ = env
    c = h2_client(g)
    try:
        sid = c.request("POST", "/stream/h2stall", [("content-length", "100000")], body=b"z" * 5000, end=False)
        r = c.wait([sid], timeout=15)[0]
        assert r["headers"][":status"] == "408", r
        assert json.loads(bytes(r["data"]))["error"]["code"] == "request_timeout"
        status, _, answer = c.get("/stream/after")
        assert status == 200
    finally:
        c.close()


def test_over_http2_failed_early_answered_and_reset_uploads_leave_the_connection_whole(env):
    g, backend, pair, _ = env
    c = h2_client(g)
    try:
        piece = pattern(MiB, seed=31)
        for _ in range(3):
            sid = c.request("PUT", "/pair/fail", [("content-length", str(4 * MiB))], body=None, end=False)
            c.send_body(sid, piece * 4)
            r = c.wait([sid], timeout=30)[0]
            assert r["headers"] and r["headers"][":status"] == "502", r
            sid = c.request("POST", "/stream/early", [("content-length", str(4 * MiB))], body=None, end=False)
            c.send_body(sid, piece * 4)
            r = c.wait([sid], timeout=30)[0]
            assert r["headers"] and r["headers"][":status"] == "413", r
            # A client that resets its stream while the upstream drains its body.
            sid = c.request("POST", "/stream/reset", [("content-length", str(4 * MiB))], body=piece, end=False)
            wait_until(lambda: backend.requests and backend.requests[-1]["target"] == "/reset", what="the upload under way")
            c.conn.reset_stream(sid)
            c.flush()
        # Every byte of those streams' windows came back: a large upload still moves.
        body = pattern(6 * MiB, seed=32)
        sid = c.request("PUT", "/stream/after", [("content-length", str(len(body)))], body=body)
        r = c.wait([sid], timeout=30)[0]
        assert r["headers"][":status"] == "200", r
        assert json.loads(bytes(r["data"]))["sha256"] == hashlib.sha256(body).hexdigest()
    finally:
        c.close()
