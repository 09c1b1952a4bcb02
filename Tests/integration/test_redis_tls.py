"""Integration tests of `rediss://` (issue 36): the shared tier over TLS.

A real redis-server (Debian's, built with TLS) listens on `tls-port` only, with a
server certificate from a CA made here with the openssl command line. Two gateways
that trust that CA share nonces through it; a gateway given another CA, or a URL whose
address the certificate does not carry, refuses the server: the link stays down, the
failure is counted and logged with the certificate error, and the gateway behaves as
it does when Redis is down (on_failure). Signed calls come from examples/qw1_client.py.
"""
import hashlib
import json
import os
import sys

import pytest

from harness import ROOT, Backend, CertAuthority, Gateway, RedisServer, free_port, http_call, wait_until

sys.path.insert(0, os.path.join(ROOT, "examples"))
import qw1_client  # noqa: E402

SECRET = "partner-secret"

CONFIG = """
listen: 127.0.0.1:{PORT}
workers: 2
admin: { listen: 127.0.0.1:{ADMIN} }
auth:
  salt: pepper
  keys:
    - { id: partner, secret: partner-secret }
redis:
  url: rediss://REDIS_HOST:REDIS_PORT/2
  ca_file: CA_FILE
  timeout: 200ms
  on_failure: fail_closed
  max_entry_bytes: 4MiB
cache: { max_object_bytes: 4MiB }
services:
  api: { host: api.internal, port: BACKEND_PORT, ips: [127.0.0.2] }
routes:
  - name: signed
    match: { path_prefix: /signed/ }
    service: api
  - name: open
    match: { path_prefix: /open/ }
    service: api
    auth: off
  - name: big
    match: { path_prefix: /big/ }
    service: api
    auth: off
    cache: { ttl: 60s }
"""


def gateway(redis, backend, ca_file, host="127.0.0.1", wait_connected=True):
    text = (CONFIG.replace("REDIS_HOST", host).replace("REDIS_PORT", str(redis.port)).replace("CA_FILE", ca_file)
            .replace("BACKEND_PORT", str(backend.server.server_address[1])))
    g = Gateway(text, workers=2)
    if wait_connected:
        try:
            wait_until(lambda: g.stats()["redis"]["connected"], timeout=10, what="redis links up over TLS")
        except BaseException:
            g.stop()
            raise
    return g


def signed(method, target):
    return {"Authorization": qw1_client.authorization("partner", SECRET, "pepper", method, target, b"")}


@pytest.fixture(scope="module")
def backend():
    b = Backend("127.0.0.2", free_port("127.0.0.2"))
    yield b
    b.stop()


@pytest.fixture(scope="module")
def ca():
    return CertAuthority()


@pytest.fixture(scope="module")
def redis(ca):
    r = RedisServer(tls=ca.server_files(["IP:127.0.0.1", "DNS:localhost"]))
    yield r
    r.stop()


def test_two_gateways_share_nonces_over_tls(redis, backend, ca):
    a = gateway(redis, backend, ca.cert)
    try:
        b = gateway(redis, backend, ca.cert)
        try:
            h = signed("GET", "/signed/tls/1")
            st, _, body = http_call(a, "GET", "/signed/tls/1", h)
            assert st == 200, body
            st, _, body = http_call(b, "GET", "/signed/tls/1", h)
            assert st == 401 and json.loads(body)["error"]["code"] == "auth_replayed", body
            # The claim is in Redis, read back over TLS by the harness's own client.
            nonce = h["Authorization"].split("Nonce=")[1].split(",")[0]
            assert redis.command("EXISTS", f"quickway:n:partner:{nonce}", db=2) == 1
            s = b.stats()["redis"]
            assert s["tls"] is True and s["url"].startswith("rediss://") and s["tls_failures"] == 0, s
            assert s["nonces"]["replayed"] == 1
        finally:
            assert b.stop() == 0, b.logs()
    finally:
        assert a.stop() == 0, a.logs()


def test_redis_over_tls_also_by_name(redis, backend, ca):
    # The certificate carries DNS:localhost: SNI and the name check use the URL's host.
    g = gateway(redis, backend, ca.cert, host="localhost")
    try:
        h = signed("GET", "/signed/tls/name")
        assert http_call(g, "GET", "/signed/tls/name", h)[0] == 200
        assert http_call(g, "GET", "/signed/tls/name", h)[0] == 401
    finally:
        assert g.stop() == 0, g.logs()


