"""Batch calls (issue 34, spec/batch.md), through the real binary and real backends, over
HTTP/1.1 and HTTP/2.

Expectations come from spec/batch.md (the envelope, results in call order, ndjson lines as
calls end with id and index, 400 bad_batch naming index and field, per-call errors as the
gateway's JSON error body, 504 for calls past the batch timeout), spec/config.md (`batch:
{max_calls, timeout}`, `rate_limit`, `coalesce`), spec/signature.md (the envelope is signed
like any call: examples/qw1_client.py, independent of the gateway) and
spec/admin-and-errors.md (codes). The backend counts the calls it gets.
"""
import http.client
import json
import os
import sys
import threading
import time

import pytest

from harness import ROOT, Backend, Gateway, free_port, wait_until

sys.path.insert(0, os.path.join(ROOT, "examples"))
import qw1_client  # noqa: E402

SALT = "pepper"
KEYS = {"app-a": "sa", "app-b": "sb"}

CONFIG = """
listen: 127.0.0.1:{PORT}
workers: 2
admin: { listen: 127.0.0.1:{ADMIN} }
log: { level: info, access_log: LOGFILE }
auth:
  salt: pepper
  keys:
    - { id: app-a, secret: sa }
    - { id: app-b, secret: sb }
services:
  api: { host: api.internal, port: BACKEND_PORT, ips: [127.0.0.2] }
routes:
  - name: batch
    match: { path_prefix: /batch }
    batch: { max_calls: 5, timeout: 1500ms }
    auth: required
  - name: open-batch
    match: { path_prefix: /obatch }
    batch: { max_calls: 5, timeout: 3s }
    auth: optional
  - name: limited
    match: { path_prefix: /limited/ }
    service: api
    rate_limit: [{ by: key, rate: 1/m, burst: 1 }]
  - name: slow
    match: { path_prefix: /delay/, methods: [GET] }
    service: api
    coalesce: true
  - name: open
    match: { path_prefix: /open/ }
    service: api
    auth: off
  - name: maybe
    match: { path_prefix: /maybe/ }
    service: api
    auth: optional
  - name: api
    match: { path_prefix: / }
    service: api
"""


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    d = tmp_path_factory.mktemp("batch")
    log = os.path.join(str(d), "access.log")
    backend = Backend("127.0.0.2", free_port("127.0.0.2"))
    g = Gateway(CONFIG.replace("BACKEND_PORT", str(backend.server.server_address[1])).replace("LOGFILE", log))
    g.access_log = log
    try:
        yield g, backend
    finally:
        assert g.stop() == 0, g.logs()
        backend.stop()


def envelope(calls):
    return json.dumps({"calls": calls}).encode()


def post(g, path, body, key="app-a", headers=None, timeout=15):
    """POSTs a batch envelope (signed with `key` unless None): (status, headers, body bytes)."""
    h = {"Content-Type": "application/json", **(headers or {})}
    if key:
        h["Authorization"] = qw1_client.authorization(key, KEYS[key], SALT, "POST", path, body)
    conn = http.client.HTTPConnection("127.0.0.1", g.port, timeout=timeout)
    try:
        conn.request("POST", path, body=body, headers=h)
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def results(g, calls, path="/batch", key="app-a", headers=None):
    status, h, body = post(g, path, envelope(calls), key=key, headers=headers)
    assert status == 200, body
    assert h["content-type"] == "application/json"
    return json.loads(body)["results"], h


def test_results_come_in_call_order_with_each_calls_answer(env):
    g, backend = env
    calls = [
        {"id": "slow", "method": "GET", "path": "/delay/300/order-a"},
        {"id": "fast", "method": "GET", "path": "/open/order-b?x=1", "headers": {"Accept-Language": "fr"}},
        {"method": "POST", "path": "/items/", "headers": {"Content-Type": "application/json"}, "body": '{"item": 42}'},
        {"id": "bin", "method": "PUT", "path": "/files/a.png", "body_base64": "iVBORw0KGgo="},
        {"id": "missing", "method": "GET", "path": "/status/404"},
    ]
    started = time.monotonic()
    res, _ = results(g, calls)
    assert time.monotonic() - started < 1.2, "the calls ran in parallel"
    assert [r["index"] for r in res] == [0, 1, 2, 3, 4]
    assert [r["id"] for r in res] == ["slow", "fast", 2, "bin", "missing"], "the index stands for a missing id"
    assert [r["status"] for r in res] == [200, 200, 200, 200, 404]
    # JSON answers are the JSON itself; the backend saw each call as a request.
    assert res[0]["body"]["path"] == "/delay/300/order-a"
    fast = res[1]["body"]
    assert fast["path"] == "/open/order-b?x=1" and fast["headers"]["Accept-Language"] == "fr"
    assert "X-Quickway-Key" not in fast["headers"], "an auth: off route gets no key, as for a direct call"
    assert res[2]["body"]["body"] == '{"item": 42}' and res[2]["body"]["method"] == "POST"
    assert res[2]["body"]["headers"]["X-Quickway-Key"] == "app-a", "the envelope's key is every call's identity"
    assert "Authorization" not in res[2]["body"]["headers"]
    assert res[3]["body"]["body"] == "\x89PNG\r\n\x1a\n"
    # Headers lower-cased, the gateway's own included; each call has its own request id.
    for r in res:
        assert all(k == k.lower() for k in r["headers"])
        assert r["headers"]["x-request-id"]
    assert len({r["headers"]["x-request-id"] for r in res}) == 5
    assert res[4]["body"] == {"status": 404}


