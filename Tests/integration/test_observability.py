"""Observability (issue: observability): /stats and /metrics count a known mix of
traffic the same way, and /metrics parses with Prometheus's reference text parser."""
import json
import os
import sys
import urllib.error
import urllib.request

import pytest

from harness import ROOT, Backend, Gateway, free_port, wait_until

sys.path.insert(0, os.path.join(ROOT, "examples"))
import qw1_client  # noqa: E402

CONFIG = """
listen: 127.0.0.1:{PORT}
workers: 2
admin: { listen: 127.0.0.1:{ADMIN} }
auth:
  salt: pepper
  keys: [ { id: app, secret: s3cret } ]
services:
  api: { host: api.internal, port: BACKEND_PORT, ips: [127.0.0.2] }
  dead: { host: dead.internal, port: DEAD_PORT, ips: [127.0.0.5], retries: 0 }
routes:
  - { name: "cached \\"route\\"", match: { path_prefix: /c/ }, service: api, auth: off, cache: { ttl: 60s } }
  - { name: signed, match: { path_prefix: /s/ }, service: api }
  - { name: dead, match: { path_prefix: /dead/ }, service: dead, auth: off }
"""


@pytest.fixture(scope="module")
def gw():
    b = Backend("127.0.0.2", free_port("127.0.0.2"))
    g = Gateway(CONFIG.replace("BACKEND_PORT", str(b.server.server_address[1])).replace("DEAD_PORT", str(free_port("127.0.0.5"))))
    yield g
    g.stop()
    b.stop()


def status(g, path, headers=None):
    try:
        with urllib.request.urlopen(urllib.request.Request(g.url(path), headers=headers or {}), timeout=10) as r:
            r.read()
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def metrics(g):
    with urllib.request.urlopen(f"http://127.0.0.1:{g.admin_port}/metrics", timeout=5) as r:
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return r.read().decode()


def test_stats_and_metrics_match_a_known_mix(gw):
    parser = pytest.importorskip("prometheus_client.parser")
    mix = []
    for i in range(5):
        mix.append(status(gw, f"/c/item{i % 2}"))          # 2 misses then 3 hits
    for i in range(4):
        mix.append(status(gw, "/s/x", {"Authorization": qw1_client.authorization("app", "s3cret", "pepper", "GET", "/s/x")}))
    for _ in range(3):
        mix.append(status(gw, "/s/x"))                     # 401 auth_missing
    for _ in range(2):
        mix.append(status(gw, "/nowhere"))                 # 404
    for _ in range(2):
        mix.append(status(gw, "/dead/x"))                  # 502
    assert mix == [200] * 9 + [401] * 3 + [404] * 2 + [502] * 2
    wait_until(lambda: gw.stats()["requests"]["in_flight"] == 0, what="quiet")
    s = gw.stats()
    assert s["requests"]["total"] == 16
    assert s["latency_ms_last_minute"]["requests"] == 16
    assert 0 < s["latency_ms_last_minute"]["p50"] <= s["latency_ms_last_minute"]["p99"] <= s["latency_ms"]["max"]
    assert s["requests"]["by_status"] == {"2xx": 9, "3xx": 0, "4xx": 5, "5xx": 2}
    assert s["routes"]['cached "route"'] == {"requests": 5, "by_status": {"2xx": 5}}
    assert s["routes"]["signed"] == {"requests": 7, "by_status": {"2xx": 4, "4xx": 3}}
    assert s["routes"]["dead"] == {"requests": 2, "by_status": {"5xx": 2}}
    assert s["cache"]["hits"] == 3 and s["cache"]["misses"] == 2
    assert s["auth"]["accepted"] == 4 and s["auth"]["rejected"]["auth_missing"] == 3
    assert sum(s["requests"]["by_status"].values()) == s["requests"]["total"], "each request in one status class"
    assert sum(r["requests"] for r in s["routes"].values()) + 2 == s["requests"]["total"], "each routed request in its route"

    families = {f.name: f for f in parser.text_string_to_metric_families(metrics(gw))}
    def value(name, **labels):
        for fam in families.values():
            for smp in fam.samples:
                if smp.name == name and all(smp.labels.get(k) == v for k, v in labels.items()):
                    return smp.value
        raise AssertionError(f"no sample {name} {labels}")
    assert value("quickway_requests_total", route='cached "route"', status_class="2xx") == 5
    assert value("quickway_requests_total", route="signed", status_class="4xx") == 3
    assert value("quickway_requests_total", route="dead", status_class="5xx") == 2
    assert value("quickway_requests_total", route="", status_class="4xx") == 2   # the 404s match no route
    assert value("quickway_cache_hits_total") == 3 and value("quickway_cache_misses_total") == 2
    assert value("quickway_auth_rejections_total", reason="auth_missing") == 3
    assert value("quickway_request_duration_seconds_count", route="signed") == 7
    assert value("quickway_request_duration_seconds_bucket", route="signed", le="+Inf") == 7
    assert value("quickway_requests_in_flight") == 0
    assert value("quickway_upstream_requests_total", service="api", address="127.0.0.2") >= 6
    assert value("quickway_upstream_state", service="dead", address="127.0.0.5", state="up") in (0, 1)
    assert value("quickway_upstream_selected", service="api", address="127.0.0.2") == 1
    assert families["quickway_request_duration_seconds"].type == "histogram"
    assert families["quickway_requests"].type == "counter"


