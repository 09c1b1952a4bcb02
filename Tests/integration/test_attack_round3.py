"""Attack round 3 (issue 29): each test is one finding of the review, against the real
binary and real backends; each failed before its fix."""
import json
import os
import sys
import time

import pytest

from harness import ROOT, Backend, Gateway, free_port, http_call

sys.path.insert(0, os.path.join(ROOT, "examples"))
import qw1_client  # noqa: E402


@pytest.fixture(scope="module")
def backend():
    b = Backend("127.0.0.2", free_port("127.0.0.2"))
    yield b
    b.stop()


NONCE_CONFIG = """
listen: 127.0.0.1:{PORT}
workers: 2
admin: { listen: 127.0.0.1:{ADMIN} }
auth:
  salt: pepper
  nonce_capacity: 1000
  keys:
    - { id: leaked, secret: s-leaked }
    - { id: honest, secret: s-honest }
services:
  api: { host: api.internal, port: BACKEND_PORT, ips: [127.0.0.2] }
routes:
  - { name: signed, match: { path_prefix: /s/ }, service: api }
"""


def test_one_key_cannot_fill_the_nonce_store_for_the_others(backend):
    # Item 8: nonce_capacity 1000 and 1,200 signed calls from one key made 19 of 20 calls
    # from another key fail with 503. Now the flooding key alone gets 429.
    g = Gateway(NONCE_CONFIG.replace("BACKEND_PORT", str(backend.server.server_address[1])), workers=2)
    try:
        import http.client
        conn = http.client.HTTPConnection("127.0.0.1", g.port, timeout=10)
        statuses = {}
        limited = None
        for i in range(1200):
            target = f"/s/flood/{i}"
            conn.request("GET", target, headers={"Authorization": qw1_client.authorization("leaked", "s-leaked", "pepper", "GET", target)})
            r = conn.getresponse()
            body = r.read()
            statuses[r.status] = statuses.get(r.status, 0) + 1
            if r.status == 429 and limited is None:
                limited = (json.loads(body)["error"]["code"], r.getheader("Retry-After"))
        conn.close()
        assert statuses.get(200, 0) == 500 and statuses.get(429, 0) == 700, statuses
        assert limited[0] == "rate_limited" and int(limited[1]) > 0, limited
        honest = [http_call(g, "GET", f"/s/ok/{i}", {"Authorization": qw1_client.authorization("honest", "s-honest", "pepper", "GET", f"/s/ok/{i}")})[0]
                  for i in range(20)]
        assert honest == [200] * 20, honest
    finally:
        assert g.stop() == 0, g.logs()
