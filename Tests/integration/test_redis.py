"""Integration tests of the shared Redis tier (issue: several gateways).

Two real gateways share one real redis-server on loopback (with a password, so the
AUTH step is exercised too). Signed calls are made by examples/qw1_client.py (written
from spec/signature.md); the Redis contents are read back with the harness's own
RESP client, not the gateway's.
"""
import contextlib
import json
import os
import signal
import sys
import time
import urllib.error
import urllib.request

import pytest

from harness import ROOT, Backend, Gateway, RedisServer, free_port, http_call, wait_until

sys.path.insert(0, os.path.join(ROOT, "examples"))
import qw1_client  # noqa: E402

SECRET = "partner-secret"
REDIS_PASSWORD = "redis-pass-123"

CONFIG = """
listen: 127.0.0.1:{PORT}
workers: 2
admin: { listen: 127.0.0.1:{ADMIN} }
auth:
  salt: pepper
  nonce_ttl: 600s
  keys:
    - { id: partner, secret: partner-secret }
redis:
  url: redis://127.0.0.1:REDIS_PORT/3
  password_env: QW_TEST_REDIS_PASSWORD
  timeout: TIMEOUT
  on_failure: ON_FAILURE
  max_entry_bytes: 4KiB
services:
  api: { host: api.internal, port: BACKEND_PORT, ips: [127.0.0.2] }
routes:
  - name: signed
    match: { path_prefix: /signed/ }
    service: api
  - name: cached
    match: { path_prefix: /cached/ }
    service: api
    auth: off
    cache: { ttl: 60s }
  - name: big
    match: { path_prefix: /big/ }
    service: api
    auth: off
    cache: { ttl: 60s }
  - name: merged
    match: { path_prefix: /merged/ }
    service: api
    auth: off
    coalesce: true
    cache: { ttl: 60s }
"""


def make_gateway(redis, backend, on_failure="fail_closed", timeout="100ms"):
    text = (CONFIG.replace("REDIS_PORT", str(redis.port)).replace("BACKEND_PORT", str(backend.server.server_address[1]))
            .replace("ON_FAILURE", on_failure).replace("TIMEOUT", timeout))
    g = Gateway(text, workers=2, env={"QW_TEST_REDIS_PASSWORD": REDIS_PASSWORD})
    try:
        wait_until(lambda: g.stats()["redis"]["connected"], timeout=10, what="redis links up")
    except BaseException:
        g.stop()
        raise
    return g


@contextlib.contextmanager
def own_redis_and_gateway(backend, **gateway_options):
    """A Redis of the test's own (it will be stopped or frozen) and one gateway on it."""
    r = RedisServer(password=REDIS_PASSWORD)
    g = None
    try:
        g = make_gateway(r, backend, **gateway_options)
        yield r, g
    finally:
        r.resume()
        stopped = g.stop() if g else 0
        r.stop()
        assert stopped == 0, g.logs()


def signed_headers(method, target, body=b""):
    return {"Authorization": qw1_client.authorization("partner", SECRET, "pepper", method, target, body)}


# Behind one load balancer every gateway sees the same public Host (part of the cache key).
HOST = {"Host": "api.example.com"}


def get(g, path):
    return http_call(g, "GET", path, HOST)


def code(body):
    return json.loads(body)["error"]["code"]


@pytest.fixture(scope="module")
def backend():
    b = Backend("127.0.0.2", free_port("127.0.0.2"))
    yield b
    b.stop()


@pytest.fixture(scope="module")
def redis():
    r = RedisServer(password=REDIS_PASSWORD)
    yield r
    r.stop()


@pytest.fixture(scope="module")
def pair(redis, backend):
    a = make_gateway(redis, backend)
    try:
        b = make_gateway(redis, backend)
    except BaseException:
        a.stop()
        raise
    yield a, b
    assert a.stop() == 0, a.logs()
    assert b.stop() == 0, b.logs()


