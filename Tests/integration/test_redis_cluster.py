"""Integration tests of Redis Cluster (issue 36).

Six real redis-server processes on 127.0.0.1 (cluster mode, no persistence), joined
with `redis-cli --cluster create ... --cluster-replicas 1` into three masters with a
replica each. Two gateways share nonces, the second cache tier and purges through the
cluster. Key slots are computed here with Python's own CRC16 (`binascii.crc_hqx`, the
XMODEM variant the cluster specification names), checked against `CLUSTER KEYSLOT`.

The migration test moves one slot that the load uses (its nonces and cache keys are
chosen to hash there) from one master to another with the real commands (CLUSTER
SETSLOT IMPORTING/MIGRATING, MIGRATE ... KEYS, CLUSTER SETSLOT NODE) while paced signed
calls run, each first used at one gateway and replayed at the other, and a purge is made
in the middle. Counted: replays wrongly accepted, first uses refused, 5xx answers, cache
stores missing afterwards, purged keys left, and the redirects the gateways followed.
"""
import binascii
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from harness import ROOT, Backend, CertAuthority, Gateway, RedisServer, free_port, http_call, wait_until

sys.path.insert(0, os.path.join(ROOT, "examples"))
import qw1_client  # noqa: E402

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
  timeout: 250ms
  on_failure: fail_closed
  cluster: { nodes: [SEEDS] }
rate_limits: { store: redis, sync_interval: 50ms }
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
    cache: { ttl: 300s }
  - name: limited
    match: { path_prefix: /limited/ }
    service: api
    auth: off
    rate_limit: [{ by: route, rate: 60/m, burst: 10 }]
