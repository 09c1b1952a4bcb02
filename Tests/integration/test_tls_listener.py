"""The client-facing TLS listener (`tls_listen`, spec/config.md; issue 14, TLS part):
the real binary, real TLS clients (Python's ssl, curl) and a test CA made here.
Expectations come from the spec and RFCs (RFC 8446 / 5246, SNI RFC 6066, ALPN RFC 7301),
not from the code."""
import datetime
import hashlib
import json
import os
import shutil
import socket
import ssl
import subprocess
import time
import urllib.request

import pytest

from harness import Backend, Gateway, free_port, quickway_binary, read_response, wait_until

cryptography = pytest.importorskip("cryptography")
from cryptography import x509  # noqa: E402
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.x509.oid import NameOID  # noqa: E402


class CertAuthority:
    """A CA that signs leaf certificates for host names."""

    def __init__(self, dirpath):
        self.dir = dirpath
        self.now = datetime.datetime.now(datetime.timezone.utc)
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Quickway TLS Test CA")])
        self.cert = (x509.CertificateBuilder().subject_name(self.name).issuer_name(self.name)
                     .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
                     .not_valid_before(self.now - datetime.timedelta(minutes=5))
                     .not_valid_after(self.now + datetime.timedelta(days=1))
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                     .sign(self.key, hashes.SHA256()))
        self.ca_file = os.path.join(dirpath, "ca.pem")
        with open(self.ca_file, "wb") as f:
            f.write(self.cert.public_bytes(serialization.Encoding.PEM))

    def leaf(self, stem, *names):
        """Writes stem.pem (leaf, then the CA) and stem.key; returns (cert path, key path, serial)."""
        key = ec.generate_private_key(ec.SECP256R1())
        serial = x509.random_serial_number()
        cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
                .issuer_name(self.name).public_key(key.public_key()).serial_number(serial)
                .not_valid_before(self.now - datetime.timedelta(minutes=5))
                .not_valid_after(self.now + datetime.timedelta(days=1))
                .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), critical=False)
                .sign(self.key, hashes.SHA256()))
        cert_path, key_path = os.path.join(self.dir, stem + ".pem"), os.path.join(self.dir, stem + ".key")
        with open(cert_path + ".tmp", "wb") as f:
            f.write(cert.public_bytes(serialization.Encoding.PEM) + self.cert.public_bytes(serialization.Encoding.PEM))
        with open(key_path + ".tmp", "wb") as f:
            f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()))
        os.replace(key_path + ".tmp", key_path)
        os.replace(cert_path + ".tmp", cert_path)
        return cert_path, key_path, serial


CONFIG = """
listen: 127.0.0.1:{PORT}
workers: 2
admin: { listen: 127.0.0.1:{ADMIN} }
tls_listen:
  listen: 127.0.0.1:TLS_PORT
  certificates:
    - { cert_file: API_CERT, key_file: API_KEY }
    - { cert_file: OTHER_CERT, key_file: OTHER_KEY }
  alpn: [h2, http/1.1]
cache: { max_object_bytes: 64KiB }
services:
  api: { host: api.internal, port: BACKEND_PORT, ips: [127.0.0.2], timeouts: { connect: 500ms, response: 5s } }
routes:
  - { name: api, match: { path_prefix: /api/ }, service: api, strip_prefix: true }
  - { name: cached, match: { path_prefix: /c/ }, service: api, strip_prefix: true, cache: { ttl: 60s } }
"""


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("tls"))
    ca = CertAuthority(d)
    api = ca.leaf("api", "api.test")
    other = ca.leaf("other", "other.test", "*.other.test")
    backend = Backend("127.0.0.2", free_port("127.0.0.2"))
    tls_port = free_port()
    text = (CONFIG.replace("TLS_PORT", str(tls_port)).replace("BACKEND_PORT", str(backend.server.server_address[1]))
            .replace("API_CERT", api[0]).replace("API_KEY", api[1]).replace("OTHER_CERT", other[0]).replace("OTHER_KEY", other[1]))
    g = Gateway(text)
    g.tls_port = tls_port
    yield g, backend, ca, api, other
    g.stop()
    backend.stop()


def client_context(ca, alpn=("http/1.1",), check_hostname=True):
    ctx = ssl.create_default_context(cafile=ca.ca_file)
    ctx.check_hostname = check_hostname
    if alpn:
        ctx.set_alpn_protocols(list(alpn))
    return ctx


def tls_connect(g, ctx, name, session=None):
    raw = socket.create_connection(("127.0.0.1", g.tls_port), timeout=5)
    return ctx.wrap_socket(raw, server_hostname=name, session=session)