def test_nonce_used_at_one_gateway_is_a_replay_at_the_other(pair, backend, redis):
    a, b = pair
    headers = signed_headers("GET", "/signed/order/1")
    st, _, body = http_call(a, "GET", "/signed/order/1", headers)
    assert st == 200, body
    hits = backend.hits
    st, h, body = http_call(b, "GET", "/signed/order/1", headers)
    assert st == 401 and code(body) == "auth_replayed", body
    assert backend.hits == hits, "the replay reached the backend"
    # And the other way round, with a fresh nonce.
    headers = signed_headers("POST", "/signed/order/2", b"{}")
    assert http_call(b, "POST", "/signed/order/2", headers, b"{}")[0] == 200
    assert code(http_call(a, "POST", "/signed/order/2", headers, b"{}")[2]) == "auth_replayed"
    assert a.stats()["redis"]["nonces"]["replayed"] == 1
    assert b.stats()["redis"]["nonces"]["replayed"] == 1
    # The pair is in Redis under the documented key, with the nonce TTL.
    nonce = headers["Authorization"].split("Nonce=")[1].split(",")[0]
    key = f"quickway:n:partner:{nonce}"
    assert redis.command("EXISTS", key, db=3) == 1
    assert 590_000 < redis.command("PTTL", key, db=3) <= 600_000


def test_response_cached_through_one_gateway_is_a_hit_at_the_other(pair, backend, redis):
    a, b = pair
    st, h, body = get(a, "/cached/catalog?page=1")
    assert st == 200 and h["x-cache"] == "MISS"
    assert backend.path_hits("/cached/catalog") == 1
    wait_until(lambda: a.stats()["redis"]["cache"]["stores"] >= 1, what="the entry stored in Redis")
    st2, h2, body2 = get(b, "/cached/catalog?page=1")
    assert st2 == 200 and h2["x-cache"] == "HIT", h2
    assert body2 == body
    assert backend.path_hits("/cached/catalog") == 1, "gateway B went upstream"
    assert b.stats()["redis"]["cache"]["hits"] == 1
    # B's local tier was filled: the next hit does not ask Redis.
    get(b, "/cached/catalog?page=1")
    assert b.stats()["redis"]["cache"]["hits"] == 1
    assert b.stats()["cache"]["hits"] >= 1
    # Stored under the documented key with the route's TTL.
    ttl = redis.command("PTTL", b"quickway:c:GET api.example.com/cached/catalog?page=1", db=3)
    assert 50_000 < ttl <= 60_000, ttl


def test_entries_over_max_entry_bytes_stay_local(pair, backend, redis):
    a, b = pair
    assert get(a, "/big/10000")[1]["x-cache"] == "MISS"
    assert get(a, "/big/10000")[1]["x-cache"] == "HIT"
    assert a.stats()["redis"]["cache"]["too_large"] == 1, a.stats()["redis"]
    st, h, body = get(b, "/big/10000")
    assert st == 200 and h["x-cache"] == "MISS" and len(body) == 10000
    assert backend.path_hits("/big/10000") == 2
    assert redis.command("EXISTS", b"quickway:c:GET api.example.com/big/10000?", db=3) == 0


def test_purge_reaches_redis_and_every_gateways_local_tier(pair, backend, redis):
    a, b = pair
    for path in ("/cached/purge-me/1", "/cached/keep/1"):
        get(a, path)
        # The store reaches Redis just after A's answer: wait for it, then B hits it.
        wait_until(lambda: redis.command("EXISTS", f"quickway:c:GET api.example.com{path}?", db=3) == 1, what="stored in Redis")
        assert get(b, path)[1]["x-cache"] == "HIT"
    before = backend.path_hits("/cached/purge-me/1")
    assert before == 1
    req = urllib.request.Request(f"http://127.0.0.1:{a.admin_port}/cache/purge", data=b'{"prefix": "/cached/purge-me/"}', method="POST")
    with urllib.request.urlopen(req, timeout=5) as r:
        out = json.loads(r.read())
    assert out["purged"] == 1 and out["purged_redis"] == 1, out
    # B's local copy goes too (published on the purge channel): its next call goes upstream.
    wait_until(lambda: get(b, "/cached/purge-me/1")[1]["x-cache"] == "MISS", timeout=5, what="B's local entry purged")
    assert backend.path_hits("/cached/purge-me/1") == 2
    # Other entries are untouched in both tiers.
    assert get(b, "/cached/keep/1")[1]["x-cache"] == "HIT"
    assert backend.path_hits("/cached/keep/1") == 1