def test_ndjson_streams_each_result_as_its_call_ends(env):
    g, _ = env
    body = envelope([
        {"id": "slow", "method": "GET", "path": "/delay/800/nd"},
        {"id": "fast", "method": "GET", "path": "/open/nd-fast"},
    ])
    h = {"Content-Type": "application/json", "Accept": "application/x-ndjson",
         "Authorization": qw1_client.authorization("app-a", "sa", SALT, "POST", "/batch", body)}
    conn = http.client.HTTPConnection("127.0.0.1", g.port, timeout=10)
    try:
        started = time.monotonic()
        conn.request("POST", "/batch", body=body, headers=h)
        r = conn.getresponse()
        assert r.status == 200
        assert r.getheader("Content-Type") == "application/x-ndjson"
        first = json.loads(r.readline())
        first_at = time.monotonic() - started
        second = json.loads(r.readline())
        assert r.read() == b""
    finally:
        conn.close()
    assert (first["id"], first["index"], first["status"]) == ("fast", 1, 200)
    assert (second["id"], second["index"], second["status"]) == ("slow", 0, 200)
    assert first_at < 0.6, f"the fast call's line came {first_at:.2f}s in, not when it ended"


def test_per_call_auth_unsigned_envelope_is_anonymous_and_required_routes_refuse_it(env):
    g, backend = env
    calls = [
        {"method": "GET", "path": "/open/anon"},
        {"method": "GET", "path": "/locked/anon"},
        {"method": "GET", "path": "/maybe/anon"},
    ]
    res, _ = results(g, calls, path="/obatch", key=None)
    assert [r["status"] for r in res] == [200, 401, 200]
    assert res[1]["body"]["error"]["code"] == "auth_missing"
    assert res[1]["headers"]["www-authenticate"].startswith("QW1-HMAC-SHA256")
    assert "X-Quickway-Key" not in res[2]["body"]["headers"]
    assert backend.path_hits("/locked/anon") == 0, "a refused call never reaches the backend"
    # The same envelope signed: the key is the identity of every call.
    res, _ = results(g, calls, path="/obatch", key="app-b")
    assert [r["status"] for r in res] == [200, 200, 200]
    assert res[1]["body"]["headers"]["X-Quickway-Key"] == "app-b"
    # The envelope's own auth still applies: unsigned on an auth: required batch route is 401.
    status, _, body = post(g, "/batch", envelope(calls), key=None)
    assert status == 401 and json.loads(body)["error"]["code"] == "auth_missing"


def test_a_rate_limited_call_gets_its_own_429(env):
    g, _ = env
    # by: key, burst 1 a minute: the first call passes, the second (same key) is refused.
    res, _ = results(g, [{"method": "GET", "path": "/limited/one"}, {"method": "GET", "path": "/limited/two"},
                         {"method": "GET", "path": "/open/still-fine"}], key="app-b")
    statuses = sorted(r["status"] for r in res[:2])
    assert statuses == [200, 429]
    refused = next(r for r in res if r["status"] == 429)
    assert refused["body"]["error"]["code"] == "rate_limited"
    assert int(refused["headers"]["retry-after"]) >= 1
    assert res[2]["status"] == 200