LOG_CONFIG = """
listen: 127.0.0.1:{PORT}
workers: 2
admin: { listen: 127.0.0.1:{ADMIN} }
log: { level: info, access_log: LOGFILE }
services:
  api: { host: api.internal, port: BACKEND_PORT, ips: [127.0.0.2] }
routes:
  - { name: api, match: { path_prefix: /api/ }, service: api, cache: { ttl: 60s } }
"""


def read_lines(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f]


def test_access_log_one_json_line_per_request_and_rotation_loses_nothing(tmp_path):
    import signal
    import threading
    b = Backend("127.0.0.2", free_port("127.0.0.2"))
    log = str(tmp_path / "access.log")
    g = Gateway(LOG_CONFIG.replace("BACKEND_PORT", str(b.server.server_address[1])).replace("LOGFILE", log))
    try:
        statuses = [status(g, f"/api/item{i % 5}") for i in range(30)] + [status(g, "/nope") for _ in range(3)]
        wait_until(lambda: len(read_lines(log)) == 33, timeout=5, what="33 access-log lines")
        lines = read_lines(log)
        # Two workers write their own batches: lines are complete but not in request order.
        assert sorted(l["status"] for l in lines) == sorted(statuses)
        assert len({l["request_id"] for l in lines}) == 33
        item0 = [l for l in lines if l["path"] == "/api/item0"]
        assert len(item0) == 6 and sorted(l["cache"] for l in item0) == ["HIT"] * 5 + ["MISS"]
        miss = next(l for l in item0 if l["cache"] == "MISS")
        assert set(miss) == {"time", "request_id", "client", "method", "path", "route", "status", "bytes", "duration_ms",
                             "upstream", "cache", "key"}
        assert miss["method"] == "GET" and miss["route"] == "api" and miss["status"] == 200 and miss["bytes"] > 0
        assert miss["upstream"] == "127.0.0.2" and miss["client"] == "127.0.0.1" and miss["duration_ms"] >= 0
        assert all(l["upstream"] is None for l in item0 if l["cache"] == "HIT")
        nope = [l for l in lines if l["path"] == "/nope"]
        assert len(nope) == 3 and all(l["route"] is None and l["status"] == 404 for l in nope)
        # Rotation under load: move the file away, SIGUSR1, keep going; no line is lost.
        sent = []
        stop = threading.Event()

        def load():
            while not stop.is_set() and len(sent) < 2000:
                sent.append(status(g, f"/api/r{len(sent) % 7}"))
        t = threading.Thread(target=load)
        t.start()
        wait_until(lambda: len(sent) > 100, what="load")
        os.rename(log, log + ".1")
        g.signal(signal.SIGUSR1)
        wait_until(lambda: os.path.exists(log), timeout=5, what="a new log file after SIGUSR1")
        wait_until(lambda: len(sent) > 300, what="more load after rotation")
        stop.set()
        t.join(20)
        expected = 33 + len(sent)
        wait_until(lambda: len(read_lines(log + ".1")) + len(read_lines(log)) == expected, timeout=5,
                   what=f"{expected} lines across both files")
        assert len(read_lines(log)) > 0, "lines after the rotation go to the new file"
    finally:
        g.stop()
        b.stop()


def test_log_level_filters_and_startup_lists_the_effective_setup(tmp_path):
    b = Backend("127.0.0.2", free_port("127.0.0.2"))
    base = LOG_CONFIG.replace("BACKEND_PORT", str(b.server.server_address[1])).replace("LOGFILE", "off")
    try:
        g = Gateway(base)
        g.stop()
        info = g.logs()
        assert " INFO quickway 0.1.0 listening on 127.0.0.1:" in info and "with 2 worker(s); admin on 127.0.0.1:" in info
        assert " INFO service api: http://api.internal:" in info and " INFO route api: /api/ " in info
        g = Gateway(base.replace("level: info", "level: warn"))
        g.stop()
        assert " INFO " not in g.logs(), "log.level warn hides info lines"
    finally:
        b.stop()