def purge(g, body):
    req = urllib.request.Request(f"http://127.0.0.1:{g.admin_port}/cache/purge", data=body, method="POST")
    with urllib.request.urlopen(req, timeout=5) as r:
        return json.loads(r.read())


def test_purge_by_key_and_purge_all_reach_redis(pair, redis):
    a, b = pair
    for path in ("/cached/k/1", "/cached/k/2", "/cached/k/3"):
        get(a, path)
    keys = lambda: sorted(k for k in redis.command("KEYS", "quickway:c:*", db=3) if b"/cached/k/" in k)
    wait_until(lambda: len(keys()) == 3, what="three entries in Redis")
    out = purge(b, json.dumps({"key": "GET api.example.com/cached/k/2?"}).encode())
    assert out["purged_redis"] == 1, out
    assert keys() == [b"quickway:c:GET api.example.com/cached/k/1?", b"quickway:c:GET api.example.com/cached/k/3?"]
    # A's local copy of k/2 went too (published), so A asks upstream again.
    wait_until(lambda: get(a, "/cached/k/2")[1]["x-cache"] == "MISS", timeout=5, what="A's local k/2 purged")
    # That miss stored k/2 again; the store is written to Redis after the answer, so wait
    # for it (a store still in flight when a purge runs can outlive the purge).
    wait_until(lambda: len(keys()) == 3, what="k/2 stored again")
    out = purge(a, b'{"all": true}')
    assert out["purged_redis"] >= 3 and redis.command("KEYS", "quickway:c:*", db=3) == []
    wait_until(lambda: get(b, "/cached/k/1")[1]["x-cache"] == "MISS", timeout=5, what="B's local tier emptied")


def test_merging_stays_per_gateway_and_the_leader_asks_redis_once(pair, backend):
    import concurrent.futures
    a, _ = pair
    before = a.stats()["redis"]["cache"]
    with concurrent.futures.ThreadPoolExecutor(20) as pool:
        results = list(pool.map(lambda _: get(a, "/merged/delay/300"), range(20)))
    assert all(st == 200 for st, _, _ in results)
    assert backend.path_hits("/merged/delay/300") == 1
    after = a.stats()["redis"]["cache"]
    # One lookup (the leader's miss) and one store for 20 merged requests.
    assert after["misses"] - before["misses"] == 1
    wait_until(lambda: a.stats()["redis"]["cache"]["stores"] - before["stores"] == 1, what="one store")


def test_password_is_never_shown(pair, redis):
    a, _ = pair
    with urllib.request.urlopen(f"http://127.0.0.1:{a.admin_port}/stats", timeout=5) as r:
        stats = r.read().decode()
    with urllib.request.urlopen(f"http://127.0.0.1:{a.admin_port}/metrics", timeout=5) as r:
        metrics = r.read().decode()
    assert REDIS_PASSWORD not in stats + metrics + a.logs()
    assert "quickway_redis_up 1" in metrics
    assert json.loads(stats)["redis"]["url"] == f"redis://:***@127.0.0.1:{redis.port}/3"