def test_identical_gets_merge_into_one_upstream_call_within_and_across_batches(env):
    g, backend = env
    path = "/delay/400/merge-me"
    before = backend.path_hits(path)
    direct = {}

    def direct_call():
        auth = qw1_client.authorization("app-a", "sa", SALT, "GET", path, b"")
        conn = http.client.HTTPConnection("127.0.0.1", g.port, timeout=10)
        conn.request("GET", path, headers={"Authorization": auth})
        r = conn.getresponse()
        direct["status"], direct["cache"] = r.status, r.getheader("X-Cache")
        r.read()
        conn.close()

    t = threading.Thread(target=direct_call)
    batch_done = {}

    def batch():
        batch_done["res"], _ = results(g, [{"method": "GET", "path": path}] * 4)

    b = threading.Thread(target=batch)
    b.start()
    # The batch's leader reached the backend (which holds it 400 ms): the direct call joins it.
    wait_until(lambda: backend.path_hits(path) - before == 1, timeout=5, what="the leader's upstream call")
    t.start()
    b.join(10)
    t.join(10)
    res = batch_done["res"]
    assert [r["status"] for r in res] == [200] * 4 and direct["status"] == 200
    caches = sorted(r["headers"]["x-cache"] for r in res)
    assert caches.count("COALESCED") >= 3, caches
    assert direct["cache"] == "COALESCED"
    assert backend.path_hits(path) - before == 1, "one upstream call for five identical GETs"


def test_a_call_past_the_batch_timeout_gets_its_own_504(env):
    g, _ = env
    started = time.monotonic()
    res, _ = results(g, [{"id": "late", "method": "GET", "path": "/delay/4000/late"},
                         {"id": "quick", "method": "GET", "path": "/open/quick"}])
    took = time.monotonic() - started
    assert 1.3 < took < 3.0, took
    assert res[0]["status"] == 504 and res[0]["body"]["error"]["code"] == "upstream_timeout"
    assert res[1]["status"] == 200


@pytest.mark.parametrize("calls,index,field", [
    ([{"method": "GET"}], 0, "path"),
    ([{"method": "GET", "path": "/a"}, {"path": "/b"}], 1, "method"),
    ([{"method": "GET", "path": "/a"}, {"method": "GET", "path": "http://other/b"}], 1, "path"),
    ([{"method": "GET", "path": "/a/../admin"}], 0, "path"),
    ([{"method": "GET", "path": "/a", "headers": {"Authorization": "QW1-HMAC-SHA256 Key=app-b"}}], 0, "headers.Authorization"),
    ([{"method": "GET", "path": "/a", "headers": {"X-Quickway-Key": "app-b"}}], 0, "headers.X-Quickway-Key"),
    ([{"method": "GET", "path": "/a", "headers": {"Host": "evil"}}], 0, "headers.Host"),
    ([{"method": "GET", "path": "/a", "headers": {"Transfer-Encoding": "chunked"}}], 0, "headers.Transfer-Encoding"),
    ([{"method": "GET", "path": "/a", "headers": {"X-A": "1\r\nX-B: 2"}}], 0, "headers.X-A"),
    ([{"method": "POST", "path": "/a", "body": "x", "body_base64": "eA=="}], 0, "body_base64"),
    ([{"id": "x", "method": "GET", "path": "/a"}, {"id": "x", "method": "GET", "path": "/b"}], 1, "id"),
    ([{"id": "x" * 65, "method": "GET", "path": "/a"}], 0, "id"),
    ([{"method": "GET", "path": "/a"}, {"method": "POST", "path": "/batch"}], 1, "path"),
    ([{"method": "GET", "path": "/a"}, {"method": "POST", "path": "/obatch/%2e%2e"}], 1, "path"),
])
def test_bad_envelopes_are_400_naming_index_and_field(env, calls, index, field):
    g, backend = env
    before = backend.hits
    status, h, body = post(g, "/batch", envelope(calls))
    assert status == 400, body
    error = json.loads(body)["error"]
    assert error["code"] == "bad_batch"
    assert f"calls[{index}].{field}" in error["message"], error["message"]
    assert backend.hits == before, "no call of a refused envelope runs"


def test_envelope_level_refusals(env):
    g, _ = env
    six = envelope([{"method": "GET", "path": f"/open/{i}"} for i in range(6)])
    for body, headers in ((six, None), (b"{not json", None), (b'{"calls": [], "x": 1}', None),
                          (envelope([{"method": "GET", "path": "/open/x"}]), {"Content-Type": "text/plain"})):
        status, _, got = post(g, "/batch", body, headers=headers)
        assert status == 400, got
        assert json.loads(got)["error"]["code"] == "bad_batch"
    auth = qw1_client.authorization("app-a", "sa", SALT, "GET", "/batch", b"")
    conn = http.client.HTTPConnection("127.0.0.1", g.port, timeout=5)
    conn.request("GET", "/batch", headers={"Authorization": auth})
    r = conn.getresponse()
    assert r.status == 405 and r.getheader("Allow") == "POST"
    r.read()
    conn.close()