def request(sock, path, host="api.test", extra=""):
    """Sends one GET on a kept-alive connection and reads the answer (Content-Length framing)."""
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n{extra}\r\n".encode())
    answer = read_response(sock.makefile("rb"))
    assert answer is not None, "the gateway closed the connection"
    return answer


def serial_of(sock):
    return x509.load_der_x509_certificate(sock.getpeercert(binary_form=True)).serial_number


def test_requests_are_served_over_tls_with_http11_chosen_by_alpn(env):
    g, backend, ca, api, _ = env
    # (A client that also offers h2 gets HTTP/2: test_http2.py.)
    with tls_connect(g, client_context(ca, alpn=("http/1.1",)), "api.test") as s:
        assert s.selected_alpn_protocol() == "http/1.1"
        assert s.version() in ("TLSv1.2", "TLSv1.3")
        for i in range(3):   # keep-alive over one TLS connection
            status, headers, body = request(s, f"/api/item/{i}")
            assert status == 200 and json.loads(body)["path"] == f"/item/{i}"
            assert headers["x-request-id"]


def test_sni_picks_the_certificate_whose_names_cover_the_host(env):
    g, _, ca, api, other = env
    with tls_connect(g, client_context(ca), "other.test") as s:
        assert serial_of(s) == other[2]
    with tls_connect(g, client_context(ca), "x.other.test") as s:   # the wildcard name
        assert serial_of(s) == other[2]
    with tls_connect(g, client_context(ca), "api.test") as s:
        assert serial_of(s) == api[2]
    # A name no certificate covers gets the default (first) one.
    with tls_connect(g, client_context(ca, check_hostname=False), "unknown.test") as s:
        assert serial_of(s) == api[2]


def test_a_client_offering_no_protocol_we_speak_is_refused_in_the_handshake(env):
    """RFC 7301 3.2: no_application_protocol; counted by reason in /stats."""
    g, _, ca, _, _ = env
    before = g.stats()["tls"]
    with pytest.raises(ssl.SSLError):
        tls_connect(g, client_context(ca, alpn=("spdy/3.1",)), "api.test").close()
    wait_until(lambda: g.stats()["tls"]["handshake_failures"] > before["handshake_failures"], timeout=5, what="the failure counted")
    assert g.stats()["tls"]["failures_by_reason"]["no_application_protocol"] > before["failures_by_reason"]["no_application_protocol"]


def test_plain_http_on_the_tls_port_gets_no_http_answer(env):
    g, _, _, _, _ = env
    before = g.stats()["tls"]["handshake_failures"]
    s = socket.create_connection(("127.0.0.1", g.tls_port), timeout=5)
    s.sendall(b"GET /api/x HTTP/1.1\r\nHost: api.test\r\n\r\n")
    data = b""
    try:
        while chunk := s.recv(4096):
            data += chunk
    except (ConnectionResetError, socket.timeout):
        pass
    s.close()
    assert not data.startswith(b"HTTP/"), data[:100]
    wait_until(lambda: g.stats()["tls"]["handshake_failures"] > before, timeout=5, what="the failure counted")
    assert g.stats()["tls"]["failures_by_reason"]["not_tls"] >= 1


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is installed by .ci/run")
def test_curl_over_tls_with_http11(env):
    g, _, ca, _, _ = env
    out = subprocess.run(["curl", "-sS", "--http1.1", "--cacert", ca.ca_file, "--resolve", f"api.test:{g.tls_port}:127.0.0.1",
                          "-o", "-", "-w", "\n%{http_code} %{http_version}", f"https://api.test:{g.tls_port}/api/curl"],
                         capture_output=True, text=True, timeout=20)
    assert out.returncode == 0, out.stderr
    body, _, tail = out.stdout.rpartition("\n")
    assert tail == "200 1.1" and json.loads(body)["path"] == "/curl"