def test_redis_stopped_fail_closed_then_recovers(backend):
    with own_redis_and_gateway(backend, on_failure="fail_closed") as (r, g):
        r.stop()
        wait_until(lambda: not g.stats()["redis"]["connected"], timeout=5, what="link down")
        t0 = time.monotonic()
        st, _, body = http_call(g, "GET", "/signed/x", signed_headers("GET", "/signed/x"))
        assert st == 503 and code(body) == "redis_unavailable", body
        assert time.monotonic() - t0 < 1.0
        assert g.stats()["redis"]["nonces"]["fail_closed"] == 1
        # Unsigned cached routes keep working: the shared cache tier is only skipped.
        assert get(g, "/cached/while-down")[0] == 200
        with urllib.request.urlopen(f"http://127.0.0.1:{g.admin_port}/metrics", timeout=5) as m:
            assert "quickway_redis_up 0" in m.read().decode()
        # Every link keeps retrying (with backoff) while Redis is away.
        wait_until(lambda: g.stats()["redis"]["connect_failures"] >= 8, timeout=10, what="reconnect attempts")
        r.start()
        wait_until(lambda: g.stats()["redis"]["connected"], timeout=10, what="reconnect after Redis came back")
        assert http_call(g, "GET", "/signed/x", signed_headers("GET", "/signed/x"))[0] == 200
        s = g.stats()["redis"]
        links = s["links"]
        assert links == 4  # two workers, the admin loop, the purge subscriber
        # Every link lost its connection and made a new one (a link may have needed more
        # than one try while Redis was starting).
        assert s["disconnects"] >= links and s["connects"] >= 2 * links and s["links_up"] == links


def test_redis_stopped_fail_open_uses_the_local_store(backend):
    with own_redis_and_gateway(backend, on_failure="fail_open") as (r, g):
        r.stop()
        wait_until(lambda: not g.stats()["redis"]["connected"], timeout=5, what="link down")
        headers = signed_headers("GET", "/signed/open")
        assert http_call(g, "GET", "/signed/open", headers)[0] == 200
        st, _, body = http_call(g, "GET", "/signed/open", headers)
        assert st == 401 and code(body) == "auth_replayed"
        assert g.stats()["redis"]["nonces"]["fail_open"] == 2


def test_a_stalled_redis_costs_at_most_the_timeout(backend):
    with own_redis_and_gateway(backend, on_failure="fail_closed", timeout="80ms") as (r, g):
        r.pause()
        for i in range(3):
            t0 = time.monotonic()
            st, _, body = http_call(g, "GET", f"/signed/s{i}", signed_headers("GET", f"/signed/s{i}"))
            elapsed = time.monotonic() - t0
            assert st == 503 and code(body) == "redis_unavailable", body
            assert elapsed < 0.6, elapsed
            t0 = time.monotonic()
            st, h, _ = get(g, f"/cached/stalled/{i}")
            assert st == 200 and time.monotonic() - t0 < 0.6
        assert g.stats()["redis"]["timeouts"] >= 6
        r.resume()
        # The stuck connection is dropped and made again (or simply answers again).
        wait_until(lambda: http_call(g, "GET", "/signed/after", signed_headers("GET", "/signed/after"))[0] == 200,
                   timeout=10, interval=0.2, what="signed calls accepted after Redis resumed")


def test_reload_keeps_the_running_redis_settings_and_says_so(redis, backend):
    g = make_gateway(redis, backend)
    try:
        text = open(g.config_path).read()
        open(g.config_path, "w").write(text.replace("timeout: 100ms", "timeout: 900ms"))
        req = urllib.request.Request(f"http://127.0.0.1:{g.admin_port}/reload", data=b"", method="POST")
        with urllib.request.urlopen(req, timeout=5) as r:
            changes = json.loads(r.read())["changes"]
        assert any("redis changes need a restart" in c for c in changes), changes
        assert g.stats()["redis"]["timeout_ms"] == 100
        assert g.stats()["redis"]["connected"]
    finally:
        assert g.stop() == 0, g.logs()


# --- What an operator hits (issue 30): purge forms, a frozen Redis, readiness, a Redis
# --- name that does not resolve at start.

