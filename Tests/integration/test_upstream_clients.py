"""The two upstream clients (issue 13, "Upstream"): our own HTTP/1.1 client for
`scheme: http` and libcurl's HTTP layer for `scheme: https` frame the one request model
each their own way, and a backend must see the same request from both."""
import ssl

import pytest

from harness import Backend, Gateway, free_port, http_call
from test_routing import make_ca_and_cert

CONFIG = """
listen: 127.0.0.1:{PORT}
workers: 1
admin: { listen: 127.0.0.1:{ADMIN} }
services:
  plain: { host: api.internal, port: PLAIN_PORT, ips: [127.0.0.2] }
  secure:
    host: api.internal
    scheme: https
    port: TLS_PORT
    ips: [127.0.0.2]
    tls: { verify: true, ca_file: CA_FILE }
routes:
  - { name: plain, match: { path_prefix: /plain/ }, service: plain, strip_prefix: true, coalesce: false }
  - { name: secure, match: { path_prefix: /secure/ }, service: secure, strip_prefix: true, coalesce: false }
"""


def test_both_clients_send_the_same_headers_and_body(tmp_path):
    pytest.importorskip("cryptography")
    paths = make_ca_and_cert(str(tmp_path), "api.internal")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(paths["cert.pem"], paths["key.pem"])
    plain_port, tls_port = free_port("127.0.0.2"), free_port("127.0.0.2")
    plain, secure = Backend("127.0.0.2", plain_port), Backend("127.0.0.2", tls_port, ssl_context=ctx)
    g = Gateway(CONFIG.replace("PLAIN_PORT", str(plain_port)).replace("TLS_PORT", str(tls_port))
                .replace("CA_FILE", paths["ca.pem"]))
    try:
        # An empty value (RFC 9110 5.5 allows it), a body without Content-Type, and the
        # headers libcurl would otherwise add or replace on its own (Expect, Content-Type).
        headers = {"Accept": "application/json", "X-Empty": "", "X-App": "7", "X-Request-Id": "same-id-1"}
        for prefix in ("/plain", "/secure"):
            st, _, _ = http_call(g, "POST", prefix + "/orders?id=7", headers=headers, body=b"hello")
            assert st == 200, prefix
        a, b = plain.requests[-1], secure.requests[-1]
        assert (a["method"], a["path"], a["body"]) == (b["method"], b["path"], b["body"]) == ("POST", "/orders?id=7", b"hello")

        def fields(r):
            return [(k.lower(), v) for k, v in r["headers"].items() if k.lower() != "host"]  # the port differs
        assert fields(a) == fields(b)
        assert ("x-empty", "") in fields(a), fields(a)
        assert not any(k in ("expect", "content-type") for k, _ in fields(a)), fields(a)
        assert dict(fields(a))["content-length"] == "5"
    finally:
        assert g.stop() == 0
        plain.stop()
        secure.stop()
