"""Answer compression (issue 33): brotli, zstd and gzip by Accept-Encoding, through the
real binary against a real backend. Bodies are decoded by independent implementations:
Python's zlib, `brotli` and `zstandard` from PyPI, and curl --compressed. Expectations
follow RFC 9110 (12.5.3 Accept-Encoding, 8.8.1 weak ETags, 12.5.5 Vary) and RFC 9111
5.2.2.6 (no-transform)."""
import gzip
import hashlib
import http.client
import json
import subprocess
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from harness import Gateway, free_port, rss_kb, wait_until

brotli = pytest.importorskip("brotli")
zstandard = pytest.importorskip("zstandard")

CONFIG = """
listen: 127.0.0.1:{PORT}
workers: 1
admin: { listen: 127.0.0.1:{ADMIN} }
http2: { h2c: true }
cache:
  max_bytes: 16MiB
  max_object_bytes: 256KiB
compression:
  encodings: [br, zstd, gzip]
  min_bytes: 1KiB
  types: [application/json, "text/*"]
  level: {gzip: 5, br: 4, zstd: 3}
services:
  api:
    host: api.internal
    port: BACKEND_PORT
    ips: [127.0.0.2]
    timeouts: { connect: 500ms, response: 20s }
routes:
  - name: cached
    match: { path_prefix: /c/ }
    service: api
    cache: { ttl: 60s }
    coalesce: true
    compression: true
  - name: plain
    match: { path_prefix: /p/ }
    service: api
    compression: true
  - name: off
    match: { path_prefix: /off/ }
    service: api
  - name: inflate
    match: { path_prefix: /z/ }
    service: api
    decompress_requests: true
"""


def json_body(n, seed=1):
    out = []
    i = 0
    size = 0
    while size < n:
        item = '{"id":%d,"name":"item-%d","price":%d,"tags":["a","b"]},' % (i, (i * 7919 + seed) % 100000, (i * 31) % 997)
        out.append(item)
        size += len(item)
        i += 1
    return ("[" + "".join(out))[:n].encode()


BLOCK = json_body(65536, seed=3)


class CompressingBackend(BaseHTTPRequestHandler):
    """Answers by path; counts calls per path. The answer never depends on the request's
    Accept-Encoding (except /negotiating, which compresses itself)."""
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send(self, status, body, headers):
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        if "Content-Length" not in headers and "Transfer-Encoding" not in headers:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self):
        srv = self.server
        path = self.path.split("?")[0]
        with srv.lock:
            srv.calls[path] = srv.calls.get(path, 0) + 1
        name = path.rsplit("/", 1)[-1]
        body = json_body(20000)
        j = {"Content-Type": "application/json"}
        if name == "json":
            return self.send(200, body, {**j, "ETag": '"v1"', "Accept-Ranges": "bytes"})
        if name == "slowjson":
            time.sleep(0.3)   # merged waiters pile up meanwhile
            return self.send(200, body, {**j, "ETag": '"v1"'})
        if name == "small":
            return self.send(200, body[:500], j)
        if name == "png":
            return self.send(200, body, {"Content-Type": "image/png"})
        if name == "text":
            return self.send(200, body, {"Content-Type": "text/plain; charset=utf-8"})
        if name == "notype":
            return self.send(200, body, {})
        if name == "encoded":
            return self.send(200, gzip.compress(body), {**j, "Content-Encoding": "gzip"})
        if name == "notransform":
            return self.send(200, body, {**j, "Cache-Control": "no-transform"})
        if name == "range":
            return self.send(206, body[:5000], {**j, "Content-Range": "bytes 0-4999/20000"})
        if name == "nocontent":
            return self.send(204, b"", {})
        if name == "vary":
            return self.send(200, body, {**j, "Vary": "Origin"})
        if name == "weak":
            return self.send(200, body, {**j, "ETag": 'W/"w1"'})
        if name == "error":
            return self.send(500, body, j)
        if name == "huge":
            # 100 MiB, chunked, generated block by block (never held whole here either).
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for _ in range(1600):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(BLOCK), BLOCK))
            self.wfile.write(b"0\r\n\r\n")
            return
        if name == "slow":
            # A streamed answer (its length is over max_object_bytes) whose first piece
            # comes at once and the rest only when the test says so.
            first = b'{"first": "piece", "pad": "' + b"x" * 2000 + b'"'
            rest_len = 400_000
            self.send(200, b"", {**j, "Content-Length": str(len(first) + rest_len)})
            self.wfile.write(first)
            self.wfile.flush()
            srv.release.wait(15)
            self.wfile.write(b" " * rest_len)
            return
        return self.send(404, b'{"missing": true}', j)

    do_HEAD = do_GET

    def do_POST(self):
        """Echoes what arrived: the body's length and hash, and its Content-Encoding."""
        srv = self.server
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        with srv.lock:
            srv.calls[self.path] = srv.calls.get(self.path, 0) + 1
        out = json.dumps({"length": len(body), "sha": hashlib.sha256(body).hexdigest(),
                          "content_encoding": self.headers.get("Content-Encoding")}).encode()
        self.send(200, out, {"Content-Type": "application/json"})


