"""`services.<name>.keepalive` and memory given back after a burst (issue 37).

The backend is the harness's threaded HTTP server on 127.0.0.x; what it holds is read from
the kernel's own table (/proc/net/tcp: established sockets whose local end is the
backend's address), so the count does not depend on the gateway's own accounting.
"""
import http.client
import socket
import threading
import time

from harness import Backend, Gateway, free_port, wait_until

CONFIG = """
listen: 127.0.0.1:{PORT}
workers: {WORKERS}
admin: { listen: 127.0.0.1:{ADMIN} }
services:
  b: { host: b.internal, port: BPORT, ips: [BHOST], KEEPALIVE retries: 0, timeouts: { response: 10s } }
routes:
  - { name: all, match: { path_prefix: / }, service: b }
"""


def backend_connections(host, port):
    """(local, remote) of each established TCP connection whose local end is host:port."""
    want = "%08X:%04X" % (int.from_bytes(socket.inet_aton(host), "little"), port)
    found = set()
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            parts = line.split()
            if parts[1] == want and parts[3] == "01":
                found.add((parts[1], parts[2]))
    return found


def concurrent_gets(port, n, path):
    """n GETs at once, each on its own client connection; their statuses."""
    statuses = [None] * n
    barrier = threading.Barrier(n)

    def one(i):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
        try:
            c.connect()
            barrier.wait(10)
            c.request("GET", path)
            r = c.getresponse()
            r.read()
            statuses[i] = r.status
        finally:
            c.close()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return statuses


def start(keepalive, workers):
    host = "127.0.0.6"
    bport = free_port(host)
    backend = Backend(host, bport)
    line = f"keepalive: {keepalive}," if keepalive is not None else ""
    text = CONFIG.replace("BPORT", str(bport)).replace("BHOST", host).replace("KEEPALIVE", line)
    return host, bport, backend, Gateway(text, workers=workers)


def test_a_burst_leaves_at_most_keepalive_idle_connections_per_worker_and_one_is_reused():
    host, bport, backend, g = start(keepalive=2, workers=2)
    peak = [0]
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            peak[0] = max(peak[0], len(backend_connections(host, bport)))
            time.sleep(0.01)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        # 16 calls that each hold their upstream connection for 400 ms: both workers
        # (16 client connections spread by SO_REUSEPORT) open one upstream connection per call.
        statuses = concurrent_gets(g.port, 16, "/delay/400")
        stop.set()
        watcher.join(5)
        assert statuses == [200] * 16
        assert peak[0] >= 8, f"the burst should have opened more connections than the pools keep (saw {peak[0]})"
        # As the calls end, each worker keeps 2 and closes the rest at once.
        wait_until(lambda: len(backend_connections(host, bport)) <= 2 * 2, timeout=10,
                   what="at most keepalive (2) idle connections per worker (2) at the backend")
        kept = backend_connections(host, bport)
        assert len(kept) >= 1
        stats = g.stats()
        assert stats["upstream_pool"]["closed_over_keepalive"] >= peak[0] - 4
        # Later calls on one client connection (one worker, which took part in the burst)
        # go on a kept connection: the backend sees no new one.
        c = http.client.HTTPConnection("127.0.0.1", g.port, timeout=10)
        try:
            for _ in range(3):
                c.request("GET", "/again")
                r = c.getresponse()
                r.read()
                assert r.status == 200
        finally:
            c.close()
        assert backend_connections(host, bport) <= kept, "a later call opened a new upstream connection"
        assert backend.path_hits("/again") == 3
    finally:
        stop.set()
        g.stop()
        backend.stop()


def test_keepalive_zero_keeps_no_idle_connection():
    host, bport, backend, g = start(keepalive=0, workers=1)
    try:
        statuses = concurrent_gets(g.port, 4, "/delay/100")
        assert statuses == [200] * 4
        wait_until(lambda: not backend_connections(host, bport), timeout=10, what="no idle upstream connection left")
    finally:
        g.stop()
        backend.stop()


def test_memory_is_trimmed_once_a_burst_is_over():
    host, bport, backend, g = start(keepalive=None, workers=1)
    try:
        # The start-up's own trim (its first quiet second) first, so the next one is the burst's.
        wait_until(lambda: g.stats()["memory"]["trims"] >= 1, timeout=10, what="the start-up trim")
        before = g.stats()["memory"]
        assert before["resident_bytes"] > 0
        statuses = concurrent_gets(g.port, 32, "/delay/100")
        assert statuses == [200] * 32
        # A quiet second after the burst: the admin loop gives freed memory back.
        wait_until(lambda: g.stats()["memory"]["trims"] > before["trims"], timeout=10, what="a malloc_trim after the burst")
        after = g.stats()["memory"]
        assert after["trim_micros_total"] >= after["last_trim_micros"] >= 0
    finally:
        g.stop()
        backend.stop()


def test_https_keepalive_zero_reuses_no_connection(tmp_path):
    """For `scheme: https`, `keepalive: 0` keeps no connection (curl's `FORBID_REUSE`): each
    call opens its own, and none stays open after it. Other values leave libcurl's cache
    alone: it counts busy connections too, so sized to keepalive it closed each call's
    connection as the call ended (a review's finding: the test this one replaces passed
    either way)."""
    import pytest
    import ssl
    pytest.importorskip("cryptography")
    from test_routing import make_ca_and_cert
    paths = make_ca_and_cert(str(tmp_path), "b.internal")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(paths["cert.pem"], paths["key.pem"])
    host = "127.0.0.6"
    bport = free_port(host)
    backend = Backend(host, bport, ssl_context=ctx)
    text = CONFIG.replace("BPORT", str(bport)).replace("BHOST", host).replace(
        "KEEPALIVE", f"keepalive: 0, scheme: https, tls: {{ ca_file: {paths['ca.pem']} }},")
    g = Gateway(text, workers=1)
    try:
        for _ in range(3):
            assert concurrent_gets(g.port, 1, "/delay/10") == [200]
            wait_until(lambda: len(backend_connections(host, bport)) == 0, timeout=10,
                       what="no https connection kept with keepalive 0")
    finally:
        g.stop()
        backend.stop()
