"""Rate limits and quotas (issue 32), through the real binary with 2 workers.

Expectations come from spec/config.md (`rate_limit`, `quota`), spec/admin-and-errors.md
(429 `rate_limited` / `quota_exceeded` with `Retry-After` and the RateLimit fields), the
IETF draft draft-ietf-httpapi-ratelimit-headers-10 (fields parsed with `http_sf`, an
independent RFC 8941 parser), RFC 9110 (`Retry-After` in whole seconds) and the UTC
calendar (a quota window ends on the hour). Signed calls come from examples/qw1_client.py.
"""
import http.client
import json
import os
import sys
import threading
import time
import urllib.request

import pytest

from harness import ROOT, Backend, Gateway, free_port, wait_until

sys.path.insert(0, os.path.join(ROOT, "examples"))
import qw1_client  # noqa: E402

http_sf = pytest.importorskip("http_sf")

BASE = """
listen: 127.0.0.1:{PORT}
workers: {WORKERS}
admin: { listen: 127.0.0.1:{ADMIN} }
client_ip: { trusted_proxies: [127.0.0.1] }
auth:
  salt: pepper
  keys:
    - { id: app-a, secret: sa }
    - { id: app-b, secret: sb }
services:
  api: { host: api.internal, port: BACKEND_PORT, ips: [127.0.0.2] }
routes:
  - name: burst
    match: { path_prefix: /b/ }
    service: api
    auth: off
    rate_limit: [{ by: route, rate: BURST_RATE, burst: BURST }]
  - name: cached
    match: { path_prefix: /c/ }
    service: api
    auth: off
    cache: { ttl: 60s }
    rate_limit: [{ by: ip, rate: 1/m, burst: 2 }]
  - name: per-ip
    match: { path_prefix: /ip/ }
    service: api
    auth: off
    rate_limit: [{ by: ip, rate: 1/m, burst: 3 }]
  - name: keyed
    match: { path_prefix: /k/ }
    service: api
    rate_limit:
      - { by: key, rate: 1/m, burst: 2 }
      - { by: ip, rate: 1/m, burst: 4 }
  - name: quota
    match: { path_prefix: /q/ }
    service: api
    quota: { by: key, limit: 3/h }
EXTRA
"""


def config(port, burst=10, burst_rate="1/m", extra=""):
    return (BASE.replace("BACKEND_PORT", str(port)).replace("BURST_RATE", burst_rate).replace("BURST", str(burst))
            .replace("EXTRA", extra))


@pytest.fixture(scope="module")
def backend():
    b = Backend("127.0.0.2", free_port("127.0.0.2"))
    yield b
    b.stop()


@pytest.fixture
def gw(backend):
    g = Gateway(config(backend.server.server_address[1]), workers=2)
    yield g
    g.stop()


def call(g, path, headers=None, source="127.0.0.1"):
    """One GET on its own connection (from `source`): (status, lower-case headers, body)."""
    conn = http.client.HTTPConnection("127.0.0.1", g.port, timeout=10, source_address=(source, 0))
    try:
        conn.request("GET", path, headers=headers or {})
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def signed(key, secret, path):
    return {"Authorization": qw1_client.authorization(key, secret, "pepper", "GET", path)}


