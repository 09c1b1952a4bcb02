"""The plain-HTTP upstream client (UpstreamHTTPCall) against a scripted raw backend.

The backend is a bare socket server that writes exact bytes, so each framing case of
RFC 9112 section 6 is produced on purpose (split heads, 1xx, chunk extensions and
trailers, close-delimited bodies, HTTP/1.0, conflicting lengths) and each connection's
requests are recorded, which shows when the gateway reuses a connection and when not.
"""
import socket
import socketserver
import threading
import time

import pytest

from harness import Gateway, free_port, http_call, wait_until

CONFIG = """
listen: 127.0.0.1:{PORT}
workers: 1
admin: { listen: 127.0.0.1:{ADMIN} }
services:
  raw: { host: raw.internal, port: RAW_PORT, ips: [127.0.0.5], retries: 0, timeouts: { connect: 1s, response: 3s } }
routes:
  - { name: raw, match: { path_prefix: / }, service: raw }
"""

SPLIT = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Split: yes\r\n\r\nhello"
SCRIPTS = {
    "/continue": b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    "/chunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;name=value\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n",
    "/conflicting-length": b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
    "/no-content": b"HTTP/1.1 204 No Content\r\nX-A: 1\r\n\r\n",
    "/http10": b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok",
    "/http09": b"hello from the nineties",
    # A framed answer followed, in the same write, by bytes that look like a second
    # answer: a desynchronised (or malicious) upstream. They must never answer a later call.
    "/extra": b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
              b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\nX-Poisoned: yes\r\n\r\npoisoned",
}


