"""Mutual TLS (issue 35; spec/config.md "Added for the next round":
`tls_listen.client_certificates {ca_file, required}` and route `auth: mtls`): the real
binary, Python's ssl as the client, certificates made here by `cryptography`.

Expectations from the spec and RFC 8446 4.3.2 / 4.4.2: with `required: true` a client
without a certificate gets no connection; otherwise routes with `auth: mtls` answer 401;
a certificate from another CA never completes the handshake; the subject, SANs and
SHA-256 fingerprint (computed here from the DER) go upstream in headers a client cannot
set, and the fingerprint is the identity rate limits `by: key` count."""
import datetime
import hashlib
import ipaddress
import json
import os
import signal
import socket
import ssl
import tempfile

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from harness import Backend, Gateway, free_port, read_response, wait_until
from test_tls_listener import CertAuthority


def client_leaf(ca, stem, common_name):
    """A client certificate signed by `ca`: CN and O, SANs of three kinds. Returns
    (cert path, key path, SHA-256 of its DER)."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Example Partners"),
                         x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca.name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(ca.now - datetime.timedelta(minutes=5)).not_valid_after(ca.now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(f"{common_name}.example"),
                                                        x509.RFC822Name(f"ops@{common_name}.example"),
                                                        x509.IPAddress(ipaddress.ip_address("10.1.2.3"))]), critical=False)
            .sign(ca.key, hashes.SHA256()))
    cert_path, key_path = os.path.join(ca.dir, stem + ".pem"), os.path.join(ca.dir, stem + ".key")
    with open(cert_path, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(key_path, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return cert_path, key_path, hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).hexdigest()


CONFIG = """
listen: 127.0.0.1:{PORT}
workers: 1
admin: { listen: 127.0.0.1:{ADMIN} }
tls_listen:
  listen: 127.0.0.1:TLS_PORT
  certificates:
    - { cert_file: SERVER_CERT, key_file: SERVER_KEY }
  alpn: [http/1.1]
  client_certificates: { ca_file: CLIENT_CA, required: REQUIRED }
services:
  api: { host: api.internal, port: BACKEND_PORT, ips: [127.0.0.2] }
routes:
  - name: partners
    match: { path_prefix: /partners/ }
    service: api
    auth: mtls
    rate_limit:
      - { by: key, rate: 1/m, burst: 1 }
  - name: open
    match: { path_prefix: / }
    service: api
"""


@pytest.fixture(scope="module")
def pki():
    d = tempfile.mkdtemp(prefix="qw-mtls-")
    server_ca = CertAuthority(d)
    server_cert, server_key, _ = server_ca.leaf("server", "api.test")
    client_dir = os.path.join(d, "clients")
    os.makedirs(client_dir)
    client_ca = CertAuthority(client_dir)
    stranger_dir = os.path.join(d, "stranger")
    os.makedirs(stranger_dir)
    stranger_ca = CertAuthority(stranger_dir)
    return {
        "server_ca": server_ca, "server_cert": server_cert, "server_key": server_key, "client_ca": client_ca,
        "a": client_leaf(client_ca, "partner-a", "partner-a"),
        "b": client_leaf(client_ca, "partner-b", "partner-b"),
        "stranger": client_leaf(stranger_ca, "stranger", "stranger"),
    }


def start(pki, required):
    backend = Backend("127.0.0.2", free_port("127.0.0.2"))
    tls_port = free_port()
    text = (CONFIG.replace("TLS_PORT", str(tls_port)).replace("SERVER_CERT", pki["server_cert"])
            .replace("SERVER_KEY", pki["server_key"]).replace("CLIENT_CA", pki["client_ca"].ca_file)
            .replace("REQUIRED", "true" if required else "false")
            .replace("BACKEND_PORT", str(backend.server.server_address[1])))
    g = Gateway(text)
    g.tls_port = tls_port
    return g, backend


@pytest.fixture(scope="module")
def optional(pki):
    g, backend = start(pki, required=False)
    yield g, backend
    g.stop()
    backend.stop()


def get(g, pki, path, client=None, headers=None):
    """One GET over a new TLS connection (SNI api.test), with `client`'s certificate if given."""
    ctx = ssl.create_default_context(cafile=pki["server_ca"].ca_file)
    ctx.set_alpn_protocols(["http/1.1"])
    if client:
        cert, key, _ = pki[client]
        ctx.load_cert_chain(cert, key)
    raw = socket.create_connection(("127.0.0.1", g.tls_port), timeout=5)
    with ctx.wrap_socket(raw, server_hostname="api.test") as s:
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: api.test\r\n{extra}\r\n".encode())
        answer = read_response(s.makefile("rb"))
    if answer is None:
        # TLS 1.3: the server's refusal of the client's certificate arrives after the
        # client's handshake finished, as an alert on the first read.
        raise ConnectionResetError("the gateway closed the connection")
    return answer