def admin(g, path, method="GET"):
    req = urllib.request.Request(f"http://127.0.0.1:{g.admin_port}{path}", data=b"" if method == "POST" else None, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def check_429(status, headers, body, code, policy):
    """A 429 as spec/admin-and-errors.md and the draft describe it; returns (Retry-After, t)."""
    assert status == 429
    assert headers["content-type"] == "application/json"
    doc = json.loads(body)
    assert doc["error"]["status"] == 429 and doc["error"]["code"] == code
    assert doc["error"]["request_id"] == headers["x-request-id"]
    retry = headers["retry-after"]
    assert retry.isdigit() and int(retry) >= 1, "RFC 9110: delay-seconds, a non-negative integer"
    (pname, pparams), = http_sf.parse(headers["ratelimit-policy"].encode(), tltype="list")
    (name, params), = http_sf.parse(headers["ratelimit"].encode(), tltype="list")
    assert pname == name == policy
    assert isinstance(pparams["q"], int) and pparams["q"] >= 1 and isinstance(pparams["w"], int) and pparams["w"] >= 1
    assert params["r"] == 0 and isinstance(params["t"], int) and params["t"] >= 0
    return int(retry), params["t"], pparams


def test_a_burst_is_exact_across_workers_and_refused_calls_never_reach_the_backend(gw, backend):
    # burst 10, 1/m: of 30 calls at once on 30 connections (spread over both workers),
    # exactly 10 pass; the backend sees exactly those.
    before = backend.path_hits("/b/x")
    results, lock = [], threading.Lock()
    start = threading.Barrier(30)

    def one():
        start.wait(timeout=10)
        st, h, body = call(gw, "/b/x")
        with lock:
            results.append((st, h, body))

    threads = [threading.Thread(target=one) for _ in range(30)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    statuses = sorted(st for st, _, _ in results)
    assert statuses == [200] * 10 + [429] * 20
    assert backend.path_hits("/b/x") - before == 10, "a refused call never reaches the backend"
    st, h, body = next(r for r in results if r[0] == 429)
    retry, t, policy = check_429(st, h, body, "rate_limited", "route")
    assert policy == {"q": 10, "w": 600}, "a bucket of 10 refilled at 1/m: 10 per 600 s"
    assert 1 <= retry <= 60 and t <= 600
    s = gw.stats()
    assert s["rate_limits"]["routes"]["burst"]["rate_limited"] == 20
    assert s["routes"]["burst"]["by_status"] == {"2xx": 10, "4xx": 20}


def test_a_limit_runs_before_the_cache(gw, backend):
    # by ip, burst 2, on a cached route: a miss, a hit, then 429 although a fresh entry waits.
    before = backend.path_hits("/c/doc")
    assert call(gw, "/c/doc")[0] == 200
    st, h, _ = call(gw, "/c/doc")
    assert st == 200 and h["x-cache"] == "HIT"
    st, h, body = call(gw, "/c/doc")
    check_429(st, h, body, "rate_limited", "ip")
    assert backend.path_hits("/c/doc") - before == 1
    assert gw.stats()["cache"]["hits"] == 1, "the refused call did not read the cache"


def test_by_ip_counts_the_client_behind_a_trusted_proxy_only(gw):
    # 127.0.0.1 is a trusted proxy: its X-Forwarded-For names the client.
    for _ in range(3):
        assert call(gw, "/ip/x", {"X-Forwarded-For": "203.0.113.1"})[0] == 200
    st, h, body = call(gw, "/ip/x", {"X-Forwarded-For": "203.0.113.1"})
    check_429(st, h, body, "rate_limited", "ip")
    assert call(gw, "/ip/x", {"X-Forwarded-For": "203.0.113.2"})[0] == 200, "another client behind the proxy"
    # 127.0.0.5 is not trusted: a made-up X-Forwarded-For per call does not buy a fresh allowance.
    got = [call(gw, "/ip/x", {"X-Forwarded-For": f"198.51.100.{i}"}, source="127.0.0.5")[0] for i in range(5)]
    assert got == [200, 200, 200, 429, 429]


def test_by_key_limits_count_the_verified_key_and_give_back_the_ip_charge(gw, backend):
    # keyed: by key 2 per minute, by ip 4 per minute. app-a's third call is refused by
    # its key limit, and that refusal gives back its charge on the IP limit: app-b still
    # gets 2 calls from the same IP (4 - 2 admitted for app-a).
    for _ in range(2):
        assert call(gw, "/k/x", signed("app-a", "sa", "/k/x"))[0] == 200
    for _ in range(3):
        st, h, body = call(gw, "/k/x", signed("app-a", "sa", "/k/x"))
        check_429(st, h, body, "rate_limited", "key")
    for _ in range(2):
        assert call(gw, "/k/x", signed("app-b", "sb", "/k/x"))[0] == 200
    st, h, body = call(gw, "/k/x", signed("app-b", "sb", "/k/x"))
    _, _, policy = check_429(st, h, body, "rate_limited", "ip")
    assert policy == {"q": 4, "w": 240}
    s = gw.stats()["rate_limits"]["routes"]["keyed"]
    assert s["rate_limited"] == 4
    assert s["by_key"] == {"app-a": {"rate_limited": 3, "quota_exceeded": 0}}, "ip refusals are not put on a key"


def test_a_quota_ends_with_the_utc_hour(gw):
    for _ in range(3):
        assert call(gw, "/q/x", signed("app-a", "sa", "/q/x"))[0] == 200
    st, h, body = call(gw, "/q/x", signed("app-a", "sa", "/q/x"))
    now = time.time()
    retry, t, policy = check_429(st, h, body, "quota_exceeded", "quota")
    to_hour = 3600 - int(now) % 3600
    assert abs(retry - to_hour) <= 2 and abs(t - to_hour) <= 2, "the window ends on the UTC hour"
    assert policy == {"q": 3, "w": 3600}
    assert call(gw, "/q/x", signed("app-b", "sb", "/q/x"))[0] == 200, "each key has its own quota"
    assert gw.stats()["rate_limits"]["routes"]["quota"]["by_key"]["app-a"] == {"rate_limited": 0, "quota_exceeded": 1}


def test_metrics_count_refusals_per_route_and_key(gw):
    parser = pytest.importorskip("prometheus_client.parser")
    for _ in range(3):
        call(gw, "/k/x", signed("app-a", "sa", "/k/x"))
    for _ in range(4):
        call(gw, "/ip/x", {"X-Forwarded-For": "203.0.113.9"})
    status, text = admin(gw, "/metrics")
    assert status == 200
    samples = [s for f in parser.text_string_to_metric_families(text.decode()) for s in f.samples]

    def value(name, **labels):
        found = [s.value for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]
        assert found, f"no sample {name} {labels}"
        return found[0]
    assert value("quickway_rate_limited_total", route="keyed", code="rate_limited") == 1
    assert value("quickway_rate_limited_total", route="per-ip", code="rate_limited") == 1
    assert value("quickway_rate_limited_by_key_total", route="keyed", key="app-a", code="rate_limited") == 1
    assert not any("ip" in s.labels and s.name.startswith("quickway_rate_limit") for s in samples), "no label per IP"
    assert value("quickway_rate_limit_entries") >= 2


def test_a_reload_keeps_unchanged_limits_and_restarts_changed_ones(backend):
    port = backend.server.server_address[1]
    g = Gateway(config(port, burst=3), workers=2)
    try:
        assert [call(g, "/b/x")[0] for _ in range(4)] == [200, 200, 200, 429]
        # Another route added; the burst route's limit as it was: its count stays.
        with open(g.config_path, "w") as f:
            f.write(config(port, burst=3, extra="  - { name: new, match: { path_prefix: /n/ }, service: api, auth: off }")
                    .replace("{PORT}", str(g.port)).replace("{ADMIN}", str(g.admin_port)).replace("{WORKERS}", "2"))
        assert admin(g, "/reload", "POST")[0] == 200
        wait_until(lambda: call(g, "/n/x")[0] == 200, what="the new route")
        assert call(g, "/b/x")[0] == 429, "an unchanged limit keeps its count across a reload"
        assert g.stats()["rate_limits"]["routes"]["burst"]["rate_limited"] == 2, "and its refusal count"
        # The burst changed: a new limit, a whole allowance.
        with open(g.config_path, "w") as f:
            f.write(config(port, burst=4).replace("{PORT}", str(g.port)).replace("{ADMIN}", str(g.admin_port)).replace("{WORKERS}", "2"))
        assert admin(g, "/reload", "POST")[0] == 200
        wait_until(lambda: call(g, "/n/x")[0] == 404, what="the reloaded config")
        assert [call(g, "/b/x")[0] for _ in range(5)] == [200, 200, 200, 200, 429]
    finally:
        g.stop()


def test_bad_limits_are_refused_at_start_with_their_line(backend, tmp_path):
    import subprocess
    from harness import quickway_binary
    path = tmp_path / "bad.yaml"
    path.write_text(config(backend.server.server_address[1]).replace("rate: 1/m, burst: 2 }", "rate: 1/w, burst: 2 }").replace("{PORT}", "1").replace("{ADMIN}", "2")
                    .replace("{WORKERS}", "1"))
    r = subprocess.run([quickway_binary(), "check", "--config", str(path)], capture_output=True, text=True, timeout=30)
    assert r.returncode != 0
    assert "routes[1].rate_limit[0].rate" in r.stdout + r.stderr and "N/s, N/m or N/h" in r.stdout + r.stderr