def refused_like_an_outage(g, backend, why):
    """The links stay down with `why` counted and logged; signed calls get 503
    redis_unavailable (fail_closed), unsigned routes keep working."""
    wait_until(lambda: g.stats()["redis"]["tls_failures"] >= 2, timeout=10, what="TLS failures counted")
    s = g.stats()["redis"]
    assert s["connected"] is False and s["links_up"] == 0, s
    assert s["connects"] == 0, "a link connected to a server it should have refused"
    assert s["connect_failures"] >= s["tls_failures"], s
    assert why in s["last_error"], s
    assert why in g.logs()
    st, _, body = http_call(g, "GET", "/signed/refused/1", signed("GET", "/signed/refused/1"))
    assert st == 503 and json.loads(body)["error"]["code"] == "redis_unavailable", body
    hits = backend.path_hits("/open/still-served")
    assert http_call(g, "GET", "/open/still-served")[0] == 200
    assert backend.path_hits("/open/still-served") == hits + 1


def test_a_server_certificate_from_another_ca_is_refused(redis, backend):
    other = CertAuthority("Some other CA")
    g = gateway(redis, backend, other.cert, wait_connected=False)
    try:
        refused_like_an_outage(g, backend, "certificate verify failed")
    finally:
        assert g.stop() == 0, g.logs()


def test_a_certificate_for_another_address_is_refused(ca, backend):
    # Signed by the trusted CA, but for 127.0.0.9: a man in the middle with any
    # certificate of that CA is refused too.
    r = RedisServer(tls=ca.server_files(["IP:127.0.0.9"]))
    try:
        g = gateway(r, backend, ca.cert, wait_connected=False)
        try:
            refused_like_an_outage(g, backend, "IP address mismatch")
        finally:
            assert g.stop() == 0, g.logs()
    finally:
        r.stop()


def test_plain_redis_url_does_not_speak_tls_and_ca_file_needs_rediss(redis, backend, ca, tmp_path):
    # rediss:// is required for TLS; redis:// to the TLS port fails (no silent downgrade).
    text = (CONFIG.replace("rediss://REDIS_HOST", "redis://127.0.0.1").replace("REDIS_PORT", str(redis.port))
            .replace("  ca_file: CA_FILE\n", "").replace("BACKEND_PORT", str(backend.server.server_address[1])))
    g = Gateway(text, workers=1)
    try:
        wait_until(lambda: g.stats()["redis"]["connect_failures"] + g.stats()["redis"]["disconnects"] >= 1 or
                   g.stats()["redis"]["timeouts"] >= 1, timeout=10, what="the plain link failing")
        st, _, body = http_call(g, "GET", "/signed/plain/1", signed("GET", "/signed/plain/1"))
        assert st == 503, body
    finally:
        assert g.stop() == 0, g.logs()
    # ca_file with redis:// is a config error naming the key.
    import subprocess
    from harness import quickway_binary
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace("  timeout: 200ms", f"  ca_file: {ca.cert}\n  timeout: 200ms")
                   .replace("{PORT}", str(free_port())).replace("{ADMIN}", str(free_port())))
    out = subprocess.run([quickway_binary(), "check", "--config", str(bad)], capture_output=True, text=True, timeout=30)
    assert out.returncode != 0 and "redis.ca_file" in out.stdout + out.stderr and "rediss://" in out.stdout + out.stderr
    # A CA file that holds no certificate is a config error too.
    empty = tmp_path / "empty.pem"
    empty.write_text("not a certificate\n")
    bad.write_text(bad.read_text().replace("redis://", "rediss://").replace(ca.cert, str(empty)))
    out = subprocess.run([quickway_binary(), "check", "--config", str(bad)], capture_output=True, text=True, timeout=30)
    assert out.returncode != 0 and "redis.ca_file" in out.stdout + out.stderr, out


def test_a_large_entry_from_the_shared_tier_over_tls_arrives_whole(redis, backend, ca):
    """1.5 MB from Redis's tier: about 92 TLS records of 16 KiB, more than one read event
    takes (64); the rest must come on the next event, byte for byte the backend's."""
    host = {"Host": "api.example.com"}
    path, n = "/big/1500000", 1500000
    expected = (hashlib.sha256(b"seed").hexdigest().encode() * (n // 64 + 1))[:n]
    a = gateway(redis, backend, ca.cert)
    b = None
    try:
        b = gateway(redis, backend, ca.cert)
        st, h, body = http_call(a, "GET", path, host)
        assert st == 200 and body == expected
        # Stores reach Redis just after the answer.
        wait_until(lambda: redis.command("EXISTS", f"quickway:c:GET api.example.com{path}?", db=2) == 1,
                   what="the entry stored in Redis")
        hits = b.stats()["redis"]["cache"]["hits"]
        st, h, body = http_call(b, "GET", path, host)
        assert st == 200 and h["x-cache"] == "HIT" and len(body) == n and body == expected
        assert b.stats()["redis"]["cache"]["hits"] == hits + 1
        assert backend.path_hits(path) == 1
    finally:
        codes = [g.stop() for g in (a, b) if g]
        assert codes == [0] * len(codes)