@pytest.fixture(scope="module")
def backend():
    srv = ThreadingHTTPServer(("127.0.0.2", free_port("127.0.0.2")), CompressingBackend)
    srv.daemon_threads = True
    srv.lock = threading.Lock()
    srv.calls = {}
    srv.release = threading.Event()
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    yield srv
    srv.release.set()
    srv.shutdown()
    srv.server_close()


@pytest.fixture(scope="module")
def gw(backend):
    g = Gateway(CONFIG.replace("BACKEND_PORT", str(backend.server_address[1])))
    yield g
    assert g.stop() == 0, g.logs()


def get(g, path, ae=None, method="GET"):
    conn = http.client.HTTPConnection("127.0.0.1", g.port, timeout=20)
    try:
        conn.request(method, path, headers={"Accept-Encoding": ae} if ae is not None else {})
        r = conn.getresponse()
        return r.status, r.getheaders(), r.read()
    finally:
        conn.close()


def header(headers, name):
    vals = [v for k, v in headers if k.lower() == name]
    return vals


def decode(coding, data):
    if coding == "gzip":
        return zlib.decompress(data, 16 + zlib.MAX_WBITS)   # gzip wrapper only
    if coding == "br":
        return brotli.decompress(data)
    if coding == "zstd":
        return zstandard.ZstdDecompressor().decompressobj().decompress(data)
    return data


EXPECTED = json_body(20000)


@pytest.mark.parametrize("ae,coding", [
    ("gzip", "gzip"),
    ("br", "br"),
    ("zstd", "zstd"),
    ("gzip, deflate, br, zstd", "br"),            # equal weights: the config's order
    ("gzip, zstd", "zstd"),
    ("br;q=0.5, gzip;q=1", "gzip"),                # weights outrank the order
    ("br;q=1, gzip;q=0.5", "br"),
    ("br;q=0, gzip", "gzip"),                      # q=0 excludes
    ("gzip;q=0, *", "br"),                         # * covers what is not listed
    ("*;q=0, zstd", "zstd"),
    ("identity;q=0, gzip", "gzip"),
    ("identity, gzip;q=0.5", None),                # identity ranked higher
    ("identity;q=0", None),                        # nothing acceptable: sent as it is
    ("x-gzip", "gzip"),
    ("deflate", None),
    ("", None),
    (None, None),                                  # no Accept-Encoding: identity
])
def test_negotiation(gw, ae, coding):
    status, headers, body = get(gw, "/p/json", ae)
    assert status == 200
    assert header(headers, "content-encoding") == ([coding] if coding else [])
    assert header(headers, "vary") == ["Accept-Encoding"], "every answer that could have been compressed"
    assert decode(coding, body) == EXPECTED
    if coding:
        assert header(headers, "etag") == ['W/"v1"'], "RFC 9110 8.8.1: other bytes, a weak validator"
        assert header(headers, "content-length") == [] and header(headers, "transfer-encoding") == ["chunked"]
        assert header(headers, "accept-ranges") == []
        assert len(body) < len(EXPECTED) / 3
    else:
        assert header(headers, "etag") == ['"v1"']
        assert header(headers, "content-length") == [str(len(EXPECTED))]


@pytest.mark.parametrize("path,status", [
    ("/p/small", 200),        # below min_bytes
    ("/p/png", 200),          # a type not listed
    ("/p/notype", 200),       # no Content-Type
    ("/p/encoded", 200),      # already encoded by the backend
    ("/p/notransform", 200),  # Cache-Control: no-transform
    ("/p/range", 206),        # a range
    ("/p/nocontent", 204),    # no body
    ("/off/json", 200),       # a route without compression
])
def test_answers_never_compressed(gw, backend, path, status):
    s, headers, body = get(gw, path, "br, gzip, zstd")
    assert s == status
    if path == "/p/encoded":
        assert header(headers, "content-encoding") == ["gzip"], "the backend's own coding, untouched"
        assert gzip.decompress(body) == EXPECTED
    else:
        assert header(headers, "content-encoding") == []
    assert "Accept-Encoding" not in ",".join(header(headers, "vary")), "could not have been compressed: no Vary"


def test_head_is_not_compressed(gw):
    s, headers, body = get(gw, "/p/json", "br", method="HEAD")
    assert s == 200 and body == b""
    assert header(headers, "content-encoding") == []