class RawHandler(socketserver.BaseRequestHandler):
    def handle(self):
        server = self.server
        with server.lock:
            server.connections += 1
            conn_id = server.connections
        s = self.request
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        f = s.makefile("rb")
        served = 0
        while True:
            line = f.readline()
            if not line:
                return
            headers = {}
            while True:
                h = f.readline()
                if h in (b"\r\n", b""):
                    break
                k, v = h.decode().split(":", 1)
                headers[k.strip().lower()] = v.strip()
            method, path, _ = line.decode().split(" ")
            if path == "/early":
                # Answers before reading the body (as a server refusing an upload does),
                # then reads it and keeps the connection for the next request.
                s.sendall(b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 0\r\n\r\n")
                time.sleep(0.3)   # the gateway sees the answer with most of the body unsent
            body = f.read(int(headers.get("content-length", 0)))
            with server.lock:
                server.log.append({"conn": conn_id, "method": method, "path": path, "headers": headers, "body": body})
            served += 1
            if path == "/drop-second" and served > 1:
                return                      # closes without answering: a stale keep-alive
            if path in ("/split", "/drop-second"):
                payload = SPLIT if method != "HEAD" else SPLIT[:-5]
                for i in range(len(payload)):
                    s.sendall(payload[i:i + 1])
                    time.sleep(0.0005)
            elif path == "/close-delimited":
                s.sendall(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nread until the end")
                return
            elif path == "/early":
                pass
            elif path in SCRIPTS:
                s.sendall(SCRIPTS[path])
                if path in ("/http10", "/http09"):
                    return
            else:
                s.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")


class RawServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64

    def server_bind(self):
        # A fixed, small receive buffer (inherited by accepted sockets, and it turns off
        # autotuning, which here may grow to 32 MiB): with it, a 6 MiB upload cannot sit
        # whole in kernel buffers while the backend is not reading.
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        super().server_bind()


@pytest.fixture(scope="module")
def env():
    port = free_port("127.0.0.5")
    raw = RawServer(("127.0.0.5", port), RawHandler)
    raw.lock = threading.Lock()
    raw.connections = 0
    raw.log = []
    threading.Thread(target=raw.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    g = Gateway(CONFIG.replace("RAW_PORT", str(port)))
    yield g, raw
    assert g.stop() == 0, g.logs()
    raw.shutdown()
    raw.server_close()


def last(raw, path):
    with raw.lock:
        return [r for r in raw.log if r["path"] == path][-1]


def test_head_split_byte_by_byte_and_the_request_as_sent(env):
    g, raw = env
    st, h, body = http_call(g, "POST", "/split", {"Content-Type": "text/plain", "Accept": "text/plain"}, b"payload")
    assert (st, body, h["x-split"]) == (200, b"hello", "yes")
    seen = last(raw, "/split")
    assert seen["method"] == "POST" and seen["body"] == b"payload"
    assert seen["headers"]["host"] == f"raw.internal:{raw.server_address[1]}"
    assert seen["headers"]["content-length"] == "7"
    assert seen["headers"]["accept"] == "text/plain"       # the client's, nothing added
    assert "expect" not in seen["headers"] and "transfer-encoding" not in seen["headers"]
    assert seen["headers"]["x-forwarded-for"] == "127.0.0.1"


def test_keep_alive_connection_is_reused_for_framed_answers(env):
    g, raw = env
    for path in ("/split", "/chunked", "/no-content", "/continue", "/split"):
        http_call(g, "GET", path)
    conns = {last(raw, p)["conn"] for p in ("/split", "/chunked", "/no-content", "/continue")}
    assert len(conns) == 1, f"one pooled connection expected, saw {conns}"


def test_interim_1xx_chunk_extensions_trailers_and_no_content(env):
    g, _ = env
    assert http_call(g, "GET", "/continue")[::2] == (200, b"ok")
    st, h, body = http_call(g, "GET", "/chunked")
    assert (st, body) == (200, b"hello world")
    assert "transfer-encoding" not in h or h["transfer-encoding"] == "chunked"
    st, h, body = http_call(g, "GET", "/no-content")
    assert (st, body, h["x-a"]) == (204, b"", "1")


def test_close_delimited_and_http10_answers_are_whole_and_not_reused(env):
    g, raw = env
    for path in ("/close-delimited", "/http10"):
        st, _, body = http_call(g, "GET", path)
        assert st == 200, body
        assert body == (b"read until the end" if path == "/close-delimited" else b"ok")
        before = raw.connections
        http_call(g, "GET", "/split")
        assert last(raw, "/split")["conn"] > last(raw, path)["conn"], "a closed connection was reused"
        assert raw.connections >= before


def test_head_request_gets_no_body_and_closes_the_connection(env):
    """A HEAD answer has no body whatever its framing says. The connection is not reused
    after it: a server that writes a body after a HEAD answer anyway would leave it for
    the next call (issue 12; test_request_integrity shows the poisoning)."""
    g, raw = env
    http_call(g, "GET", "/split")
    conn = last(raw, "/split")["conn"]
    st, h, body = http_call(g, "HEAD", "/split")
    assert (st, body, h["content-length"]) == (200, b"", "5")
    assert last(raw, "/split")["method"] == "HEAD"
    assert last(raw, "/split")["conn"] == conn, "the HEAD itself may use the pooled connection"
    http_call(g, "GET", "/split")
    assert last(raw, "/split")["conn"] != conn, "the connection that carried the HEAD was reused"


def test_bytes_after_a_framed_answer_stop_connection_reuse(env):
    """Issue 12: a connection is reused only when the answer ended exactly at its framing.
    After `Content-Length: 5` + `hello`, the upstream wrote what looks like another
    answer (`poisoned`). The next call must get its own answer over a new connection."""
    g, raw = env
    st, h, body = http_call(g, "GET", "/extra")
    assert (st, body, h["content-length"]) == (200, b"hello", "5")
    assert "x-poisoned" not in h
    extra_conn = last(raw, "/extra")["conn"]
    st, h, body = http_call(g, "GET", "/split")
    assert (st, body, h.get("x-split")) == (200, b"hello", "yes"), (st, h, body)
    assert "x-poisoned" not in h
    assert last(raw, "/split")["conn"] != extra_conn, "the connection with bytes after the answer was reused"


def test_invalid_framing_is_a_clean_502(env):
    g, _ = env
    for path in ("/conflicting-length", "/http09"):
        st, _, body = http_call(g, "GET", path)
        assert st == 502 and b"upstream_bad_response" in body, (path, body)


def test_stale_pooled_connection_is_replaced_without_an_error(env):
    """The backend closes a kept-alive connection when the next request arrives on it
    (as a server whose keep-alive timeout just ran out). An idempotent request is sent
    again on a fresh connection; a POST is not (the backend may have processed it: RFC
    9110 9.2.2), and gets a 502 instead of running twice."""
    g, raw = env
    assert http_call(g, "GET", "/drop-second")[0] == 200
    first = last(raw, "/drop-second")["conn"]
    st, _, body = http_call(g, "PUT", "/drop-second", body=b"once")
    assert (st, body) == (200, b"hello")
    with raw.lock:
        seen = [r["conn"] for r in raw.log if r["path"] == "/drop-second"]
    assert seen[-2] == first and seen[-1] != first, seen
    # Now a POST on the connection the PUT left in the pool.
    second = seen[-1]
    st, _, body = http_call(g, "POST", "/drop-second", body=b"once")
    assert st == 502 and b"upstream_bad_response" in body, body
    with raw.lock:
        posts = [r["conn"] for r in raw.log if r["path"] == "/drop-second" and r["method"] == "POST"]
    assert posts == [second], posts


def test_large_request_body_is_written_whole_when_the_socket_fills(env):
    """6 MiB is more than a loopback socket takes at once: the rest goes out as the
    upstream reads (the write event), and every byte arrives in order."""
    import hashlib
    import os
    g, raw = env
    payload = os.urandom(6 * 1024 * 1024)
    st, _, body = http_call(g, "PUT", "/split", {"Content-Type": "application/octet-stream"}, payload, timeout=30)
    assert (st, body) == (200, b"hello")
    seen = last(raw, "/split")
    assert seen["headers"]["content-length"] == str(len(payload))
    assert hashlib.sha256(seen["body"]).hexdigest() == hashlib.sha256(payload).hexdigest()


def test_answer_before_the_body_is_written_does_not_reuse_the_connection(env):
    """An upstream that answers before reading the whole upload leaves part of the
    request unwritten: that connection must not carry the next request."""
    import os
    g, raw = env
    st, _, _ = http_call(g, "POST", "/early", {"Content-Type": "application/octet-stream"}, os.urandom(6 * 1024 * 1024), timeout=30)
    assert st == 413
    st, _, body = http_call(g, "GET", "/split", timeout=10)
    assert (st, body) == (200, b"hello")
    wait_until(lambda: any(r["path"] == "/early" for r in raw.log), what="the backend logged /early")
    assert last(raw, "/split")["conn"] != last(raw, "/early")["conn"]
