"""Rate limits shared by several gateways through Redis (`rate_limits.store: redis`,
issue 32).

Three real gateways (one worker each) share one real redis-server. One key is limited to
100/s (burst 10); 300 calls/s are offered, 100/s to each gateway, for 10 s: the gateways
together must admit 100/s within 10%, with no Redis round trip per call (a sync per
`sync_interval`), and every call goes to the backend (no cache). The admitted calls'
latency is printed beside an unlimited route's under the same admitted rate (the limit
adds no wait: a GCRA decision, never a queue); BENCHMARKS.md records the figures. Then Redis goes away: `fail_open` limits locally, `fail_closed`
refuses shared-limit calls with 503 `redis_unavailable` until Redis is back. Signed
calls come from examples/qw1_client.py. The load is bounded in count and time.
"""
import contextlib
import http.client
import json
import os
import sys
import threading
import time

import pytest

from harness import ROOT, BackendProcess, Gateway, RedisServer, free_port, wait_until

sys.path.insert(0, os.path.join(ROOT, "examples"))
import qw1_client  # noqa: E402

CONFIG = """
listen: 127.0.0.1:{PORT}
workers: 1
admin: { listen: 127.0.0.1:{ADMIN} }
auth:
  salt: pepper
  keys:
    - { id: partner, secret: partner-secret }
redis:
  url: redis://127.0.0.1:REDIS_PORT/4
  timeout: 100ms
  on_failure: ON_FAILURE
  nonces: false
  cache: false
rate_limits: { store: redis, sync_interval: 100ms }
services:
  api: { host: api.internal, port: BACKEND_PORT, ips: [127.0.0.2] }
routes:
  - name: limited
    match: { path_prefix: /l/ }
    service: api
    rate_limit: [{ by: key, rate: RATE, burst: BURST }]
  - name: unlimited
    match: { path_prefix: /u/ }
    service: api
"""


@pytest.fixture(scope="module")
def backend():
    # In its own process: the test's load threads do not share its interpreter.
    b = BackendProcess("127.0.0.2", free_port("127.0.0.2"))
    yield b
    b.kill()


def gateway(redis, backend, on_failure="fail_open", rate="100/s", burst=10):
    text = (CONFIG.replace("REDIS_PORT", str(redis.port)).replace("BACKEND_PORT", str(backend.port))
            .replace("ON_FAILURE", on_failure).replace("RATE", rate).replace("BURST", str(burst)))
    g = Gateway(text, workers=1)
    try:
        wait_until(lambda: g.stats()["redis"]["connected"], timeout=10, what="redis links up")
    except BaseException:
        g.stop()
        raise
    return g


@contextlib.contextmanager
def gateways(n, backend, **options):
    r = RedisServer()
    gs = []
    try:
        for _ in range(n):
            gs.append(gateway(r, backend, **options))
        yield r, gs
    finally:
        for g in gs:
            g.stop()
        r.stop()


def signed(path="/l/x"):
    return {"Authorization": qw1_client.authorization("partner", "partner-secret", "pepper", "GET", path)}


def one(g, conn=None, path="/l/x"):
    c = conn or http.client.HTTPConnection("127.0.0.1", g.port, timeout=10)
    try:
        c.request("GET", path, headers=signed(path))
        r = c.getresponse()
        body = r.read()
        return r.status, body
    finally:
        if conn is None:
            c.close()


