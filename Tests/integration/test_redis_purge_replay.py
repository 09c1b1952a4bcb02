"""Integration tests of purges that are never lost (issue 36).

Two gateways share one real redis-server. Gateway B reaches Redis only through a TCP
relay in this test that can be cut silently: while cut it forwards nothing either way
and holds new connections without answering (no FIN, no RST, as a network partition
looks), and healing closes what it held and forwards again. (A relay, not network
namespaces: it needs no privileges and cuts exactly B's Redis traffic.)

While B is cut, a purge made through A is recorded in Redis (epoch and log) as well as
published. B notices the cut by its heartbeat and bypasses its local tier from then on;
after healing it replays the purges it missed before its local tier serves again, so
no purged entry is served. A log trimmed past what B missed makes B drop its whole
local tier.
"""
import select
import socket
import threading
import time

import pytest

from harness import Backend, Gateway, RedisServer, free_port, wait_until
from purge_helpers import HEARTBEAT_S, TIMEOUT_S, get, purge, purges, wait_following, warm

CONFIG = """
listen: 127.0.0.1:{PORT}
workers: 2
admin: { listen: 127.0.0.1:{ADMIN} }
redis:
  url: redis://127.0.0.1:REDIS_PORT/4
  timeout: 100ms
  on_failure: fail_open
services:
  api: { host: api.internal, port: BACKEND_PORT, ips: [127.0.0.2] }
routes:
  - name: cached
    match: { path_prefix: /cached/ }
    service: api
    auth: off
    cache: { ttl: 300s }
"""


class CuttableRelay:
    """127.0.0.1:port -> Redis, one thread, select() over every pair of sockets."""

    def __init__(self, target_port):
        self.target = ("127.0.0.1", target_port)
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.pairs = {}    # socket -> its peer (None while cut: held, not forwarded)
        self.cut_now = False
        self.lock = threading.Lock()
        self.stopping = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stopping:
            with self.lock:
                socks = [self.listener] + list(self.pairs)
            r, _, _ = select.select(socks, [], [], 0.05)
            for s in r:
                with self.lock:
                    if s is self.listener:
                        c, _ = self.listener.accept()
                        if self.cut_now:
                            self.pairs[c] = None
                        else:
                            u = socket.create_connection(self.target, timeout=2)
                            self.pairs[c] = u
                            self.pairs[u] = c
                        continue
                    if s not in self.pairs:
                        continue
                    try:
                        data = s.recv(65536)
                    except OSError:
                        data = b""
                    peer = self.pairs.get(s)
                    if not data:
                        self._drop(s)
                    elif not self.cut_now and peer is not None:
                        peer.sendall(data)
                    # Cut: read and dropped, as a partition loses packets.

    def _drop(self, s):
        peer = self.pairs.pop(s, None)
        s.close()
        if peer is not None:
            self.pairs.pop(peer, None)
            peer.close()

    def cut(self):
        with self.lock:
            self.cut_now = True

    def heal(self):
        """What was held is closed (as the stalled connections would be), then forwarding resumes."""
        with self.lock:
            for s in list(self.pairs):
                if s in self.pairs:
                    self._drop(s)
            self.cut_now = False

    def stop(self):
        self.stopping = True
        self.thread.join(5)
        with self.lock:
            for s in list(self.pairs):
                if s in self.pairs:
                    self._drop(s)
        self.listener.close()


def make_gateway(redis_port, backend):
    return wait_following(Gateway(CONFIG.replace("REDIS_PORT", str(redis_port)).replace("BACKEND_PORT", str(backend.server.server_address[1])), workers=2))


@pytest.fixture()
def setup():
    backend = Backend("127.0.0.2", free_port("127.0.0.2"))
    redis = RedisServer()
    relay = CuttableRelay(redis.port)
    a = b = None
    try:
        a = make_gateway(redis.port, backend)
        b = make_gateway(relay.port, backend)
        yield backend, redis, relay, a, b
    finally:
        relay.heal()
        codes = [g.stop() for g in (a, b) if g]
        relay.stop()
        redis.stop()
        backend.stop()
        assert codes == [0] * len(codes), (a.logs() if a else "") + (b.logs() if b else "")