def seen(backend, path):
    for r in reversed(backend.requests):
        if r["path"] == path:
            return {k.lower(): v for k, v in r["headers"].items()}
    raise AssertionError(f"the backend never saw {path}")


def test_mtls_route_without_a_certificate_is_401(optional, pki):
    g, backend = optional
    status, headers, body = get(g, pki, "/partners/x")
    assert status == 401
    assert json.loads(body)["error"]["code"] == "client_certificate_missing"
    assert "www-authenticate" in headers
    # The same connection kind reaches other routes.
    assert get(g, pki, "/open")[0] == 200


def test_certificate_identity_goes_upstream(optional, pki):
    g, backend = optional
    forged = {"X-Client-Cert-Subject": "CN=admin", "X-Client-Cert-SANs": "DNS:admin", "X-Client-Cert-Fingerprint": "00"}
    status, _, body = get(g, pki, "/partners/a", client="a", headers=forged)
    assert status == 200, body
    h = seen(backend, "/partners/a")
    # RFC 4514 string of the subject (most specific RDN first).
    assert h["x-client-cert-subject"] == "CN=partner-a,O=Example Partners"
    assert h["x-client-cert-sans"] == "DNS:partner-a.example, email:ops@partner-a.example, IP:10.1.2.3"
    fingerprint = pki["a"][2]
    assert h["x-client-cert-fingerprint"] == fingerprint
    assert h["x-quickway-key"] == fingerprint


def test_clients_cannot_set_the_certificate_headers_anywhere(optional, pki):
    g, backend = optional
    forged = {"X-Client-Cert-Subject": "CN=admin", "X_Client_Cert_SANs": "DNS:admin", "X-Client-Cert-Fingerprint": "00"}
    assert get(g, pki, "/open-forged", headers=forged)[0] == 200
    h = seen(backend, "/open-forged")
    assert not any(k.replace("_", "-").startswith("x-client-cert-") for k in h)


def test_a_certificate_from_another_ca_never_connects(optional, pki):
    g, _ = optional
    with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError)):
        get(g, pki, "/partners/s", client="stranger")


def test_the_fingerprint_is_the_rate_limit_key(optional, pki):
    g, _ = optional
    assert get(g, pki, "/partners/rl", client="b")[0] == 200
    assert get(g, pki, "/partners/rl", client="b")[0] == 429
    # Another certificate has its own allowance (partner-a used one above: a new window
    # of 1/m may not have passed, so this uses a certificate not counted yet).
    fresh = client_leaf(pki["client_ca"], "partner-c", "partner-c")
    pki["c"] = fresh
    assert get(g, pki, "/partners/rl", client="c")[0] == 200


def test_required_refuses_the_handshake_without_a_certificate(pki):
    g, backend = start(pki, required=True)
    try:
        with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError)):
            get(g, pki, "/open")
        assert get(g, pki, "/open", client="a")[0] == 200
    finally:
        g.stop()
        backend.stop()


def test_a_session_from_before_client_certificates_were_required_is_not_resumed(pki):
    """A TLS session made without a client certificate, resumed after a reload turned
    `required` on, would skip the certificate check (resumption verifies nothing): the
    session id context names the client-certificate rules, so it is not resumed."""
    g, backend = start(pki, required=False)
    try:
        ctx = ssl.create_default_context(cafile=pki["server_ca"].ca_file)
        ctx.set_alpn_protocols(["http/1.1"])
        with ctx.wrap_socket(socket.create_connection(("127.0.0.1", g.tls_port), timeout=5), server_hostname="api.test") as s:
            s.sendall(b"GET /open-1 HTTP/1.1\r\nHost: api.test\r\n\r\n")
            assert read_response(s.makefile("rb"))[0] == 200   # TLS 1.3 tickets arrive after the handshake
            session = s.session
        text = open(g.config_path).read().replace("required: false", "required: true")
        with open(g.config_path, "w") as f:
            f.write(text)
        g.signal(signal.SIGHUP)

        def refused_without_certificate():
            try:
                get(g, pki, "/open-2")
                return False
            except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
                return True
        wait_until(refused_without_certificate, timeout=10, what="the reload to require client certificates")
        with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError)):
            raw = socket.create_connection(("127.0.0.1", g.tls_port), timeout=5)
            with ctx.wrap_socket(raw, server_hostname="api.test", session=session) as s:
                s.sendall(b"GET /open-3 HTTP/1.1\r\nHost: api.test\r\n\r\n")
                answer = read_response(s.makefile("rb"))
                if answer is None:
                    raise ConnectionResetError("closed")
        assert backend.path_hits("/open-3") == 0
    finally:
        g.stop()
        backend.stop()
