"""Response cache and request merging (issue: cache and merging), through the real
binary against real backends. Expectations follow RFC 9111 and spec/config.md."""
import json
import socket
import threading
import time
import urllib.request

import pytest

from harness import Backend, Gateway, free_port, http_call, read_response, wait_until

CONFIG = """
listen: 127.0.0.1:{PORT}
workers: 2
admin: { listen: 127.0.0.1:{ADMIN} }
cache:
  max_bytes: MAXBYTES
  max_object_bytes: 256KiB
  stale_if_error: 30s
services:
  api:
    host: api.internal
    port: BACKEND_PORT
    ips: [127.0.0.2]
    timeouts: { connect: 500ms, response: 1s }
routes:
  - name: short
    match: { path_prefix: /c/ }
    service: api
    strip_prefix: true
    cache: { ttl: 1s, vary: [Accept-Language] }
    coalesce: true
  - name: long
    match: { path_prefix: /l/ }
    service: api
    strip_prefix: true
    cache: { ttl: 60s }
  - name: merge
    match: { path_prefix: /m/ }
    service: api
    strip_prefix: true
    coalesce: true
    coalesce_max_waiters: 500
  - name: capped
    match: { path_prefix: /cap/ }
    service: api
    strip_prefix: true
    coalesce: true
    coalesce_max_waiters: 2
  - name: impatient
    match: { path_prefix: /wait/ }
    service: api
    strip_prefix: true
    coalesce: true
    coalesce_wait: 300ms
  - name: open
    match: { path_prefix: /o/ }
    service: api
    strip_prefix: true
"""


@pytest.fixture(scope="module")
def backend():
    b = Backend("127.0.0.2", free_port("127.0.0.2"))
    yield b
    b.stop()


def make(backend, max_bytes="8MiB"):
    port = backend.server.server_address[1]
    return Gateway(CONFIG.replace("BACKEND_PORT", str(port)).replace("MAXBYTES", max_bytes))


@pytest.fixture(scope="module")
def gw(backend):
    g = make(backend)
    yield g
    assert g.stop() == 0, g.logs()


def get(g, path, method="GET", headers=None):
    return http_call(g, method, path, headers)