def test_a_purge_missed_while_cut_off_is_replayed_before_the_local_tier_serves(setup):
    backend, redis, relay, a, b = setup
    warm(a, b, ["/cached/gone/1", "/cached/gone/2", "/cached/kept/1"])
    epoch_before = purges(b)["epoch"]

    relay.cut()
    cut_at = time.monotonic()
    wait_until(lambda: purges(b)["local_tier_serving"] is False, timeout=5, what="B's local tier gated after the cut")
    noticed = time.monotonic() - cut_at
    # The bound: heartbeat + timeout (plus the stats poll and scheduling slack).
    assert noticed <= HEARTBEAT_S + TIMEOUT_S + 0.5, noticed

    out = purge(a, {"prefix": "/cached/gone/"})
    assert out["purged"] == 2 and out["purged_redis"] == 2, out

    # While cut, B serves nothing from its local tier: gone/1 goes upstream (a miss)
    # instead of the purged copy, and so does an entry nobody purged.
    hits = backend.path_hits("/cached/gone/1")
    st, h, _ = get(b, "/cached/gone/1")
    assert st == 200 and h["x-cache"] == "MISS" and backend.path_hits("/cached/gone/1") == hits + 1
    assert purges(b)["bypassed_lookups"] >= 1

    relay.heal()
    wait_until(lambda: purges(b)["local_tier_serving"] is True, timeout=10, what="B caught up")
    s = purges(b)
    assert s["replayed"] == 1 and s["local_tier_dropped"] == 0 and s["epoch"] == epoch_before + 1, s
    assert s["fell_behind"] >= 1
    # gone/2 was purged while B was cut and never asked for since: not served from B's tier.
    hits = backend.path_hits("/cached/gone/2")
    assert get(b, "/cached/gone/2")[1]["x-cache"] == "MISS"
    assert backend.path_hits("/cached/gone/2") == hits + 1
    # gone/1, stored at B during the cut, went with the replayed purge too (it may have
    # been fetched before the purge took effect upstream).
    assert get(b, "/cached/gone/1")[1]["x-cache"] == "MISS"
    # What was not purged is served from B's local tier again (no wholesale drop).
    redis_hits = b.stats()["redis"]["cache"]["hits"]
    assert get(b, "/cached/kept/1")[1]["x-cache"] == "HIT"
    assert b.stats()["redis"]["cache"]["hits"] == redis_hits, "kept/1 came from Redis, not the local tier"


def test_a_log_trimmed_past_what_was_missed_drops_the_whole_local_tier(setup):
    backend, redis, relay, a, b = setup
    warm(a, b, ["/cached/x/1", "/cached/y/1"])
    relay.cut()
    wait_until(lambda: purges(b)["local_tier_serving"] is False, timeout=5, what="B gated")
    purge(a, {"prefix": "/cached/x/"})
    # As if more than the log's capacity had been purged since: the log is gone.
    assert redis.command("DEL", "quickway:{purge}:log", db=4) == 1
    relay.heal()
    wait_until(lambda: purges(b)["local_tier_serving"] is True, timeout=10, what="B caught up")
    s = purges(b)
    assert s["local_tier_dropped"] == 1 and s["replayed"] == 0, s
    # The follower's link is back; the workers' links (which read the shared tier) come
    # back on their own backoff: a lookup before then is a miss, not a Redis hit.
    wait_until(lambda: b.stats()["redis"]["connected"], timeout=10, what="B's Redis links all up")
    assert "no longer reaches back" in b.logs()
    # x/1 was purged: B goes upstream for it.
    hits = backend.path_hits("/cached/x/1")
    assert get(b, "/cached/x/1")[1]["x-cache"] == "MISS" and backend.path_hits("/cached/x/1") == hits + 1
    # y/1 was never purged, but B cannot know what it missed: its local copy went, and
    # the answer comes from Redis's tier (still there), not B's.
    redis_hits = b.stats()["redis"]["cache"]["hits"]
    assert get(b, "/cached/y/1")[1]["x-cache"] == "HIT"
    assert b.stats()["redis"]["cache"]["hits"] == redis_hits + 1


def test_the_purge_is_recorded_in_redis(setup):
    backend, redis, relay, a, b = setup
    e0 = int(redis.command("GET", "quickway:{purge}:epoch", db=4) or 0)
    purge(a, {"prefix": "/cached/rec/"})
    purge(b, {"all": True})
    assert int(redis.command("GET", "quickway:{purge}:epoch", db=4)) == e0 + 2
    log = redis.command("LRANGE", "quickway:{purge}:log", 0, -1, db=4)
    assert log[-2:] == [f"{e0 + 1}:p/cached/rec/".encode(), f"{e0 + 2}:a".encode()]
    # Both gateways applied both (the epoch each reports is Redis's).
    wait_until(lambda: purges(a)["epoch"] == e0 + 2 and purges(b)["epoch"] == e0 + 2, what="both at the new epoch")
