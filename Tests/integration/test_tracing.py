"""Tracing (issue 36, "Traces"): W3C Trace Context in and out, spans exported over OTLP/HTTP.

The collector here is independent of the gateway: a Python HTTP server that decodes each
export with the `opentelemetry-proto` package's own `ExportTraceServiceRequest` (protobuf's
decoder, not ours). Expectations come from the W3C Trace Context spec (traceparent and
tracestate syntax, what a participant sends on), OTLP/HTTP (POST of
`application/x-protobuf` to the traces URL, span kinds, ids as bytes), spec/config.md
(`tracing: {otlp_endpoint, sample_ratio, service_name}`) and spec/admin-and-errors.md
(error codes). The backend records the headers it was sent.
"""
import http.client
import json
import os
import re
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from harness import Backend, Gateway, free_port, wait_until

PARENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_SPAN = "00f067aa0ba902b7"
SAMPLED_PARENT = f"00-{PARENT_TRACE}-{PARENT_SPAN}-01"
TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-(0[01])$")


class Collector:
    """An OTLP/HTTP traces receiver: decodes every export, keeps the spans."""

    def __init__(self):
        self.port = free_port()
        self.spans = []          # (service.name, Span)
        self.posts = []          # (path, content-type)
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                req = trace_service_pb2.ExportTraceServiceRequest()
                req.ParseFromString(body)
                with outer.lock:
                    outer.posts.append((self.path, self.headers.get("Content-Type")))
                    for rs in req.resource_spans:
                        service = {a.key: a.value.string_value for a in rs.resource.attributes}.get("service.name")
                        for ss in rs.scope_spans:
                            for s in ss.spans:
                                outer.spans.append((service, s))
                reply = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def span_list(self):
        with self.lock:
            return [s for _, s in self.spans]

    def wait_for(self, predicate, what, timeout=10):
        found = []

        def check():
            found[:] = [s for s in self.span_list() if predicate(s)]
            return bool(found)
        wait_until(check, timeout=timeout, what=what)
        return found

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def config(endpoint, ratio, backend_port, log, extra_ips="", extra=""):
    return f"""
listen: 127.0.0.1:{{PORT}}
workers: 2
admin: {{ listen: 127.0.0.1:{{ADMIN}} }}
log: {{ level: info, access_log: {log} }}
auth: {{ salt: pepper, keys: [ {{ id: app-a, secret: sa }} ] }}
tracing:
  otlp_endpoint: {endpoint}
  sample_ratio: {ratio}
  service_name: gw-under-test
services:
  api: {{ host: api.internal, port: {backend_port}, ips: [127.0.0.2{extra_ips}], retries: 1, selection: {{ strategy: round_robin }} }}
routes:
  - name: batch
    match: {{ path_prefix: /batch }}
    batch: {{ max_calls: 5, timeout: 3s }}
    auth: optional
  - name: open
    match: {{ path_prefix: /open/ }}
    service: api
    auth: off
""" + extra


@pytest.fixture
def world(tmp_path):
    """A backend, a collector, and a factory for gateways against them (stopped at the end)."""
    backend = Backend("127.0.0.2", free_port("127.0.0.2"))
    collector = Collector()
    gateways = []

    def start(ratio, endpoint=None, extra_ips="", extra=""):
        log = tmp_path / f"access-{len(gateways)}.log"
        g = Gateway(config(endpoint or f"http://127.0.0.1:{collector.port}/v1/traces", ratio, backend.server.server_address[1], log,
                           extra_ips, extra))
        g.access_log = log
        gateways.append(g)
        return g
    try:
        yield backend, collector, start
    finally:
        for g in gateways:
            assert g.stop() == 0, g.logs()
        collector.stop()
        backend.stop()