def admin_post(g, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{g.admin_port}{path}", data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(req, timeout=5) as r:
        return json.loads(r.read())


def test_hit_after_miss_with_age_then_ttl_expiry(gw, backend):
    st, h, b1 = get(gw, "/c/hdr?id=ttl")
    assert st == 200 and h["x-cache"] == "MISS"
    st, h, b2 = get(gw, "/c/hdr?id=ttl")
    assert h["x-cache"] == "HIT" and b2 == b1 and "age" in h
    assert backend.path_hits("/hdr") >= 1
    hits = backend.path_hits("/hdr")
    wait_until(lambda: get(gw, "/c/hdr?id=ttl")[1]["x-cache"] == "MISS", timeout=5, interval=0.1, what="1s ttl to expire")
    assert backend.path_hits("/hdr") == hits + 1


def test_parameter_order_and_head_after_get(gw):
    assert get(gw, "/l/hdr?a=1&b=2&id=order")[1]["x-cache"] == "MISS"
    assert get(gw, "/l/hdr?b=2&id=order&a=1")[1]["x-cache"] == "HIT"
    st, h, body = get(gw, "/l/big/5000")
    st, h, body = get(gw, "/l/big/5000", method="HEAD")
    assert h["x-cache"] == "HIT" and h["content-length"] == "5000" and body == b""
    # A HEAD miss fills the entry (fetched as GET), so the next GET is a hit with the body.
    st, h, body = get(gw, "/l/big/777", method="HEAD")
    assert h["x-cache"] == "MISS" and h["content-length"] == "777" and body == b""
    st, h, body = get(gw, "/l/big/777")
    assert h["x-cache"] == "HIT" and len(body) == 777


def test_cache_control_and_cookies(gw, backend):
    for directive in ("no-store", "private", "no-cache"):
        get(gw, f"/l/hdr?Cache-Control={directive}&id={directive}")
        st, h, _ = get(gw, f"/l/hdr?Cache-Control={directive}&id={directive}")
        assert h["x-cache"] == "MISS", directive
    get(gw, "/l/hdr?Set-Cookie=session%3D1&id=cookie")
    assert get(gw, "/l/hdr?Set-Cookie=session%3D1&id=cookie")[1]["x-cache"] == "MISS"
    # max-age caps the route's 60s ttl.
    assert get(gw, "/l/hdr?Cache-Control=max-age%3D1&id=maxage")[1]["x-cache"] == "MISS"
    assert get(gw, "/l/hdr?Cache-Control=max-age%3D1&id=maxage")[1]["x-cache"] == "HIT"
    wait_until(lambda: get(gw, "/l/hdr?Cache-Control=max-age%3D1&id=maxage")[1]["x-cache"] == "MISS", timeout=5, interval=0.1,
               what="max-age=1 to expire")
    # Non-cacheable routes and methods say so.
    assert get(gw, "/o/x")[1]["x-cache"] == "BYPASS"
    assert get(gw, "/l/x", method="POST")[1]["x-cache"] == "BYPASS"


def test_vary_header_is_part_of_the_key(gw):
    st, h, fr = get(gw, "/c/lang", headers={"Accept-Language": "fr"})
    assert h["x-cache"] == "MISS" and json.loads(fr)["lang"] == "fr"
    st, h, de = get(gw, "/c/lang", headers={"Accept-Language": "de"})
    assert h["x-cache"] == "MISS" and json.loads(de)["lang"] == "de"
    st, h, again = get(gw, "/c/lang", headers={"Accept-Language": "fr"})
    assert h["x-cache"] == "HIT" and json.loads(again)["lang"] == "fr"


def test_purge_by_prefix_key_and_all(gw):
    for p in ("/l/hdr?id=p1", "/l/hdr?id=p2", "/l/sized/10/zz"):
        get(gw, p)
        assert get(gw, p)[1]["x-cache"] == "HIT"
    assert admin_post(gw, "/cache/purge", {"key": "GET 127.0.0.1:%d/l/hdr?id=p1" % gw.port})["purged"] == 1
    assert get(gw, "/l/hdr?id=p1")[1]["x-cache"] == "MISS"
    assert admin_post(gw, "/cache/purge", {"prefix": "/l/sized/"})["purged"] == 1
    assert get(gw, "/l/sized/10/zz")[1]["x-cache"] == "MISS"
    assert admin_post(gw, "/cache/purge", {"all": True})["purged"] >= 2
    assert get(gw, "/l/hdr?id=p2")[1]["x-cache"] == "MISS"


def test_stale_if_error(gw, backend):
    st, h, good = get(gw, "/c/flaky")
    assert st == 200 and h["x-cache"] == "MISS"
    backend.server.flaky_status = 500
    try:
        wait_until(lambda: get(gw, "/c/flaky")[1]["x-cache"] == "STALE", timeout=5, interval=0.1, what="stale answer")
        st, h, body = get(gw, "/c/flaky")
        assert st == 200 and body == good and h["x-cache"] == "STALE"
    finally:
        backend.server.flaky_status = 200


def test_stats_cache_figures(gw):
    s = gw.stats()
    assert set(s["cache"]) >= {"hits", "misses", "stores", "evictions", "expired", "bytes", "entries", "max_bytes"}
    assert s["cache"]["max_bytes"] == 8 << 20
    assert s["cache"]["hits"] > 0 and s["cache"]["stores"] > 0
    assert 0 < s["cache"]["bytes"] <= s["cache"]["max_bytes"]


def test_lru_order_under_byte_budget(backend):
    g = make(backend, max_bytes="64KiB")
    try:
        for name in ("a", "b", "c"):
            assert get(g, f"/l/sized/20000/{name}")[1]["x-cache"] == "MISS"
        assert get(g, "/l/sized/20000/a")[1]["x-cache"] == "HIT"       # a is now the most recently used
        assert get(g, "/l/sized/20000/d")[1]["x-cache"] == "MISS"      # needs room: b, the least recent, goes
        assert get(g, "/l/sized/20000/b")[1]["x-cache"] == "MISS"
        assert get(g, "/l/sized/20000/d")[1]["x-cache"] == "HIT"
        s = g.stats()["cache"]
        assert s["evictions"] >= 1 and s["bytes"] <= 64 * 1024
    finally:
        g.stop()


def rss_kib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_memory_stays_within_budget_when_filled_three_times(backend):
    g = make(backend, max_bytes="8MiB")
    try:
        for i in range(5):  # warm up allocator and connections
            get(g, f"/l/sized/65536/warm{i}")
        before = rss_kib(g.proc.pid)
        n = 3 * 8 * 1024 * 1024 // 65536   # 3x max_bytes of distinct 64 KiB answers
        for i in range(n):
            st, h, body = get(g, f"/l/sized/65536/fill{i}")
            assert st == 200 and len(body) == 65536
        after = rss_kib(g.proc.pid)
        s = g.stats()["cache"]
        assert s["bytes"] <= 8 * 1024 * 1024 and s["evictions"] >= n - 130
        growth_mib = (after - before) / 1024
        print(f"RSS before {before} KiB, after {after} KiB, growth {growth_mib:.1f} MiB for 8 MiB budget")
        assert growth_mib < 8 + 8, f"resident memory grew {growth_mib:.1f} MiB"
    finally:
        g.stop()


def concurrent_gets(g, path, n):
    """n requests on n pre-opened connections, sent as close together as possible."""
    socks = [socket.create_connection(("127.0.0.1", g.port), timeout=15) for _ in range(n)]
    results = [None] * n
    start = threading.Barrier(n)

    def one(i):
        start.wait()
        socks[i].sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        results[i] = read_response(socks[i].makefile("rb"))
        socks[i].close()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return results


def test_200_identical_gets_reach_the_backend_once(gw, backend):
    before = gw.stats()["coalescing"]
    results = concurrent_gets(gw, "/m/delay/200", 200)
    assert backend.path_hits("/delay/200") == 1
    assert all(r and r[0] == 200 for r in results)
    bodies = {r[2] for r in results}
    assert len(bodies) == 1, "every waiter got the leader's body"
    assert sorted({r[1]["x-cache"] for r in results}) == ["COALESCED", "MISS"]
    after = gw.stats()["coalescing"]
    assert after["leaders"] - before["leaders"] == 1
    assert after["waiters"] - before["waiters"] == 199


def test_leader_hangup_does_not_cancel_for_waiters(gw, backend):
    leader = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
    leader.sendall(b"GET /m/delay/700 HTTP/1.1\r\nHost: x\r\n\r\n")
    wait_until(lambda: backend.path_hits("/delay/700") == 1, what="leader's upstream call")
    before = gw.stats()["coalescing"]["waiters"]
    out = []
    # Same Host as the leader: the host is part of the key.
    threads = [threading.Thread(target=lambda: out.append(get(gw, "/m/delay/700", headers={"Host": "x"}))) for _ in range(5)]
    for t in threads:
        t.start()
    wait_until(lambda: gw.stats()["coalescing"]["waiters"] - before == 5, what="5 waiters")
    leader.close()
    for t in threads:
        t.join(10)
    assert [r[0] for r in out] == [200] * 5
    assert backend.path_hits("/delay/700") == 1


def test_upstream_error_goes_to_every_waiter_and_is_not_cached(gw, backend):
    results = concurrent_gets(gw, "/m/delay/1500", 20)
    assert [r[0] for r in results] == [504] * 20
    assert {json.loads(r[2])["error"]["code"] for r in results} == {"upstream_timeout"}
    assert backend.path_hits("/delay/1500") == 1
    results = concurrent_gets(gw, "/m/delay/1500", 1)
    assert backend.path_hits("/delay/1500") == 2, "errors are not cached"


def test_different_keys_are_not_merged(gw, backend):
    out = []
    threads = [threading.Thread(target=lambda p=p: out.append(get(gw, p))) for p in ("/m/delay/301", "/m/delay/302")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert backend.path_hits("/delay/301") == 1 and backend.path_hits("/delay/302") == 1


def test_waiters_are_capped_in_number_and_time(gw):
    results = concurrent_gets(gw, "/cap/delay/600", 5)
    statuses = sorted(r[0] for r in results)
    assert statuses == [200, 200, 200, 503, 503], statuses
    codes = {json.loads(r[2])["error"]["code"] for r in results if r[0] == 503}
    assert codes == {"overloaded"}
    t0 = time.monotonic()
    results = concurrent_gets(gw, "/wait/delay/900", 3)
    assert sorted(r[0] for r in results) == [200, 503, 503]
    assert time.monotonic() - t0 < 2.5


def test_merging_without_ttl_does_not_cache(gw, backend):
    concurrent_gets(gw, "/m/delay/250", 30)
    assert backend.path_hits("/delay/250") == 1
    st, h, _ = get(gw, "/m/delay/250")
    assert h["x-cache"] == "MISS" and backend.path_hits("/delay/250") == 2


def test_flight_is_cancelled_when_nobody_waits(gw, backend):
    backend.hangups.clear()
    leader = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
    leader.sendall(b"GET /m/hang HTTP/1.1\r\nHost: x\r\n\r\n")
    wait_until(lambda: backend.path_hits("/hang") == 1, what="the flight's upstream call")
    before = gw.stats()["coalescing"]["waiters"]
    waiter = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
    waiter.sendall(b"GET /m/hang HTTP/1.1\r\nHost: x\r\n\r\n")
    wait_until(lambda: gw.stats()["coalescing"]["waiters"] == before + 1, what="a waiter")
    leader.close()
    time.sleep(0.3)
    assert not backend.hangups.is_set(), "the call goes on while a waiter remains"
    waiter.close()
    wait_until(lambda: backend.hangups.is_set(), timeout=3, what="the upstream call to be cancelled")