def test_text_wildcard_vary_merge_weak_etag_and_errors(gw):
    s, headers, body = get(gw, "/p/text", "gzip")
    assert header(headers, "content-encoding") == ["gzip"] and decode("gzip", body) == EXPECTED, "text/* covers text/plain"
    s, headers, body = get(gw, "/p/vary", "zstd")
    assert header(headers, "vary") == ["Origin, Accept-Encoding"], "merged into the backend's Vary, not a second line"
    assert decode("zstd", body) == EXPECTED
    s, headers, body = get(gw, "/p/vary", None)
    assert header(headers, "vary") == ["Origin, Accept-Encoding"]
    s, headers, body = get(gw, "/p/weak", "br")
    assert header(headers, "etag") == ['W/"w1"']
    s, headers, body = get(gw, "/p/error", "br")
    assert s == 500 and header(headers, "content-encoding") == ["br"] and decode("br", body) == EXPECTED


@pytest.mark.parametrize("coding", ["br", "zstd", "gzip"])
@pytest.mark.parametrize("http2", [False, True])
def test_curl_compressed_http1_and_http2(gw, coding, http2):
    """curl decodes with its own libraries (zlib, brotli, zstd) over HTTP/1.1 and h2c."""
    args = ["curl", "-s", "-D", "-", "-o", "-", "--compressed", "-H", f"Accept-Encoding: {coding}"]
    args += ["--http2-prior-knowledge"] if http2 else ["--http1.1"]
    out = subprocess.run(args + [gw.url("/p/json")], capture_output=True, timeout=20).stdout
    head, _, body = out.partition(b"\r\n\r\n")
    text = head.decode().lower()
    assert (" 200" in text.splitlines()[0]), text
    assert f"content-encoding: {coding}" in text
    assert "content-length" not in text, "no length for a compressed answer"
    if not http2:
        assert "transfer-encoding: chunked" in text
    assert body == EXPECTED


def test_cached_answer_in_three_codings_and_identity_from_one_upstream_call(gw, backend):
    path = "/c/three/json"
    got = {}
    for ae in ["br", "zstd", "gzip", None, "br", "zstd", "gzip", None]:
        s, headers, body = get(gw, path, ae)
        assert s == 200
        coding = (header(headers, "content-encoding") or [None])[0]
        assert coding == ae
        assert header(headers, "vary") == ["Accept-Encoding"]
        assert decode(coding, body) == EXPECTED
        got.setdefault(ae, []).append((body, header(headers, "x-cache")))
    assert backend.calls.get(path) == 1, "one upstream call for every coding"
    for ae, answers in got.items():
        assert answers[0][0] == answers[1][0], f"{ae}: the stored encoding, byte for byte"
        assert answers[1][1] == ["HIT"]
    # The encodings count against the cache: the figures grew past the identity entry.
    assert gw.stats()["cache"]["bytes"] > 20000 + 3 * 1000


def test_merged_waiters_with_different_codings_each_get_theirs(gw, backend):
    path = "/c/merged/slowjson"
    codings = ["br", "zstd", "gzip", None, "br", "gzip"]
    results = [None] * len(codings)

    def call(i):
        results[i] = get(gw, path, codings[i])

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(codings))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert backend.calls.get(path) == 1, "merged into one upstream call"
    for ae, r in zip(codings, results):
        assert r is not None and r[0] == 200
        coding = (header(r[1], "content-encoding") or [None])[0]
        assert coding == ae
        assert decode(coding, r[2]) == EXPECTED


def test_slow_backend_first_bytes_are_flushed(gw, backend):
    """The first piece of a streamed answer reaches the client, decodable, before the
    backend sends the rest."""
    backend.release.clear()
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=20)
    try:
        conn.request("GET", "/p/slow", headers={"Accept-Encoding": "gzip"})
        r = conn.getresponse()
        assert r.getheader("content-encoding") == "gzip"
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        seen = b""
        deadline = time.monotonic() + 10
        while b'"first": "piece"' not in seen:
            assert time.monotonic() < deadline, "the first piece was held back"
            chunk = r.read1(65536)
            assert chunk, "ended early"
            seen += d.decompress(chunk)
        backend.release.set()
        rest = r.read()
        seen += d.decompress(rest) + d.flush()
        assert len(seen) == 2000 + len('{"first": "piece", "pad": "') + 1 + 400_000
    finally:
        backend.release.set()
        conn.close()