def get(g, path, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", g.port, timeout=10)
    try:
        conn.request("GET", path, headers=headers or {})
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def sent_upstream(backend, path):
    """The headers (lower-case names) of the last request the backend got for `path`."""
    for r in reversed(backend.requests):
        if r["path"] == path:
            return {k.lower(): v for k, v in r["headers"].items()}
    raise AssertionError(f"the backend got no {path}")


def attrs(kvs):
    out = {}
    for a in kvs:
        v = a.value
        out[a.key] = v.string_value if v.HasField("string_value") else v.int_value
    return out


def log_lines(g):
    def read():
        try:
            return [json.loads(l) for l in open(g.access_log) if l.strip()]
        except FileNotFoundError:
            return []
    return read


def test_a_sampled_parent_is_continued_with_our_span_in_between(world):
    backend, collector, start = world
    g = start(0)   # ratio 0: only the caller's decision samples
    status, _, _ = get(g, "/open/a", {"traceparent": SAMPLED_PARENT, "tracestate": "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"})
    assert status == 200
    up = sent_upstream(backend, "/open/a")
    m = TRACEPARENT.match(up["traceparent"])
    assert m, up["traceparent"]
    assert m.group(1) == PARENT_TRACE, "the trace goes on"
    assert m.group(2) != PARENT_SPAN, "the gateway's span is the backend's parent"
    assert m.group(3) == "01"
    assert up["tracestate"] == "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE", "tracestate passed on as received"

    spans = collector.wait_for(lambda s: s.trace_id.hex() == PARENT_TRACE, "the span of the continued trace")
    assert len(spans) == 1
    s = spans[0]
    assert s.span_id.hex() == m.group(2)
    assert s.parent_span_id.hex() == PARENT_SPAN
    assert s.kind == trace_pb2.Span.SPAN_KIND_SERVER
    assert s.trace_state == "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"
    a = attrs(s.attributes)
    assert a["http.response.status_code"] == 200
    assert a["http.request.method"] == "GET" and a["url.path"] == "/open/a" and a["http.route"] == "open"
    assert a["network.peer.address"] == "127.0.0.2"
    names = [e.name for e in s.events]
    for stage in ("route", "cache.lookup", "upstream.connect", "upstream.first_byte"):
        assert stage in names, names
    connect = next(e for e in s.events if e.name == "upstream.connect")
    assert attrs(connect.attributes)["network.peer.address"] == "127.0.0.2"
    assert s.start_time_unix_nano <= min(e.time_unix_nano for e in s.events) <= max(e.time_unix_nano for e in s.events) <= s.end_time_unix_nano
    assert abs(s.start_time_unix_nano / 1e9 - time.time()) < 60
    assert collector.spans[0][0] == "gw-under-test"
    assert collector.posts[0] == ("/v1/traces", "application/x-protobuf")

    # The access log line carries the request id and the trace id together.
    lines = log_lines(g)
    wait_until(lambda: any(l.get("path") == "/open/a" for l in lines()), what="the access log line")
    line = next(l for l in lines() if l.get("path") == "/open/a")
    assert line["trace_id"] == PARENT_TRACE
    assert line["span_id"] == m.group(2)
    assert line["request_id"] == a["quickway.request_id"]


def test_ratio_zero_samples_nothing_but_still_propagates(world):
    backend, collector, start = world
    g = start(0)
    for i in range(20):
        assert get(g, f"/open/n{i}")[0] == 200
    ids = set()
    for i in range(20):
        m = TRACEPARENT.match(sent_upstream(backend, f"/open/n{i}")["traceparent"])
        assert m and m.group(3) == "00", "not sampled, and said so"
        ids.add(m.group(1))
    assert len(ids) == 20, "each request starts its own trace"
    # An unsampled parent is not forced on at ratio 0 either, but its trace id is kept.
    get(g, "/open/u", {"traceparent": f"00-{PARENT_TRACE}-{PARENT_SPAN}-00"})
    assert sent_upstream(backend, "/open/u")["traceparent"].startswith(f"00-{PARENT_TRACE}-")
    assert sent_upstream(backend, "/open/u")["traceparent"].endswith("-00")
    # A sampled request afterwards arrives alone: nothing else was exported.
    get(g, "/open/s", {"traceparent": SAMPLED_PARENT})
    collector.wait_for(lambda s: s.trace_id.hex() == PARENT_TRACE, "the sampled span")
    assert len(collector.span_list()) == 1
    assert g.stats()["tracing"]["spans_recorded"] == 1


def test_ratio_one_samples_every_request(world):
    backend, collector, start = world
    g = start(1)
    for i in range(30):
        assert get(g, f"/open/r{i}")[0] == 200
    wait_until(lambda: len(collector.span_list()) == 30, what="30 spans")
    sent = {TRACEPARENT.match(sent_upstream(backend, f"/open/r{i}")["traceparent"]).group(2) for i in range(30)}
    assert {s.span_id.hex() for s in collector.span_list()} == sent
    assert all(not s.parent_span_id for s in collector.span_list()), "new traces have no parent"
    wait_until(lambda: g.stats()["tracing"]["spans_exported"] == 30, what="exported counted")


def test_a_malformed_traceparent_starts_a_new_trace_and_drops_tracestate(world):
    backend, collector, start = world
    g = start(1)
    bad = [
        f"00-{PARENT_TRACE.upper()}-{PARENT_SPAN}-01",          # upper case
        f"00-{'0' * 32}-{PARENT_SPAN}-01",                       # all-zero trace id
        f"00-{PARENT_TRACE}-{'0' * 16}-01",                      # all-zero parent id
        f"ff-{PARENT_TRACE}-{PARENT_SPAN}-01",                   # version ff
        f"00-{PARENT_TRACE}-{PARENT_SPAN}-01-extra",             # version 00 with more
    ]
    for i, v in enumerate(bad):
        assert get(g, f"/open/m{i}", {"traceparent": v, "tracestate": "rojo=1"})[0] == 200
        up = sent_upstream(backend, f"/open/m{i}")
        m = TRACEPARENT.match(up["traceparent"])
        assert m and m.group(1) != PARENT_TRACE, (v, up["traceparent"])
        assert "tracestate" not in up, "no tracestate without a valid traceparent"
    wait_until(lambda: len(collector.span_list()) == len(bad), what="the new traces' spans")
    assert all(not s.parent_span_id for s in collector.span_list())
    # A future version is read as version 00 and continued; it goes on as 00.
    get(g, "/open/future", {"traceparent": f"cc-{PARENT_TRACE}-{PARENT_SPAN}-01-more-to-come"})
    assert TRACEPARENT.match(sent_upstream(backend, "/open/future")["traceparent"]).group(1) == PARENT_TRACE
    # A tracestate over the spec's bound (33 members) is not passed on.
    big = ",".join(f"k{i}=v" for i in range(33))
    get(g, "/open/big", {"traceparent": SAMPLED_PARENT, "tracestate": big})
    assert "tracestate" not in sent_upstream(backend, "/open/big")


def test_a_batch_is_one_trace_with_a_span_per_call(world):
    backend, collector, start = world
    g = start(0)
    calls = [{"method": "GET", "path": f"/open/b{i}"} for i in range(3)]
    conn = http.client.HTTPConnection("127.0.0.1", g.port, timeout=10)
    conn.request("POST", "/batch", body=json.dumps({"calls": calls}),
                 headers={"Content-Type": "application/json", "traceparent": SAMPLED_PARENT})
    r = conn.getresponse()
    assert r.status == 200, r.read()
    r.read()
    conn.close()
    spans = collector.wait_for(lambda s: s.trace_id.hex() == PARENT_TRACE, "the batch's spans")
    wait_until(lambda: len(collector.wait_for(lambda s: s.trace_id.hex() == PARENT_TRACE, "spans")) == 4, what="4 spans")
    spans = [s for s in collector.span_list() if s.trace_id.hex() == PARENT_TRACE]
    envelope = [s for s in spans if s.kind == trace_pb2.Span.SPAN_KIND_SERVER]
    children = [s for s in spans if s.kind == trace_pb2.Span.SPAN_KIND_INTERNAL]
    assert len(envelope) == 1 and len(children) == 3
    assert envelope[0].parent_span_id.hex() == PARENT_SPAN
    assert all(c.parent_span_id == envelope[0].span_id for c in children), "each call is a child of the envelope's span"
    assert sorted(attrs(c.attributes)["url.path"] for c in children) == ["/open/b0", "/open/b1", "/open/b2"]
    # Each call's upstream request names the call's own span as its parent.
    for c in children:
        path = attrs(c.attributes)["url.path"]
        assert sent_upstream(backend, path)["traceparent"] == f"00-{PARENT_TRACE}-{c.span_id.hex()}-01"


def test_error_code_status_and_retries_with_the_ip_tried(world):
    backend, collector, start = world
    # 127.0.0.3 has nothing on the backend's port: a connection there is refused and retried.
    g = start(1, extra_ips=", 127.0.0.3")
    status, _, body = get(g, "/nowhere")
    assert status == 404 and json.loads(body)["error"]["code"] == "no_route"
    s = collector.wait_for(lambda s: attrs(s.attributes).get("url.path") == "/nowhere", "the 404's span")[0]
    assert attrs(s.attributes)["quickway.error_code"] == "no_route"
    assert attrs(s.attributes)["http.response.status_code"] == 404
    retried = None
    for i in range(20):
        assert get(g, f"/open/t{i}")[0] == 200
        found = collector.wait_for(lambda s, i=i: attrs(s.attributes).get("url.path") == f"/open/t{i}", f"span {i}")
        ev = found[0].events
        if any(e.name == "upstream.retry" for e in ev):
            retried = found[0]
            break
    assert retried is not None, "no request went to the refusing IP first in 20 tries"
    events = [(e.name, attrs(e.attributes)) for e in retried.events if e.name.startswith("upstream.")]
    retry = next(a for n, a in events if n == "upstream.retry")
    assert retry["network.peer.address"] == "127.0.0.3"
    connects = [a for n, a in events if n == "upstream.connect"]
    assert [c["network.peer.address"] for c in connects] == ["127.0.0.3", "127.0.0.2"]
    assert [c["quickway.attempt"] for c in connects] == [1, 2]


def test_a_collector_that_is_down_costs_dropped_spans_not_requests(world):
    backend, collector, start = world
    dead = free_port()   # nothing listens there
    g = start(1, endpoint=f"http://127.0.0.1:{dead}/v1/traces")
    t0 = time.monotonic()
    slowest = 0.0
    for i in range(60):
        t = time.monotonic()
        assert get(g, f"/open/d{i}")[0] == 200
        slowest = max(slowest, time.monotonic() - t)
    assert slowest < 1.0, f"a request took {slowest:.3f}s with the collector down"
    wait_until(lambda: g.stats()["tracing"]["spans_dropped"] == 60, timeout=15, what="60 spans dropped")
    t = g.stats()["tracing"]
    assert t["export_failures"] >= 1 and t["spans_exported"] == 0 and t["spans_recorded"] == 60
    metrics = urllib_get(f"http://127.0.0.1:{g.admin_port}/metrics")
    assert re.search(r"^quickway_tracing_spans_dropped_total 60$", metrics, re.M), metrics
    assert re.search(r"^quickway_tracing_export_failures_total [1-9]", metrics, re.M)
    # Every request still went upstream with its traceparent.
    assert all("traceparent" in sent_upstream(backend, f"/open/d{i}") for i in range(60))
    assert time.monotonic() - t0 < 30


def urllib_get(url):
    import urllib.request
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read().decode()


def test_tracing_off_forwards_the_callers_headers_and_logs_no_trace(tmp_path):
    backend = Backend("127.0.0.2", free_port("127.0.0.2"))
    log = tmp_path / "a.log"
    g = Gateway(f"""
listen: 127.0.0.1:{{PORT}}
admin: {{ listen: 127.0.0.1:{{ADMIN}} }}
log: {{ access_log: {log} }}
services:
  api: {{ host: api.internal, port: {backend.server.server_address[1]}, ips: [127.0.0.2] }}
routes:
  - {{ name: open, match: {{ path_prefix: /open/ }}, service: api, auth: off }}
""")
    try:
        get(g, "/open/x", {"traceparent": SAMPLED_PARENT})
        assert sent_upstream(backend, "/open/x")["traceparent"] == SAMPLED_PARENT
        assert g.stats()["tracing"] is None
        g.access_log = log
        wait_until(lambda: any(l.get("path") == "/open/x" for l in log_lines(g)()), what="log line")
        assert "trace_id" not in next(l for l in log_lines(g)() if l.get("path") == "/open/x")
    finally:
        assert g.stop() == 0, g.logs()
        backend.stop()


def raw_call(g, head: bytes):
    """Sends `head` as it is; the status line's code (the gateway must answer)."""
    with socket.create_connection(("127.0.0.1", g.port), timeout=10) as s:
        s.sendall(head)
        data = b""
        while b"\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    assert data.startswith(b"HTTP/1.1 "), data[:100]
    return int(data[9:12])


def test_client_bytes_are_cut_so_a_huge_method_or_a_bad_path_cannot_break_the_export(world):
    """A review's findings: the method is bounded only by the head's size and a span
    writes it twice, so a 1 MB method overflowed the span's length field (an abort); and
    a path's bytes from 0x80 up are let in by the parser but a protobuf `string` must be
    UTF-8, so one such span got the collector to refuse its whole export. Methods are now
    cut to 32 bytes and such paths written with `?` for those bytes."""
    backend, collector, start = world
    g = start(1, extra="limits: { max_header_bytes: 1MiB }\n")
    huge = b"X" * 1_040_000
    raw_call(g, huge + b" /open/huge HTTP/1.1\r\nHost: a\r\ntraceparent: " + SAMPLED_PARENT.encode() + b"\r\n\r\n")
    raw_call(g, b"GET /open/bad\xff\xfez HTTP/1.1\r\nHost: a\r\n\r\n")
    assert get(g, "/open/after")[0] == 200, "the gateway is still up"
    spans = collector.wait_for(lambda s: attrs(s.attributes).get("url.path") == "/open/huge", "the huge method's span")
    assert attrs(spans[0].attributes)["http.request.method"] == "X" * 32
    assert len(spans[0].name.split(" ")[0]) == 32
    bad = collector.wait_for(lambda s: attrs(s.attributes).get("url.path", "").startswith("/open/bad"), "the bad path's span")
    assert attrs(bad[0].attributes)["url.path"] == "/open/bad??z"
    collector.wait_for(lambda s: attrs(s.attributes).get("url.path") == "/open/after", "the span after")