def offer(gs, path, per_gateway, seconds):
    """Offers `per_gateway` calls/s to each gateway for `seconds`, paced, one connection
    each; bounded in count and in time. Returns each gateway's counts by status, the
    latencies (s) of the admitted calls, and the elapsed time."""
    counts = [dict() for _ in gs]
    latencies = []
    lock = threading.Lock()

    def load(i, g):
        conn = http.client.HTTPConnection("127.0.0.1", g.port, timeout=10)
        start = time.monotonic()
        for n in range(int(seconds * per_gateway)):   # bounded in count ...
            due = start + n / per_gateway
            now = time.monotonic()
            if now > start + seconds + 5:              # ... and in time
                break
            if due > now:
                time.sleep(due - now)
            headers = signed(path)
            t = time.monotonic()
            conn.request("GET", path, headers=headers)
            r = conn.getresponse()
            r.read()
            took = time.monotonic() - t
            with lock:
                counts[i][r.status] = counts[i].get(r.status, 0) + 1
                if r.status == 200:
                    latencies.append(took)
        conn.close()

    t0 = time.monotonic()
    threads = [threading.Thread(target=load, args=(i, g)) for i, g in enumerate(gs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=seconds + 20)
    return counts, latencies, time.monotonic() - t0


def percentile(values, p):
    v = sorted(values)
    return v[min(len(v) - 1, int(len(v) * p))] if v else float("nan")


def test_three_gateways_admit_the_shared_rate_within_ten_percent(backend):
    seconds, per_gateway = 10.0, 100
    with gateways(3, backend) as (redis, gs):
        before = redis.command("INFO", "commandstats")
        counts, limited_lat, elapsed = offer(gs, "/l/x", per_gateway, seconds)
        admitted = sum(c.get(200, 0) for c in counts)
        refused = sum(c.get(429, 0) for c in counts)
        offered = admitted + refused
        assert offered >= 0.95 * seconds * per_gateway * 3, f"the load was offered: {counts}"
        expected = 100 * elapsed
        print(f"shared limit: {admitted} admitted of {offered} in {elapsed:.2f}s (expected {expected:.0f}); per gateway {counts}")
        assert abs(admitted - expected) <= 0.10 * expected, f"{admitted} admitted in {elapsed:.2f}s, expected {expected:.0f} +-10%"
        assert all(c.get(200, 0) > 0 for c in counts), "every gateway admitted a share"
        # No round trip per call: the syncs (INCRBY) are far fewer than the calls.
        after = redis.command("INFO", "commandstats")
        def incrby(info):
            text = info.decode() if isinstance(info, bytes) else str(info)
            for line in text.splitlines():
                if line.startswith("cmdstat_incrby:"):
                    return int(line.split("calls=")[1].split(",")[0])
            return 0
        syncs = incrby(after) - incrby(before)
        assert 0 < syncs <= 3 * (elapsed / 0.1) * 1.2, f"{syncs} INCRBY for {offered} calls"
        # The same admitted rate (about 100/s over the three) on a route without a limit:
        # the admitted calls' latency is what the limit adds (figures for BENCHMARKS.md).
        ucounts, open_lat, _ = offer(gs, "/u/x", 34, seconds / 2)
        assert sum(c.get(200, 0) for c in ucounts) >= 0.95 * 34 * 3 * seconds / 2, f"unlimited calls answered: {ucounts}"
        ms = lambda v: f"{v * 1000:.2f} ms"
        print(f"admitted latency: limited route p50 {ms(percentile(limited_lat, 0.5))} p99 {ms(percentile(limited_lat, 0.99))}"
              f" ({len(limited_lat)} calls); unlimited route p50 {ms(percentile(open_lat, 0.5))}"
              f" p99 {ms(percentile(open_lat, 0.99))} ({len(open_lat)} calls)")


def test_redis_down_fail_open_limits_locally(backend):
    with gateways(1, backend, on_failure="fail_open", rate="1/m", burst=5) as (redis, (g,)):
        redis.stop()
        wait_until(lambda: not g.stats()["redis"]["connected"], timeout=5, what="link down")
        got = [one(g)[0] for _ in range(8)]
        assert got == [200] * 5 + [429] * 3, "the local table still limits"


def test_redis_down_fail_closed_refuses_then_recovers(backend):
    with gateways(1, backend, on_failure="fail_closed", rate="100/s", burst=100) as (redis, (g,)):
        assert one(g)[0] == 200
        redis.stop()
        wait_until(lambda: not g.stats()["redis"]["connected"], timeout=5, what="link down")
        # The next sync fails; from then on calls under the shared limit are refused.
        def refused():
            st, body = one(g)
            return st == 503 and json.loads(body)["error"]["code"] == "redis_unavailable"
        wait_until(refused, timeout=5, what="503 redis_unavailable")
        redis.start()
        wait_until(lambda: one(g)[0] == 200, timeout=15, what="calls admitted once Redis is back")