def test_access_log_has_a_line_per_call_with_the_batch_as_parent(env):
    g, _ = env
    _, h = results(g, [{"method": "GET", "path": "/open/log-1"}, {"method": "GET", "path": "/open/log-2"}],
                   headers={"X-Request-Id": "batch-parent-1"})
    assert h["x-request-id"] == "batch-parent-1"

    def lines():
        if not os.path.exists(g.access_log):
            return []
        with open(g.access_log) as f:
            return [json.loads(line) for line in f if line.strip()]

    wait_until(lambda: len([x for x in lines() if x.get("parent") == "batch-parent-1"]) == 2, timeout=5, what="two call lines")
    calls = [x for x in lines() if x.get("parent") == "batch-parent-1"]
    assert sorted(x["path"] for x in calls) == ["/open/log-1", "/open/log-2"]
    assert all(x["route"] == "open" and x["key"] is None for x in calls)
    envelope_line = [x for x in lines() if x["request_id"] == "batch-parent-1"]
    assert len(envelope_line) == 1 and "parent" not in envelope_line[0] and envelope_line[0]["route"] == "batch"
    # Each call is counted on its own route, as a request.
    assert g.stats()["routes"]["open"]["requests"] >= 2


def test_batches_over_http2(env):
    h2 = pytest.importorskip("h2")  # noqa: F841
    from test_http2 import H2Client
    g, _ = env
    c = H2Client(g)
    try:
        body = envelope([{"id": "a", "method": "GET", "path": "/delay/300/h2"}, {"id": "b", "method": "GET", "path": "/open/h2"}])
        auth = qw1_client.authorization("app-a", "sa", SALT, "POST", "/batch", body)
        sid = c.request("POST", "/batch", [("authorization", auth), ("content-type", "application/json")], body=body)
        r = c.wait([sid])[0]
        assert r["headers"][":status"] == "200", bytes(r["data"])
        res = json.loads(bytes(r["data"]))["results"]
        assert [(x["id"], x["status"]) for x in res] == [("a", 200), ("b", 200)]
        # ndjson over HTTP/2: the fast call's line first.
        auth = qw1_client.authorization("app-a", "sa", SALT, "POST", "/batch", body)
        sid = c.request("POST", "/batch", [("authorization", auth), ("content-type", "application/json"),
                                           ("accept", "application/x-ndjson")], body=body)
        r = c.wait([sid])[0]
        assert r["headers"][":status"] == "200" and r["headers"]["content-type"] == "application/x-ndjson"
        lines = [json.loads(x) for x in bytes(r["data"]).splitlines()]
        assert [(x["id"], x["index"]) for x in lines] == [("b", 1), ("a", 0)]
        # A bad envelope is a 400 on its stream.
        bad = envelope([{"method": "GET", "path": "/batch"}])
        auth = qw1_client.authorization("app-a", "sa", SALT, "POST", "/batch", bad)
        sid = c.request("POST", "/batch", [("authorization", auth), ("content-type", "application/json")], body=bad)
        r = c.wait([sid])[0]
        assert r["headers"][":status"] == "400"
        assert json.loads(bytes(r["data"]))["error"]["code"] == "bad_batch"
    finally:
        c.close()


def test_the_example_client_signs_and_reads_both_forms(env):
    import batch_client
    g, _ = env
    client = batch_client.BatchClient(g.url("/batch"), key="app-a", secret="sa", salt=SALT)
    calls = [{"id": "x", "method": "GET", "path": "/delay/200/example"}, {"id": "y", "method": "GET", "path": "/open/example?b=2&a=1"}]
    res = client.send(calls)
    assert [(r["id"], r["status"]) for r in res] == [("x", 200), ("y", 200)]
    assert batch_client.body_of(res[1]).startswith(b"{")
    streamed = list(client.stream(calls))
    assert [r["id"] for r in streamed] == ["y", "x"]
    # The command line, as the README shows it.
    import subprocess
    out = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "batch_client.py"), "--url", g.url("/batch"),
                          "--key", "app-a", "--salt", SALT, "GET /open/cli-1", 'POST /open/cli-2 {"item": 42}'],
                         capture_output=True, text=True, timeout=20, env={**os.environ, "QW_SECRET": "sa"})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("c0 (0): 200 ") and lines[1].startswith("c1 (1): 200 ")
    assert '\\"item\\": 42' in lines[1] or '"item": 42' in lines[1]