def admin_request(g, method, path, body=None):
    req = urllib.request.Request(f"http://127.0.0.1:{g.admin_port}{path}", data=body, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def test_purge_by_url_takes_every_variant_and_by_route(pair, redis):
    a, b = pair
    # Three variants of one URL: query order, an encoded unreserved byte, and HEAD/GET share.
    for target in ("/cached/u/item?y=2&x=1", "/cached/u/%69tem?x=1&y=2"):
        get(a, target)
    get(a, "/cached/u/other?x=1")
    keys = lambda: sorted(k for k in redis.command("KEYS", "quickway:c:*", db=3) if b"/cached/u/" in k)
    wait_until(lambda: len(keys()) == 2, what="two keys in Redis (the variants share one)")
    st, out = admin_request(b, "POST", "/cache/purge", json.dumps({"url": "http://api.example.com/cached/u/item?x=1&y=2"}).encode())
    assert st == 200 and out["redis"] == 1, out
    assert keys() == [b"quickway:c:GET api.example.com/cached/u/other?x=1"]
    wait_until(lambda: get(a, "/cached/u/item?x=1&y=2")[1]["x-cache"] == "MISS", timeout=5, what="A's local copy purged")
    assert get(a, "/cached/u/other?x=1")[1]["x-cache"] == "HIT"
    # By route: everything under the route's path_prefix, in both tiers.
    st, out = admin_request(a, "POST", "/cache/purge", json.dumps({"route": "cached"}).encode())
    assert st == 200 and out["local"] >= 1 and out["redis"] >= 1, out
    assert get(a, "/cached/u/other?x=1")[1]["x-cache"] == "MISS"
    # Bodies that name nothing are 400, with what is expected.
    for body in (b"", b"{}", b'{"url": "/no/host"}', b'{"route": "nope"}', b'{"all": false}', b'{"prefix": "/a", "all": true}'):
        st, out = admin_request(a, "POST", "/cache/purge", body)
        assert st == 400 and out["error"]["code"] == "bad_request", (body, out)


def test_purge_on_a_frozen_redis_is_bounded_by_the_timeout(backend):
    with own_redis_and_gateway(backend, on_failure="fail_closed", timeout="100ms") as (r, g):
        get(g, "/cached/frozen/1")
        r.pause()
        t0 = time.monotonic()
        st, out = admin_request(g, "POST", "/cache/purge", b'{"all": true}')
        elapsed = time.monotonic() - t0
        assert st == 503 and out["error"]["code"] == "redis_unavailable", out
        assert "purged 1 local entry" in out["error"]["message"], out
        assert elapsed < 2.0, elapsed


def test_ready_follows_redis_where_fail_closed(backend):
    with own_redis_and_gateway(backend, on_failure="fail_closed") as (r, g):
        assert admin_request(g, "GET", "/ready")[0] == 200
        assert admin_request(g, "GET", "/health")[0] == 200
        r.stop()
        wait_until(lambda: admin_request(g, "GET", "/ready")[0] == 503, timeout=5, what="not ready without Redis")
        st, out = admin_request(g, "GET", "/ready")
        assert any("redis" in x for x in out["reasons"]), out
        assert admin_request(g, "GET", "/health")[0] == 200   # alive all the same
        r.start()
        wait_until(lambda: admin_request(g, "GET", "/ready")[0] == 200, timeout=10, what="ready again")


def test_a_redis_name_that_does_not_resolve_yet_does_not_stop_the_gateway(backend):
    # A name that resolves nowhere (RFC 6761 .invalid): the gateway starts, follows
    # on_failure (fail_open: signed calls use the local store), is alive but not ready,
    # and keeps looking the name up.
    text = (CONFIG.replace("127.0.0.1:REDIS_PORT", "redis.quickway-test.invalid:6379")
            .replace("BACKEND_PORT", str(backend.server.server_address[1]))
            .replace("ON_FAILURE", "fail_open").replace("TIMEOUT", "50ms"))
    g = Gateway(text, workers=1, env={"QW_TEST_REDIS_PASSWORD": REDIS_PASSWORD})
    try:
        headers = signed_headers("GET", "/signed/unresolved")
        assert http_call(g, "GET", "/signed/unresolved", headers)[0] == 200
        assert http_call(g, "GET", "/signed/unresolved", headers)[0] == 401   # replay caught locally
        assert "cannot resolve" in g.logs()
        wait_until(lambda: g.stats()["redis"]["connect_failures"] >= 3, timeout=10, what="retries in the background")
        assert admin_request(g, "GET", "/health")[0] == 200
    finally:
        assert g.stop() == 0, g.logs()
