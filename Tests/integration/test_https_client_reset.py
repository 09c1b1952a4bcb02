"""Request integrity (issue "Request integrity"): a client that resets its connection
while an https answer streams to it.

For `scheme: https` libcurl carries the call, and the client's answer is written from
inside libcurl's header and write callbacks. A write that fails there (the client sent a
reset) cancels the upstream call from inside the callback, where libcurl refuses
`curl_multi_remove_handle`; the gateway must not free the transfer or pool its easy
handle while libcurl still uses them. Run against an AddressSanitizer build
(`swift build -c debug -Xswiftc -sanitize=address`, QUICKWAY_BIN pointing at it) the
test also fails on any ASan report the gateway writes."""
import glob
import hashlib
import json
import os
import socket
import ssl
import struct
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from harness import Backend, Gateway, free_port, http_call
from test_routing import make_ca_and_cert

CONFIG = """
listen: 127.0.0.1:{PORT}
workers: 1
admin: { listen: 127.0.0.1:{ADMIN} }
cache: { max_object_bytes: 64KiB }
services:
  secure:
    host: secure.internal
    scheme: https
    port: TLS_PORT
    ips: [127.0.0.2]
    tls: { verify: true, ca_file: CA_FILE }
    timeouts: { connect: 2s, response: 20s }
    retries: 0
routes:
  - { name: secure, match: { path_prefix: /s/ }, service: secure, strip_prefix: true, coalesce: false }
"""

BIG = 4_000_000


def big_body(n):
    return (hashlib.sha256(b"seed").hexdigest().encode() * (n // 64 + 1))[:n]


def reset_while_streaming(port, path, read_first, rounds):
    """Sends a GET, reads `read_first` bytes of the answer (or whatever came first),
    then closes with SO_LINGER 0, so the gateway's next write on it fails (RST)."""
    for _ in range(rounds):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
        except OSError:
            return  # the gateway is gone; the test reports why
        try:
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            got = 0
            while got < read_first:
                b = s.recv(65536)
                if not b:
                    break
                got += len(b)
        except OSError:
            pass
        finally:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()


@pytest.fixture()
def tls_gateway(tmp_path):
    pytest.importorskip("cryptography")
    paths = make_ca_and_cert(str(tmp_path), "secure.internal")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(paths["cert.pem"], paths["key.pem"])
    tls_port = free_port("127.0.0.2")
    b = Backend("127.0.0.2", tls_port, ssl_context=ctx)
    asan_dir = tmp_path / "asan"
    asan_dir.mkdir()
    # Harmless for a build without sanitizers; an ASan build writes its reports there
    # (options already in ASAN_OPTIONS, e.g. detect_leaks=1, come after, so they win).
    asan = os.environ.get("ASAN_OPTIONS", "")
    env = {"ASAN_OPTIONS": f"detect_leaks=0:halt_on_error=1:log_path={asan_dir}/asan" + (":" + asan if asan else "")}
    g = Gateway(CONFIG.replace("TLS_PORT", str(tls_port)).replace("CA_FILE", paths["ca.pem"]), env=env)
    yield g, b, asan_dir
    g.stop()
    b.stop()


def asan_reports(asan_dir):
    return "".join(open(p, errors="replace").read() for p in glob.glob(str(asan_dir / "asan*")))


def test_https_client_reset_mid_body_keeps_gateway_whole(tls_gateway):
    g, b, asan_dir = tls_gateway
    # Warm up: a whole streamed answer arrives intact.
    st, _, body = http_call(g, "GET", f"/s/big/{BIG}", timeout=30)
    assert st == 200 and body == big_body(BIG)

    # Resets at different moments: right after the head, a little way into the body, and
    # deeper; several clients at once so the worker is inside libcurl when the resets land.
    clients = []
    for i, read_first in enumerate([1, 20_000, 300_000, 1_000_000]):
        t = threading.Thread(target=reset_while_streaming, args=(g.port, f"/s/big/{BIG}?c={i}", read_first, 40))
        t.start()
        clients.append(t)
    for t in clients:
        t.join(120)
    assert not any(t.is_alive() for t in clients), "a resetting client hung"

    assert g.proc.poll() is None, "gateway died:\n" + g.logs() + asan_reports(asan_dir)
    assert asan_reports(asan_dir) == ""
    # Still serving, and every answer is the caller's own (no pooled handle still bound to
    # an earlier, cancelled transfer).
    for i in range(20):
        st, _, body = http_call(g, "GET", f"/s/echo/{i}?n={i}", timeout=15)
        assert st == 200, body
        assert json.loads(body)["path"] == f"/echo/{i}?n={i}", body
    st, _, body = http_call(g, "GET", f"/s/big/{BIG}", timeout=30)
    assert st == 200 and body == big_body(BIG)
    # Every request the resetting clients made has been counted as finished.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and g.proc.poll() is None and g.stats()["requests"]["in_flight"] != 0:
        time.sleep(0.1)
    assert g.proc.poll() is None, "gateway died:\n" + g.logs() + asan_reports(asan_dir)
    assert g.stats()["requests"]["in_flight"] == 0
    # Every easy handle pooled during the resets must be free for a new transfer. Calls
    # one after another reuse the same pooled handle; calls at once take many. Before the
    # fix, a handle cancelled inside a curl callback was pooled while still on the multi
    # handle (its removal refused): a call given it was never started, or answered from
    # the cancelled transfer.
    with ThreadPoolExecutor(32) as pool:
        answers = list(pool.map(lambda i: http_call(g, "GET", f"/s/echo/p{i}?n={i}", timeout=15), range(64)))
    for i, (st, _, body) in enumerate(answers):
        assert st == 200 and json.loads(body)["path"] == f"/echo/p{i}?n={i}", (i, st, body)
    assert g.stats()["requests"]["in_flight"] == 0
    assert g.stop() == 0, g.logs() + asan_reports(asan_dir)
    assert asan_reports(asan_dir) == ""