def test_cache_hits_and_large_streamed_bodies_work_over_tls(env):
    g, backend, ca, _, _ = env
    with tls_connect(g, client_context(ca), "api.test") as s:
        first = request(s, "/c/tls-cached")
        second = request(s, "/c/tls-cached")
        assert first[0] == second[0] == 200 and first[2] == second[2]
        assert second[1]["x-cache"] == "HIT"
        # 3 MB: over max_object_bytes, so streamed through the TLS transport.
        status, headers, body = request(s, "/api/big/3000000")
        assert status == 200 and len(body) == 3_000_000
        assert hashlib.sha256(body).hexdigest() == hashlib.sha256(
            (hashlib.sha256(b"seed").hexdigest().encode() * (3_000_000 // 64 + 1))[:3_000_000]).hexdigest()


def test_sessions_resume(env):
    g, _, ca, _, _ = env
    ctx = client_context(ca)
    with tls_connect(g, ctx, "api.test") as s:
        request(s, "/api/resume-1")   # TLS 1.3 tickets arrive after the handshake
        session = s.session
    before = g.stats()["tls"]["resumed"]
    with tls_connect(g, ctx, "api.test", session=session) as s:
        assert s.session_reused
        assert request(s, "/api/resume-2")[0] == 200
    assert g.stats()["tls"]["resumed"] > before


def test_a_reload_serves_renewed_certificates_to_new_connections_and_keeps_open_ones(env):
    g, _, ca, api, _ = env
    ctx = client_context(ca)
    old = tls_connect(g, ctx, "api.test")
    try:
        assert request(old, "/api/before-reload")[0] == 200
        renewed = ca.leaf("api", "api.test")   # same files, new certificate
        assert renewed[2] != api[2]
        req = urllib.request.Request(f"http://127.0.0.1:{g.admin_port}/reload", method="POST")
        with urllib.request.urlopen(req, timeout=10) as r:
            assert r.status == 200
        # New connections get the renewed certificate (installed on each worker's loop).
        wait_until(lambda: _serial_now(g, ctx) == renewed[2], timeout=5, what="the renewed certificate served")
        # The connection opened before the reload still works.
        try:
            assert request(old, "/api/after-reload")[0] == 200
        except Exception:
            print(g.logs()[-6000:])
            raise
    finally:
        old.close()


def _serial_now(g, ctx):
    with tls_connect(g, ctx, "api.test") as s:
        return serial_of(s)


def test_a_missing_or_mismatched_certificate_is_a_config_error_naming_the_file(tmp_path):
    ca = CertAuthority(str(tmp_path))
    cert, key, _ = ca.leaf("good", "good.test")
    _, other_key, _ = ca.leaf("other", "other.test")
    for cert_file, key_file, expect in ((str(tmp_path / "missing.pem"), key, "missing.pem"),
                                        (cert, other_key, "does not match")):
        config = tmp_path / "c.yaml"
        config.write_text(f"""listen: 127.0.0.1:18080
tls_listen:
  listen: 127.0.0.1:18443
  certificates:
    - cert_file: {cert_file}
      key_file: {key_file}
services:
  api: {{ host: a, port: 80, ips: [127.0.0.2] }}
routes:
  - {{ name: api, match: {{ path_prefix: / }}, service: api }}
""")
        out = subprocess.run([quickway_binary(), "check", "--config", str(config)], capture_output=True, text=True, timeout=20)
        assert out.returncode == 1, out
        assert "tls_listen.certificates[0]" in out.stderr and expect in out.stderr, out.stderr
        assert ":5:" in out.stderr or "line 5" in out.stderr, out.stderr


def test_moving_the_tls_listener_needs_a_restart_and_the_running_one_keeps_serving(env):
    g, _, ca, _, _ = env
    original = open(g.config_path).read()
    moved = original.replace(f"127.0.0.1:{g.tls_port}", f"127.0.0.1:{free_port()}")
    assert moved != original
    try:
        with open(g.config_path, "w") as f:
            f.write(moved)
        req = urllib.request.Request(f"http://127.0.0.1:{g.admin_port}/reload", method="POST")
        with urllib.request.urlopen(req, timeout=10) as r:
            answer = r.read().decode()
        assert "tls_listen needs a restart" in answer, answer
        with tls_connect(g, client_context(ca), "api.test") as s:
            assert request(s, "/api/still-here")[0] == 200
    finally:
        with open(g.config_path, "w") as f:
            f.write(original)


def test_a_client_closing_without_close_notify_does_not_break_other_connections(tmp_path):
    """OpenSSL keeps one error queue per thread: an error left there by one connection
    (an EOF without close_notify) must not be read as another connection's error. One
    worker, so every connection shares the thread; default (info) logging."""
    ca = CertAuthority(str(tmp_path))
    cert, key, _ = ca.leaf("api", "api.test")
    backend = Backend("127.0.0.2", free_port("127.0.0.2"))
    tls_port = free_port()
    text = (CONFIG.replace("workers: 2", "workers: 1").replace("TLS_PORT", str(tls_port))
            .replace("BACKEND_PORT", str(backend.server.server_address[1]))
            .replace("    - { cert_file: OTHER_CERT, key_file: OTHER_KEY }\n", "")
            .replace("API_CERT", cert).replace("API_KEY", key))
    g = Gateway(text)
    g.tls_port = tls_port
    try:
        ctx = client_context(ca)
        keeper = tls_connect(g, ctx, "api.test")
        assert request(keeper, "/api/keeper-0")[0] == 200
        for i in range(5):
            rude = tls_connect(g, ctx, "api.test")
            assert request(rude, f"/api/rude-{i}")[0] == 200
            raw = socket.socket(fileno=rude.detach())   # the TCP socket alone: no close_notify
            raw.close()
            wait_until(lambda: g.stats()["connections"] <= 1, timeout=5, what="the rude connection closed")
            assert request(keeper, f"/api/keeper-{i + 1}")[0] == 200, "the kept-alive connection still works"
        keeper.close()
    finally:
        g.stop()
        backend.stop()


def test_ticket_keys_rotate_and_old_tickets_expire(tmp_path):
    """session_ticket_rotation: 2s. A ticket is accepted while its key is current or the
    previous one (renewed then), and refused (a full handshake) two rotations later."""
    ca = CertAuthority(str(tmp_path))
    cert, key, _ = ca.leaf("api", "api.test")
    backend = Backend("127.0.0.2", free_port("127.0.0.2"))
    tls_port = free_port()
    g = Gateway(f"""listen: 127.0.0.1:{{PORT}}
workers: 1
admin: {{ listen: 127.0.0.1:{{ADMIN}} }}
tls_listen:
  listen: 127.0.0.1:{tls_port}
  certificates:
    - {{ cert_file: {cert}, key_file: {key} }}
  session_ticket_rotation: 2s
services:
  api: {{ host: api.internal, port: {backend.server.server_address[1]}, ips: [127.0.0.2] }}
routes:
  - {{ name: api, match: {{ path_prefix: /api/ }}, service: api, strip_prefix: true }}
""")
    g.tls_port = tls_port
    try:
        ctx = client_context(ca)
        # TLS 1.2: the ticket is sent in the handshake, so `session` is ready at once.
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2

        def ticket():
            with tls_connect(g, ctx, "api.test") as s:
                assert request(s, "/api/t")[0] == 200
                return s.session

        def resumes(session):
            with tls_connect(g, ctx, "api.test", session=session) as s:
                request(s, "/api/t")
                return s.session_reused
        first = ticket()
        assert resumes(first)
        # Across one rotation (the previous key still decrypts): resumed.
        t0 = time.monotonic()
        second = ticket()
        time.sleep(2.2)
        assert resumes(second), "a ticket from the previous key period was refused"
        # Two rotations later its key is gone: a full handshake.
        time.sleep(4.4 - (time.monotonic() - t0) + 0.2)
        assert not resumes(second), "a ticket outlived two rotation periods"
    finally:
        g.stop()
        backend.stop()


def test_the_backend_is_told_https_and_tls_answers_are_cached_apart(env):
    """X-Forwarded-Proto says what the client used; since a backend may write the scheme
    into its answer (absolute links, redirects), an answer made for an https client is not
    served to a plain-HTTP one or the other way round (nginx keys by $scheme too)."""
    g, backend, ca, _, _ = env
    with tls_connect(g, client_context(ca), "api.test") as s:
        status, headers, body = request(s, "/api/proto")
        assert status == 200 and json.loads(body)["headers"]["X-Forwarded-Proto"] == "https"
        first = request(s, "/c/scheme-apart")
        assert first[1]["x-cache"] == "MISS"
        assert request(s, "/c/scheme-apart")[1]["x-cache"] == "HIT"
    plain = socket.create_connection(("127.0.0.1", g.port), timeout=5)
    try:
        plain.sendall(b"GET /api/proto HTTP/1.1\r\nHost: api.test\r\n\r\n")
        answer = read_response(plain.makefile("rb"))
        assert json.loads(answer[2])["headers"]["X-Forwarded-Proto"] == "http"
        plain.sendall(b"GET /c/scheme-apart HTTP/1.1\r\nHost: api.test\r\n\r\n")
        answer = read_response(plain.makefile("rb"))
        assert answer[1]["x-cache"] == "MISS", "an answer made for an https client was served over plain HTTP"
    finally:
        plain.close()


def test_a_purge_by_key_also_removes_the_tls_copy(env):
    g, backend, ca, _, _ = env
    with tls_connect(g, client_context(ca), "api.test") as s:
        request(s, "/c/purge-twin")
        assert request(s, "/c/purge-twin")[1]["x-cache"] == "HIT"
    body = json.dumps({"key": "GET api.test/c/purge-twin?"}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{g.admin_port}/cache/purge", data=body, method="POST")
    with urllib.request.urlopen(req, timeout=5) as r:
        assert json.loads(r.read())["purged"] == 1
    with tls_connect(g, client_context(ca), "api.test") as s:
        assert request(s, "/c/purge-twin")[1]["x-cache"] == "MISS"
