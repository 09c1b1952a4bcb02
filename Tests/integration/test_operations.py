"""What an operator sees of a running gateway: a busy port is an error naming it, the
process's descriptors are visible to ss and /proc (one table by default) and counted in
/stats and /metrics, `workers: auto` follows the CPUs the process may use, and /stats
says which config is running."""
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.request

import pytest

from harness import Backend, Gateway, admin_healthy as _up, free_port, quickway_binary, wait_until

CONFIG = """
listen: 127.0.0.1:{PORT}
workers: {WORKERS}
admin: { listen: 127.0.0.1:{ADMIN} }
services:
  api: { host: api.internal, port: BACKEND_PORT, ips: [127.0.0.2] }
routes:
  - { name: api, match: { path_prefix: / }, service: api, auth: off }
"""


@pytest.fixture(scope="module")
def backend():
    b = Backend("127.0.0.2", free_port("127.0.0.2"))
    yield b
    b.stop()


def config_for(backend):
    return CONFIG.replace("BACKEND_PORT", str(backend.server.server_address[1]))


def write_config(tmp_path, text, port, admin, workers=2):
    p = tmp_path / "config.yaml"
    p.write_text(text.replace("{PORT}", str(port)).replace("{ADMIN}", str(admin)).replace("{WORKERS}", str(workers)))
    return str(p)


def run_serve(config_path, timeout=15):
    """Starts `quickway serve` expecting it to fail: (exit code, output)."""
    out = subprocess.run([quickway_binary(), "serve", "--config", config_path], capture_output=True, text=True, timeout=timeout)
    return out.returncode, out.stdout + out.stderr


def test_a_busy_port_is_an_error_naming_it(backend, tmp_path):
    g = Gateway(config_for(backend), workers=2)
    try:
        # The same client port as the running gateway: refused, not shared.
        other_admin = free_port()
        rc, text = run_serve(write_config(tmp_path, config_for(backend), g.port, other_admin))
        assert rc == 1, text
        assert f"127.0.0.1:{g.port}" in text and "already in use" in text, text
        # The same admin port: refused too (a second process must not answer /stats or /reload).
        rc, text = run_serve(write_config(tmp_path, config_for(backend), free_port(), g.admin_port))
        assert rc == 1, text
        assert f"127.0.0.1:{g.admin_port}" in text and "already in use" in text, text
        # A port held by a foreign listener that set SO_REUSEPORT (the way the workers'
        # listeners are opened) is busy as well.
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        try:
            rc, text = run_serve(write_config(tmp_path, config_for(backend), s.getsockname()[1], free_port()))
            assert rc == 1 and "already in use" in text, text
        finally:
            s.close()
        # And the running gateway still answers every call itself.
        for _ in range(10):
            with urllib.request.urlopen(g.url("/x"), timeout=5) as r:
                assert r.status == 200
    finally:
        g.stop()