@pytest.mark.parametrize("coding", ["gzip", "br", "zstd"])
def test_100_mib_streamed_with_flat_memory(gw, coding):
    """100 MiB compressed as it streams: the gateway's memory stays flat (never the
    whole body), and the client reads it back whole through an independent decoder."""
    pid = gw.proc.pid
    # Warm up once so allocator arenas and the encoder are in place.
    get(gw, "/p/json", coding)
    before = rss_kb(pid)
    peak = before
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=60)
    try:
        conn.request("GET", "/p/huge", headers={"Accept-Encoding": coding})
        r = conn.getresponse()
        assert r.status == 200 and r.getheader("content-encoding") == coding
        if coding == "gzip":
            d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif coding == "br":
            d = brotli.Decompressor()
        else:
            d = zstandard.ZstdDecompressor().decompressobj()
        h = hashlib.sha256()
        total = 0
        wire = 0
        deadline = time.monotonic() + 120
        while True:
            assert time.monotonic() < deadline, "too slow"
            chunk = r.read1(256 * 1024)
            if not chunk:
                break
            wire += len(chunk)
            out = d.process(chunk) if coding == "br" else d.decompress(chunk)
            h.update(out)
            total += len(out)
            peak = max(peak, rss_kb(pid))
        if coding == "gzip":
            tail = d.flush()
            h.update(tail)
            total += len(tail)
    finally:
        conn.close()
    expected = hashlib.sha256(BLOCK * 1600).hexdigest()
    assert total == len(BLOCK) * 1600
    assert h.hexdigest() == expected
    assert wire < total / 4
    print(f"\n{coding}: 100 MiB -> {wire} bytes on the wire; RSS {before // 1024} MiB before, peak {peak // 1024} MiB")
    assert peak - before < 32 * 1024, f"RSS grew by {(peak - before) // 1024} MiB while streaming 100 MiB"


def post(g, path, body, encoding):
    conn = http.client.HTTPConnection("127.0.0.1", g.port, timeout=20)
    try:
        headers = {"Content-Type": "application/json"}
        if encoding:
            headers["Content-Encoding"] = encoding
        conn.request("POST", path, body=body, headers=headers)
        r = conn.getresponse()
        return r.status, json.loads(r.read() or b"{}")
    finally:
        conn.close()


REQUEST = json_body(300_000, seed=9)


@pytest.mark.parametrize("coding,encode", [
    ("gzip", gzip.compress),
    ("deflate", zlib.compress),   # RFC 9110 8.4.1.2: the zlib format
    ("br", brotli.compress),
    ("zstd", lambda b: zstandard.ZstdCompressor().compress(b)),
])
def test_request_bodies_decoded_on_routes_that_ask(gw, coding, encode):
    status, seen = post(gw, f"/z/{coding}", encode(REQUEST), coding)
    assert status == 200
    assert seen == {"length": len(REQUEST), "sha": hashlib.sha256(REQUEST).hexdigest(), "content_encoding": None}


def test_request_bodies_pass_as_sent_elsewhere(gw):
    sent = gzip.compress(REQUEST)
    status, seen = post(gw, "/off/gz", sent, "gzip")
    assert status == 200 and seen["length"] == len(sent) and seen["content_encoding"] == "gzip"
    # Two codings: not decoded (half-decoding would change what the header says).
    twice = gzip.compress(brotli.compress(REQUEST))
    status, seen = post(gw, "/z/twice", twice, "br, gzip")
    assert status == 200 and seen["length"] == len(twice) and seen["content_encoding"] == "br, gzip"


@pytest.mark.parametrize("coding,encode", [
    ("gzip", gzip.compress),
    ("br", brotli.compress),
    ("zstd", lambda b: zstandard.ZstdCompressor().compress(b)),
])
def test_a_compressed_bomb_is_refused_within_the_limit(gw, backend, coding, encode):
    """64 MiB of zeros in a few KiB: past limits.max_body_bytes (10 MiB), 413, and the
    backend never sees it; the gateway's memory does not grow by the bomb's size."""
    bomb = encode(b"\0" * (64 << 20))
    assert len(bomb) < 1 << 20
    before = rss_kb(gw.proc.pid)
    path = f"/z/bomb-{coding}"
    status, err = post(gw, path, bomb, coding)
    assert status == 413 and err["error"]["code"] == "body_too_large"
    assert backend.calls.get(path) is None
    assert rss_kb(gw.proc.pid) - before < 32 * 1024


def test_a_ratio_past_100_is_refused_under_the_size_limit(gw):
    status, err = post(gw, "/z/ratio", gzip.compress(b"\0" * (4 << 20)), "gzip")
    assert status == 413 and err["error"]["code"] == "body_too_large"


def test_a_body_that_does_not_decode_is_a_bad_request(gw, backend):
    status, err = post(gw, "/z/broken", b"this is not gzip", "gzip")
    assert status == 400 and err["error"]["code"] == "bad_request"
    assert backend.calls.get("/z/broken") is None