"""
HOST = {"Host": "api.example.com"}


def slot_of(key):
    """The cluster specification's key -> slot: CRC16/XMODEM of the key (or of its hash
    tag: the first {...} with something inside) mod 16384."""
    k = key if isinstance(key, bytes) else key.encode()
    s = k.find(b"{")
    if s >= 0:
        e = k.find(b"}", s + 1)
        if e > s + 1:
            k = k[s + 1:e]
    return binascii.crc_hqx(k, 0) & 0x3FFF


def nonce_key(nonce):
    return f"quickway:n:partner:{nonce}"


def cache_key(path):
    return f"quickway:c:GET api.example.com{path}?"


class Cluster:
    """Cluster-mode redis-servers (six: three masters with a replica each) made into one
    cluster by redis-cli; with `tls` (a `CertAuthority.server_files()` tuple) they speak
    TLS only, to clients and on the cluster bus."""

    def __init__(self, count=6, replicas=1, tls=None):
        if shutil.which("redis-cli") is None:
            raise RuntimeError("redis-cli is not installed (Debian's redis-tools; .ci/run installs it)")
        self.nodes = []
        try:
            buses = []
            for _ in range(count):
                buses.append(free_port())
                self.nodes.append(RedisServer(tls=tls, extra_args=["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                                                                   "--cluster-port", str(buses[-1]), "--cluster-node-timeout", "5000"]
                                              + (["--tls-cluster", "yes"] if tls else [])))
            if tls:
                # redis-cli --cluster create did not finish against TLS-only nodes here
                # (nor did the nodes meet over a TLS bus): one node holds every slot.
                assert replicas == 0
                for i, n in enumerate(self.nodes):
                    first, last = i * 16384 // count, (i + 1) * 16384 // count - 1
                    assert n.command("CLUSTER", "ADDSLOTSRANGE", first, last) == "OK"
                    assert n.command("CLUSTER", "SET-CONFIG-EPOCH", i + 1) == "OK"
                for n, bus in zip(self.nodes[1:], buses[1:]):
                    assert self.nodes[0].command("CLUSTER", "MEET", "127.0.0.1", n.port, bus) == "OK"
            else:
                out = subprocess.run(["redis-cli", "--cluster", "create"] + [f"127.0.0.1:{n.port}" for n in self.nodes]
                                     + ["--cluster-replicas", str(replicas), "--cluster-yes"], capture_output=True, timeout=60)
                assert out.returncode == 0, out.stdout.decode() + out.stderr.decode()
            wait_until(lambda: all(b"cluster_state:ok" in n.command("CLUSTER", "INFO")
                                   and f"cluster_known_nodes:{count}".encode() in n.command("CLUSTER", "INFO")
                                   for n in self.nodes), timeout=30, what=f"cluster_state:ok on all {count} nodes")
            wait_until(lambda: len(self.masters()) == count // (replicas + 1), timeout=30, what="the masters")
        except BaseException:
            self.stop()
            raise

    def node(self, port):
        return next(n for n in self.nodes if n.port == port)

    def slots(self):
        """[(start, end, master port)] from CLUSTER SLOTS."""
        return [(r[0], r[1], r[2][1]) for r in self.nodes[0].command("CLUSTER", "SLOTS")]

    def masters(self):
        return sorted({p for _, _, p in self.slots()})

    def owner(self, slot):
        return next(p for s, e, p in self.slots() if s <= slot <= e)

    def exists_anywhere(self, key):
        """On how many masters `key` is (KEYS: a node answers for every key it holds,
        also in a slot being migrated, where EXISTS would redirect)."""
        k = key if isinstance(key, bytes) else key.encode()
        pattern = re.sub(rb"([*?\[\]\\])", rb"\\\1", k)
        return sum(1 for p in self.masters() if k in self.node(p).command("KEYS", pattern))

    def keys_anywhere(self, pattern):
        return [k for p in self.masters() for k in self.node(p).command("KEYS", pattern)]

    def stop(self):
        for n in self.nodes:
            n.stop()


@pytest.fixture(scope="module")
def cluster():
    c = Cluster()
    yield c
    c.stop()


@pytest.fixture(scope="module")
def backend():
    b = Backend("127.0.0.2", free_port("127.0.0.2"))
    yield b
    b.stop()


def make_gateway(cluster, backend):
    seeds = ", ".join(f'"127.0.0.1:{n.port}"' for n in cluster.nodes[:2])
    g = Gateway(CONFIG.replace("SEEDS", seeds).replace("BACKEND_PORT", str(backend.server.server_address[1])), workers=2)
    try:
        wait_until(lambda: g.stats()["redis"]["connected"], timeout=15, what="a slot map and a link to every master on every loop")
    except BaseException:
        print(g.logs()[-3000:])
        g.stop()
        raise
    return g


@pytest.fixture(scope="module")
def pair(cluster, backend):
    a = make_gateway(cluster, backend)
    try:
        b = make_gateway(cluster, backend)
    except BaseException:
        a.stop()
        raise
    yield a, b
    assert a.stop() == 0, a.logs()
    assert b.stop() == 0, b.logs()


def signed(target, nonce=None):
    return {"Authorization": qw1_client.authorization("partner", "partner-secret", "pepper", "GET", target, b"", nonce=nonce)}


def code(body):
    return json.loads(body)["error"]["code"]


def purge(g, body):
    req = urllib.request.Request(f"http://127.0.0.1:{g.admin_port}/cache/purge", data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(req, timeout=5) as r:
        return json.loads(r.read())


SUFFIXES = [b"%04x" % i for i in range(65536)]


def strings_in_slot(slot, n, head, tail=b""):
    """`n` random strings x of hex digits such that head + x + tail hashes to `slot`
    (no hash tags: every key's whole text is hashed). About 16384 CRCs for each."""
    out = []
    while len(out) < n:
        mid = secrets.token_hex(6).encode()
        c = binascii.crc_hqx(head + mid, 0)
        for s in SUFFIXES:
            if binascii.crc_hqx(tail, binascii.crc_hqx(s, c)) & 0x3FFF == slot:
                out.append((mid + s).decode())
    return out[:n]


def nonces_in_slot(slot, n):
    out = strings_in_slot(slot, n, nonce_key("").encode())
    assert all(slot_of(nonce_key(x)) == slot for x in out)
    return out


def paths_in_slot(slot, stem, n):
    out = [f"/cached/{stem}/{x}" for x in strings_in_slot(slot, n, cache_key(f"/cached/{stem}/").encode()[:-1], b"?")]
    assert all(slot_of(cache_key(p)) == slot for p in out)
    return out


def tag_in_slot(slot):
    i = 0
    while slot_of(f"t{i}") != slot:
        i += 1
    return f"t{i}"


def test_key_slots_agree_with_cluster_keyslot(cluster, pair):
    # This file's CRC16 against the real Redis (the unit tests' vectors too).
    keys = ["somekey", "foo{hash_tag}", "foo", "{user1000}.following", "{user1000}.followers", "foo{}{bar}",
            "foo{{bar}}zap", "foo{bar}{zap}", "quickway:{purge}:epoch", "quickway:{purge}:log",
            nonce_key("0123456789abcdef"), cache_key("/cached/x")]
    for k in keys:
        assert slot_of(k) == cluster.nodes[0].command("CLUSTER", "KEYSLOT", k), k
    assert cluster.nodes[0].command("CLUSTER", "KEYSLOT", "somekey") == 11058
    assert cluster.nodes[0].command("CLUSTER", "KEYSLOT", "foo{hash_tag}") == 2515
    # The gateway computes the same slots: once it has its maps, commands for keys on
    # every master go straight to the owner (no MOVED).
    a, b = pair
    before = a.stats()["redis"]["cluster"]["moved"]
    owners = set()
    for i in range(60):
        target = f"/signed/slots/{i}"
        h = signed(target)
        assert http_call(a, "GET", target, h)[0] == 200
        owners.add(cluster.owner(slot_of(nonce_key(h["Authorization"].split("Nonce=")[1].split(",")[0]))))
    assert len(owners) == 3, owners
    r = a.stats()["redis"]
    assert r["cluster"]["moved"] == before, r
    assert r["cluster"]["nodes"] == 3 and r["cluster"]["map_refreshes"] >= 3, r
    assert r["url"].startswith("redis://cluster(127.0.0.1:"), r
    # /ready: every loop has a map and a link up to every master (on_failure: fail_closed).
    with urllib.request.urlopen(f"http://127.0.0.1:{a.admin_port}/ready", timeout=5) as resp:
        assert resp.status == 200


def test_a_nonce_used_at_one_gateway_is_a_replay_at_the_other_on_every_node(cluster, pair, backend):
    a, b = pair
    owners = set()
    for i in range(30):
        target = f"/signed/order/{i}"
        h = signed(target)
        first, second = (a, b) if i % 2 == 0 else (b, a)
        st, _, body = http_call(first, "GET", target, h)
        assert st == 200, body
        hits = backend.hits
        st, _, body = http_call(second, "GET", target, h)
        assert st == 401 and code(body) == "auth_replayed", body
        assert backend.hits == hits
        key = nonce_key(h["Authorization"].split("Nonce=")[1].split(",")[0])
        owner = cluster.owner(slot_of(key))
        owners.add(owner)
        assert cluster.node(owner).command("EXISTS", key) == 1
        assert 590_000 < cluster.node(owner).command("PTTL", key) <= 600_000
    assert len(owners) == 3, "the nonces should land on every master"


def test_shared_cache_and_purges_across_nodes(cluster, pair, backend):
    a, b = pair
    paths = [f"/cached/p/{i}" for i in range(12)]
    assert len({cluster.owner(slot_of(cache_key(p))) for p in paths}) == 3
    for p in paths:
        assert http_call(a, "GET", p, HOST)[1]["x-cache"] == "MISS"
    wait_until(lambda: all(cluster.exists_anywhere(cache_key(p)) == 1 for p in paths), what="every entry stored on its node")
    for p in paths:
        st, h, _ = http_call(b, "GET", p, HOST)
        assert st == 200 and h["x-cache"] == "HIT", (p, h)
    assert all(backend.path_hits(p) == 1 for p in paths)
    # A purge by prefix at B deletes the keys on every master and reaches A's local tier.
    out = purge(b, {"prefix": "/cached/p/"})
    assert out["purged_redis"] == 12, out
    assert cluster.keys_anywhere("quickway:c:GET api.example.com/cached/p/*") == []
    wait_until(lambda: http_call(a, "GET", paths[0], HOST)[1]["x-cache"] == "MISS", timeout=5, what="A's local copy purged")
    # By key: the two scheme variants may be on two nodes.
    wait_until(lambda: cluster.exists_anywhere(cache_key(paths[0])) == 1, what="stored again")
    out = purge(a, {"key": f"GET api.example.com{paths[0]}?"})
    assert out["purged_redis"] == 1, out
    assert cluster.exists_anywhere(cache_key(paths[0])) == 0
    # The purge log keys share a slot, on one master.
    epoch_owner = cluster.owner(slot_of("quickway:{purge}:epoch"))
    assert int(cluster.node(epoch_owner).command("GET", "quickway:{purge}:epoch")) >= 2
    for g in pair:
        wait_until(lambda: g.stats()["redis"]["purges"]["local_tier_serving"] is True, what="local tiers serving")


def test_rate_limits_are_shared_through_the_cluster(cluster, pair):
    """`rate_limits.store: redis` (`LimitSync`'s INCRBY/PEXPIRE routed by key): a burst
    spent at A is charged at B after a sync, so B refuses what it alone would admit."""
    a, b = pair

    def count():
        keys = cluster.keys_anywhere("quickway:rl:limited:*")
        return sum(int(cluster.node(cluster.owner(slot_of(k))).command("GET", k)) for k in keys), keys

    # Each gateway sees the client once (a gateway charges what others admit only for
    # clients it has seen), and both counts reach the cluster.
    assert http_call(a, "GET", "/limited/0", HOST)[0] == 200
    assert http_call(b, "GET", "/limited/0", HOST)[0] == 200
    wait_until(lambda: count()[0] == 2, timeout=5, what="both gateways' calls counted in the cluster")
    admitted_a = sum(http_call(a, "GET", f"/limited/{i}", HOST)[0] == 200 for i in range(10))
    wait_until(lambda: count()[0] == 2 + admitted_a, timeout=5, what="A's calls counted")
    # B reads the count back in its next sync rounds (every 50 ms, an INCRBY and a
    # PEXPIRE each while it watches the client): wait for three of them.
    sent = b.stats()["redis"]["commands"]
    wait_until(lambda: b.stats()["redis"]["commands"] >= sent + 6, timeout=5, what="B's sync rounds")
    # Then the burst both spent leaves B at most the refill (60/m: one call a second).
    deadline = time.monotonic() + 2
    admitted_b = 0
    while time.monotonic() < deadline:
        if http_call(b, "GET", "/limited/b", HOST)[0] != 200:
            break
        admitted_b += 1
    assert admitted_a >= 8 and admitted_b <= 3, (admitted_a, admitted_b)
    assert len(count()[1]) == 1


def migrate_slot(cluster, slot, src, dst, on_batch=None, batch=10, pause=0.004, deadline_s=60):
    """Moves `slot` from master `src` to master `dst` with the commands the cluster
    specification describes (what `redis-cli --cluster reshard` does)."""
    s, d = cluster.node(src), cluster.node(dst)
    src_id, dst_id = s.command("CLUSTER", "MYID").decode(), d.command("CLUSTER", "MYID").decode()
    assert d.command("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id) == "OK"
    assert s.command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id) == "OK"
    n, deadline = 0, time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        keys = s.command("CLUSTER", "GETKEYSINSLOT", slot, batch)
        if not keys:
            break
        r = s.command("MIGRATE", "127.0.0.1", dst, "", 0, 5000, "KEYS", *keys)
        assert r == "OK", r
        n += 1
        if on_batch:
            on_batch(n)
        time.sleep(pause)
    else:
        raise AssertionError("migration did not finish in time")
    for node in [d, s] + [cluster.node(p) for p in cluster.masters() if p not in (src, dst)]:
        assert node.command("CLUSTER", "SETSLOT", slot, "NODE", dst_id) == "OK"
    return n


def test_a_slot_migrated_under_load_loses_nothing(cluster, pair, backend):
    a, b = pair
    src = cluster.masters()[0]
    dst = next(p for p in cluster.masters() if p != src)
    # A slot of src's that this test alone uses; fill it so the migration takes a while.
    slot = next(s for s in range(16384) if cluster.owner(s) == src and s % 97 == 5)
    tag = tag_in_slot(slot)
    fill = cluster.node(src)
    for i in range(0, 3000, 500):
        fill.command("MSET", *[x for j in range(i, i + 500) for x in (f"{{{tag}}}:fill:{j}", "x")])
    assert fill.command("CLUSTER", "COUNTKEYSINSLOT", slot) == 3000
    hot_nonces = nonces_in_slot(slot, 200)
    hot_paths = paths_in_slot(slot, "mig", 150)
    purged_paths = paths_in_slot(slot, "purge-mig", 4) + [f"/cached/purge-mig/x{i}" for i in range(4)]
    # Entries to purge in the middle of the migration, in both gateways' local tiers.
    for p in purged_paths:
        http_call(a, "GET", p, HOST)
    wait_until(lambda: all(cluster.exists_anywhere(cache_key(p)) == 1 for p in purged_paths), what="entries stored")
    for p in purged_paths:
        assert http_call(b, "GET", p, HOST)[1]["x-cache"] == "HIT"
    before = [g.stats()["redis"]["cluster"] for g in pair]

    res = {"calls": 0, "first_refused": [], "replay_accepted": [], "5xx": [], "stored": []}
    stop = threading.Event()

    def load():
        deadline = time.monotonic() + 40
        n = 0
        while not stop.is_set() and n < 3000 and time.monotonic() < deadline:
            n += 1
            # Every other nonce in the migrating slot, the rest anywhere.
            nonce = hot_nonces[(n // 2) % len(hot_nonces)] if n % 2 == 0 and n // 2 < len(hot_nonces) else secrets.token_hex(12)
            target = f"/signed/mig/{n}"
            h = signed(target, nonce=nonce)
            first, second = (a, b) if n % 2 == 0 else (b, a)
            st, _, body = http_call(first, "GET", target, h, timeout=5)
            res["calls"] += 1
            if st >= 500:
                res["5xx"].append((st, body[:200]))
            elif st != 200:
                res["first_refused"].append((target, st, body[:200]))
            st, _, body = http_call(second, "GET", target, h, timeout=5)
            res["calls"] += 1
            if st >= 500:
                res["5xx"].append((st, body[:200]))
            elif st == 200:
                res["replay_accepted"].append(target)
            if n <= len(hot_paths):
                p = hot_paths[n - 1]
                st, hd, _ = http_call(first, "GET", p, HOST, timeout=5)
                res["calls"] += 1
                if st >= 500:
                    res["5xx"].append((st, p))
                elif hd.get("x-cache") == "MISS":
                    res["stored"].append(p)
            stop.wait(0.002)

    t = threading.Thread(target=load)
    t.start()
    purge_out = {}
    try:
        wait_until(lambda: res["calls"] >= 100, timeout=20, what="load running")

        def midway(n):
            if n == 100:
                purge_out.update(purge(b, {"prefix": "/cached/purge-mig/"}))
                purge_out["left"] = cluster.keys_anywhere("quickway:c:GET api.example.com/cached/purge-mig/*")
        started = time.monotonic()
        batches = migrate_slot(cluster, slot, src, dst, on_batch=midway)
        took = time.monotonic() - started
        assert cluster.owner(slot) == dst
        calls_at_end = res["calls"]
        wait_until(lambda: res["calls"] >= calls_at_end + 200, timeout=20, what="load after the migration")
    finally:
        stop.set()
        t.join(60)
    after = [g.stats()["redis"]["cluster"] for g in pair]
    moved = sum(x["moved"] - y["moved"] for x, y in zip(after, before))
    ask = sum(x["ask"] - y["ask"] for x, y in zip(after, before))
    wait_until(lambda: all(cluster.node(dst).command("EXISTS", cache_key(p)) == 1 for p in res["stored"]), timeout=5,
               what="every cache store in Redis") if res["stored"] else None
    lost_stores = [p for p in res["stored"] if cluster.exists_anywhere(cache_key(p)) != 1]
    print(f"\ncluster migration: slot {slot} ({3000} filler keys, {batches} MIGRATE batches) in {took:.2f}s; "
          f"calls {res['calls']}, MOVED followed {moved}, ASK followed {ask}, 5xx {len(res['5xx'])}, "
          f"replays wrongly accepted {len(res['replay_accepted'])}, first uses refused {len(res['first_refused'])}, "
          f"cache stores {len(res['stored'])} (lost {len(lost_stores)}), purge {purge_out}")
    assert res["replay_accepted"] == [], res["replay_accepted"]
    assert res["first_refused"] == [], res["first_refused"]
    assert res["5xx"] == [], res["5xx"]
    assert lost_stores == []
    assert moved > 0 and ask > 0, (before, after)
    # The purge made mid-migration reached the keys on both sides of it.
    assert purge_out["purged_redis"] == len(purged_paths) and purge_out["left"] == [], purge_out
    for p in purged_paths:
        assert http_call(a, "GET", p, HOST)[1]["x-cache"] == "MISS", p
    for g in pair:
        r = g.stats()["redis"]
        assert r["cluster"]["redirects_exhausted"] == 0 and r["connected"], r


def test_rediss_reaches_every_node_over_tls(backend):
    """`url: rediss://` with `ca_file`: the node links speak TLS and verify the node's
    certificate (its IP address) against the CA. A one-node cluster (every slot on it),
    TLS only (no plain port): nodes meeting over a TLS cluster bus did not work here."""
    ca = CertAuthority()
    c = Cluster(count=1, replicas=0, tls=ca.server_files(["IP:127.0.0.1"]))
    gateways = []
    try:
        text = (CONFIG.replace("SEEDS", f'"127.0.0.1:{c.nodes[0].port}"').replace("BACKEND_PORT", str(backend.server.server_address[1]))
                .replace("  timeout: 250ms\n", f'  url: "rediss://"\n  ca_file: {ca.cert}\n  timeout: 250ms\n'))
        for _ in range(2):
            g = Gateway(text, workers=2)
            gateways.append(g)
            wait_until(lambda: g.stats()["redis"]["connected"], timeout=15, what="TLS links to every master")
        a, b = gateways
        for i in range(20):
            target = f"/signed/tls/{i}"
            h = signed(target)
            assert http_call(a, "GET", target, h)[0] == 200
            st, _, body = http_call(b, "GET", target, h)
            assert st == 401 and code(body) == "auth_replayed", body
        r = a.stats()["redis"]
        assert r["tls"] is True and r["tls_failures"] == 0 and r["cluster"]["nodes"] == 1, r
        assert r["url"].startswith("rediss://cluster("), r
    finally:
        for g in gateways:
            g.stop()
        c.stop()


def test_the_purge_log_slot_migrated_while_purging(cluster, pair):
    """The purge log's keys (`{purge}`: one slot, one script with both keys) moved to
    another master while purges are made at A: every purge is recorded and published
    (the scripts follow ASK, or TRYAGAIN while the two keys are split), and B applies
    each one (its epoch reaches the cluster's)."""
    a, b = pair
    slot = slot_of("quickway:{purge}:epoch")
    src = cluster.owner(slot)
    dst = next(p for p in cluster.masters() if p != src)
    fill = cluster.node(src)
    fill.command("MSET", *[x for j in range(1000) for x in (f"fill:{{purge}}:{j}", "x")])
    before = a.stats()["redis"]["cluster"]
    res = {"ok": 0, "failed": []}
    stop = threading.Event()

    def purges():
        deadline = time.monotonic() + 30
        i = 0
        while not stop.is_set() and i < 500 and time.monotonic() < deadline:
            i += 1
            try:
                out = purge(a, {"prefix": f"/cached/pl/{i}/"})
                if out.get("published") is True:
                    res["ok"] += 1
                else:
                    res["failed"].append(out)
            except urllib.error.HTTPError as e:
                res["failed"].append((e.code, e.read()[:200]))
            stop.wait(0.005)

    t = threading.Thread(target=purges)
    t.start()
    try:
        wait_until(lambda: res["ok"] >= 5, timeout=10, what="purges running")
        migrate_slot(cluster, slot, src, dst, batch=5)
        done_at = res["ok"]
        wait_until(lambda: res["ok"] >= done_at + 5, timeout=10, what="purges after the migration")
    finally:
        stop.set()
        t.join(30)
    epoch = int(cluster.node(dst).command("GET", "quickway:{purge}:epoch"))
    wait_until(lambda: b.stats()["redis"]["purges"]["epoch"] == epoch, timeout=5, what="B applied every purge")
    after = a.stats()["redis"]["cluster"]
    moved, ask, retries = (after[k] - before[k] for k in ("moved", "ask", "retries"))
    print(f"\npurge-log slot migration: {res['ok']} purges recorded, {len(res['failed'])} failed, epoch {epoch}; "
          f"A followed MOVED {moved}, ASK {ask}, retried {retries}, map refreshes {after['map_refreshes'] - before['map_refreshes']}")
    # A learns of the move either from a redirect or from a map refresh: every purge
    # fans out to all masters and asks for a fresh map, so the log's script may reach
    # the new owner without ever being told MOVED. Either way it must have followed.
    refreshed = after["map_refreshes"] - before["map_refreshes"]
    assert moved + ask + retries + refreshed > 0, (before, after)
    assert res["failed"] == [], res["failed"]
    for g in pair:
        assert g.stats()["redis"]["purges"]["local_tier_serving"] is True