def fd_count(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_descriptors_are_in_one_table_and_counted(backend):
    g = Gateway(config_for(backend), workers=2)
    try:
        # ss names the process behind the listener (the default: one descriptor table).
        if shutil.which("ss"):
            out = subprocess.run(["ss", "-ltnp", f"sport = :{g.port}"], capture_output=True, text=True, timeout=10).stdout
            assert f"pid={g.proc.pid}," in out, out
        before = fd_count(g.proc.pid)
        held = []
        try:
            for _ in range(40):
                s = socket.create_connection(("127.0.0.1", g.port), timeout=5)
                s.sendall(b"GET /held HTTP/1.1\r\nHost: x\r\n\r\n")
                s.recv(65536)
                held.append(s)
            # Every worker's client socket shows in /proc/PID/fd (no private tables).
            wait_until(lambda: fd_count(g.proc.pid) >= before + 40, timeout=5, what="held connections in /proc/PID/fd")
            stats = g.stats()
            proc_fds = fd_count(g.proc.pid)
            assert abs(stats["process"]["open_fds"] - proc_fds) <= 4, (stats["process"], proc_fds)
            assert stats["process"]["private_fd_tables"] is False
            limit = int(open(f"/proc/{g.proc.pid}/limits").read().split("Max open files")[1].split()[0])
            assert stats["process"]["max_fds"] == limit
            with urllib.request.urlopen(f"http://127.0.0.1:{g.admin_port}/metrics", timeout=5) as r:
                text = r.read().decode()
            m = re.search(r"^quickway_open_fds (\d+)", text, re.M)
            assert m and int(m.group(1)) >= before + 40, text[:400]
            assert re.search(rf"^quickway_max_fds {limit}\b", text, re.M)
        finally:
            for s in held:
                s.close()
        wait_until(lambda: fd_count(g.proc.pid) <= before + 2, timeout=10, what="descriptors back to baseline")
    finally:
        g.stop()


def test_private_tables_are_opt_in_and_still_counted(backend):
    g = Gateway(config_for(backend) + "workers_private_fd_tables: true\n", workers=2)
    try:
        held = []
        try:
            for _ in range(30):
                s = socket.create_connection(("127.0.0.1", g.port), timeout=5)
                s.sendall(b"GET /held HTTP/1.1\r\nHost: x\r\n\r\n")
                s.recv(65536)
                held.append(s)
            stats = g.stats()
            assert stats["process"]["private_fd_tables"] is True
            # The workers' sockets are not in the main table, but /stats sums every table.
            assert stats["process"]["open_fds"] >= 30 + fd_count(g.proc.pid) - 2, stats["process"]
        finally:
            for s in held:
                s.close()
    finally:
        g.stop()


def test_workers_auto_follows_the_affinity_mask(backend, tmp_path):
    if shutil.which("taskset") is None or len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs taskset and two CPUs")
    port, admin = free_port(), free_port()
    path = write_config(tmp_path, config_for(backend), port, admin, workers="auto")
    proc = subprocess.Popen(["taskset", "-c", "0", quickway_binary(), "serve", "--config", path],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def stats():
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{admin}/stats", timeout=1) as r:
                    return json.loads(r.read())
            except OSError:
                return None
        wait_until(lambda: stats() is not None, timeout=15, what="gateway under taskset")
        assert stats()["process"]["workers"] == 1
    finally:
        proc.terminate()
        proc.wait(20)


def test_stats_say_which_config_runs_and_how_reloads_went(backend):
    g = Gateway(config_for(backend), workers=1)
    try:
        c = g.stats()["config"]
        raw = open(g.config_path, "rb").read()
        assert c["path"] == g.config_path
        assert c["sha256"] == hashlib.sha256(raw).hexdigest()
        assert c["generation"] == 1 and c["last_reload"] is None
        # A refused reload keeps the running config and says so.
        open(g.config_path, "w").write(raw.decode() + "bogus_key: 1\n")
        req = urllib.request.Request(f"http://127.0.0.1:{g.admin_port}/reload", method="POST", data=b"")
        try:
            urllib.request.urlopen(req, timeout=10)
        except urllib.error.HTTPError as e:
            assert e.code == 400
        c = g.stats()["config"]
        assert c["generation"] == 1 and c["sha256"] == hashlib.sha256(raw).hexdigest()
        assert c["last_reload"]["result"] == "invalid" and "bogus_key" in " ".join(c["last_reload"]["details"])
        # An applied one moves the generation and the hash.
        fixed = raw.decode().replace("auth: off }", "auth: off, strip_prefix: false }")
        open(g.config_path, "w").write(fixed)
        with urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{g.admin_port}/reload", method="POST", data=b""), timeout=10) as r:
            assert r.status == 200
        c = g.stats()["config"]
        assert c["generation"] == 2 and c["sha256"] == hashlib.sha256(fixed.encode()).hexdigest()
        assert c["last_reload"]["result"] == "applied"
        with urllib.request.urlopen(f"http://127.0.0.1:{g.admin_port}/metrics", timeout=5) as r:
            text = r.read().decode()
        assert re.search(r"^quickway_config_generation 2\b", text, re.M), text
        assert f'sha256="{c["sha256"]}"' in text
        assert re.search(r"^quickway_config_last_reload_success 1\b", text, re.M)
    finally:
        g.stop()


def test_check_warns_about_unset_secret_variables_and_serve_refuses(backend, tmp_path):
    text = config_for(backend) + """
auth:
  salt: pepper
  keys: [ { id: app, secret_env: QW_TEST_UNSET_SECRET } ]
"""
    path = write_config(tmp_path, text, free_port(), free_port())
    env = {k: v for k, v in os.environ.items() if k != "QW_TEST_UNSET_SECRET"}
    out = subprocess.run([quickway_binary(), "check", "--config", path], capture_output=True, text=True, timeout=30, env=env)
    assert out.returncode == 0, out.stderr
    assert "warning:" in out.stderr and "QW_TEST_UNSET_SECRET" in out.stderr and "serve will refuse" in out.stderr, out.stderr
    out = subprocess.run([quickway_binary(), "serve", "--config", path], capture_output=True, text=True, timeout=30, env=env)
    assert out.returncode == 1 and "QW_TEST_UNSET_SECRET" in out.stderr, out.stderr
    # Other problems stay errors in check.
    bad = write_config(tmp_path, text.replace("salt: pepper", "salt: pepper\n  bogus: 1"), free_port(), free_port())
    out = subprocess.run([quickway_binary(), "check", "--config", bad], capture_output=True, text=True, timeout=30, env=env)
    assert out.returncode == 1 and "auth.bogus" in out.stderr, out.stderr


def test_the_tls_listener_is_in_the_startup_log(backend, tmp_path):
    pytest.importorskip("cryptography")
    import datetime
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "api.test")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("api.test")]), critical=False).sign(key, hashes.SHA256()))
    (tmp_path / "c.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "k.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    tls_port = free_port()
    g = Gateway(config_for(backend) + f"""
tls_listen:
  listen: 127.0.0.1:{tls_port}
  certificates: [ {{ cert_file: {tmp_path}/c.pem, key_file: {tmp_path}/k.pem }} ]
""")
    try:
        wait_until(lambda: f"TLS listener on 127.0.0.1:{tls_port}" in g.logs(), timeout=5, what="TLS listener logged")
    finally:
        g.stop()


# --- Three fault paths from a qualification run (issue 30, point 13) ------------------

RECOVER_CONFIG = """
listen: 127.0.0.1:{PORT}
workers: 1
admin: { listen: 127.0.0.1:{ADMIN} }
services:
  api:
    host: api.internal
    port: BACKEND_PORT
    ips: [127.0.0.2, 127.0.0.3]
    probe: { kind: http, path: /health, interval: 200ms, timeout: 300ms }
    failover: { window: 20, max_error_rate: 100%, eject_for: 60s }
    timeouts: { connect: 300ms, response: 2s }
    retries: 1
routes:
  - { name: all, match: { path_prefix: / }, service: api }
"""


def test_a_backend_that_recovers_gets_traffic_back():
    from harness import BackendProcess
    port = free_port("127.0.0.2", also=["127.0.0.3"])
    fast = BackendProcess("127.0.0.2", port)
    slow = Backend("127.0.0.3", port)
    slow.server.delay_ms = 30
    g = Gateway(RECOVER_CONFIG.replace("BACKEND_PORT", str(port)))

    def served():
        with urllib.request.urlopen(g.url("/x"), timeout=10) as r:
            return json.loads(r.read())["backend"].split(":")[0]

    def state(ip):
        return {u["address"]: u for u in g.stats()["services"]["api"]["upstreams"]}[ip]

    try:
        wait_until(lambda: served() == "127.0.0.2", timeout=10, what="the fast IP chosen")
        fast.kill()
        # Calls made before the probes notice go to the dead IP first (errors in its window).
        for _ in range(10):
            assert served() == "127.0.0.3"
        wait_until(lambda: state("127.0.0.2")["state"] == "down", timeout=5, what="probes mark it down")
        assert state("127.0.0.2")["errors"] >= 1
        fast = BackendProcess("127.0.0.2", port)
        wait_until(lambda: state("127.0.0.2")["state"] == "up", timeout=5, what="probes bring it back")
        # Within a few probe intervals it is the fastest again and takes the calls.
        wait_until(lambda: served() == "127.0.0.2", timeout=3, interval=0.1, what="traffic back on the recovered IP")
    finally:
        g.stop()
        fast.kill()
        slow.stop()


FD_CONFIG = """
listen: 127.0.0.1:{PORT}
workers: 1
admin: { listen: 127.0.0.1:{ADMIN} }
services:
  api: { host: api.internal, port: BACKEND_PORT, ips: [127.0.0.2], retries: 0 }
routes:
  - { name: api, match: { path_prefix: /api/ }, service: api }
"""


def test_out_of_descriptors_is_the_gateways_fault_not_the_backends(backend, tmp_path):
    import resource
    port, admin = free_port(), free_port()
    path = write_config(tmp_path, FD_CONFIG.replace("BACKEND_PORT", str(backend.server.server_address[1])), port, admin)
    limit = 64
    proc = subprocess.Popen([quickway_binary(), "serve", "--config", path], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit)))
    conns = []
    try:
        def stats():
            with urllib.request.urlopen(f"http://127.0.0.1:{admin}/stats", timeout=2) as r:
                return json.loads(r.read())
        wait_until(lambda: _up(admin), timeout=15, what="gateway up")
        first = socket.create_connection(("127.0.0.1", port), timeout=5)
        first.sendall(b"GET /none HTTP/1.1\r\nHost: x\r\n\r\n")   # 404, and the connection stays
        assert b" 404 " in first.recv(65536)
        # Fill the descriptor table with idle client connections.
        for _ in range(limit):
            try:
                conns.append(socket.create_connection(("127.0.0.1", port), timeout=2))
            except OSError:
                break
        wait_until(lambda: fd_count(proc.pid) >= limit - 1, timeout=5, what="the table full")
        first.sendall(b"GET /api/x HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = first.recv(65536)
        assert b" 503 " in answer and b'"overloaded"' in answer, answer[:300]
        for c in conns:
            c.close()
        conns = []
        wait_until(lambda: fd_count(proc.pid) < limit - 8, timeout=5, what="connections gone")
        up = {u["address"]: u for u in stats()["services"]["api"]["upstreams"]}["127.0.0.2"]
        assert up["errors"] == 0 and up["state"] == "up", up
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/after", timeout=5) as r:
            assert r.status == 200
    finally:
        for c in conns:
            c.close()
        proc.terminate()
        proc.wait(20)

