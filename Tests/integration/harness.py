"""Test harness: real local HTTP backends and a real `quickway` process.

Backends are Python's own http.server (an HTTP implementation independent of the
gateway's), bound to 127.0.0.x addresses. The gateway is the built binary, started
with a config written per test and stopped by its PID.
"""
import hashlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def quickway_binary():
    env = os.environ.get("QUICKWAY_BIN")
    if env:
        return env
    for kind in ("release", "debug"):
        p = os.path.join(ROOT, ".build", kind, "quickway")
        if os.path.exists(p):
            return p
    raise RuntimeError("build quickway first (swift build) or set QUICKWAY_BIN")


def free_port(host="127.0.0.1", also=()):
    """A TCP port free on `host` and on every address in `also`."""
    for _ in range(50):
        s = socket.socket()
        s.bind((host, 0))
        port = s.getsockname()[1]
        s.close()
        ok = True
        for h in also:
            t = socket.socket()
            try:
                t.bind((h, port))
            except OSError:
                ok = False
            finally:
                t.close()
        if ok:
            return port
    raise RuntimeError("no free port")


def rss_kb(pid):
    """Resident memory of a process, in KiB (VmRSS)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def cpu_seconds(pid):
    """User plus system CPU time of a process so far, in seconds."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def admin_healthy(admin_port):
    """Whether a gateway's admin listener answers /health with 200 (for gateways a test
    starts itself, outside `Gateway`)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/health", timeout=1) as r:
            return r.status == 200
    except OSError:
        return False


def wait_until(predicate, timeout=10.0, interval=0.02, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class BackendHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # The head and the body go out in two writes: with Nagle's algorithm the body waits
    # for the gateway's delayed ACK of the head (about 40 ms a call on a kept-alive
    # connection), which made this backend far slower than the calls it is offered.
    disable_nagle_algorithm = True

    def log_message(self, *args):
        pass

    def _body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _send(self, status, body, ctype="application/json", extra=None):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def handle_any(self):
        server = self.server
        body = self._body()
        with server.lock:
            server.hits += 1
            server.path_hits[self.path.split("?")[0]] = server.path_hits.get(self.path.split("?")[0], 0) + 1
            server.requests.append({"method": self.command, "path": self.path,
                                    "headers": dict(self.headers.items()), "body": body})
        parts = self.path.split("?")[0].strip("/").split("/")
        kind = parts[0] if parts else ""
        # Runtime knobs (routing tests): a delay for every answer, a forced failure status
        # for everything but /health, and an IP list to serve at /ips.
        if server.delay_ms:
            time.sleep(server.delay_ms / 1000)
        if kind == "ips":
            return self._send(200, server.ip_list.encode(), "text/plain")
        if server.fail_status and kind != "health":
            return self._send(server.fail_status, b'{"failing": true}')
        query = dict(urllib.parse.parse_qsl(self.path.partition("?")[2]))
        if kind == "hdr":
            # Answers with the response headers given in the query (Cache-Control=..., Set-Cookie=...).
            payload = json.dumps({"path": self.path, "n": server.path_hits[self.path.split("?")[0]]}).encode()
            return self._send(int(query.pop("status", 200)), payload, extra=query)
        if kind == "etag":
            # 304 to a request whose If-None-Match names the current ETag, else the whole answer.
            if self.headers.get("If-None-Match") == '"v1"':
                self.send_response(304)
                self.send_header("ETag", '"v1"')
                self.end_headers()
                return
            return self._send(200, json.dumps({"n": server.path_hits[self.path.split("?")[0]]}).encode(), extra={"ETag": '"v1"'})
        if kind == "lang":
            return self._send(200, json.dumps({"lang": self.headers.get("Accept-Language", "")}).encode())
        if kind == "flaky":
            if server.flaky_status != 200:
                return self._send(server.flaky_status, b'{"failed": true}')
            return self._send(200, json.dumps({"n": server.path_hits[self.path.split("?")[0]]}).encode())
        if kind == "sized":
            n = int(parts[1])
            return self._send(200, (parts[2].encode() * (n // max(1, len(parts[2])) + 1))[:n], "application/octet-stream")
        if kind == "delay":
            time.sleep(int(parts[1]) / 1000)
        if kind == "status":
            return self._send(int(parts[1]), json.dumps({"status": int(parts[1])}).encode())
        if kind == "big":
            n = int(parts[1])
            data = (hashlib.sha256(b"seed").hexdigest().encode() * (n // 64 + 1))[:n]
            return self._send(200, data, "application/octet-stream")
        if kind == "bigchunked":
            n = int(parts[1])
            data = (hashlib.sha256(b"seed").hexdigest().encode() * (n // 64 + 1))[:n]
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(0, n, 10000):
                piece = data[i:i + 10000]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.write(b"0\r\n\r\n")
            return
        if kind == "hang":
            # Never answer; record when the gateway closes our connection.
            sock = self.connection
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                r, _, _ = select.select([sock], [], [], 0.05)
                if r:
                    try:
                        if sock.recv(1, socket.MSG_PEEK) == b"":
                            break
                    except OSError:
                        break
            server.hangups.set()
            self.close_connection = True
            return
        payload = {"backend": server.name, "method": self.command, "path": self.path,
                   "headers": dict(self.headers.items()), "body": body.decode("latin-1")}
        self._send(200, json.dumps(payload).encode(), extra={"X-Backend": server.name})

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = handle_any


class _BackendServer(ThreadingHTTPServer):
    # socketserver's default listen backlog is 5: a burst of new upstream connections
    # would see SYNs dropped (and a 1 s retransmit) at the backend, not the gateway.
    request_queue_size = 128


class Backend:
    """A real HTTP server on `host:port` in a background thread."""

    def __init__(self, host, port, ssl_context=None):
        self.server = _BackendServer((host, port), BackendHandler)
        if ssl_context is not None:
            self.server.socket = ssl_context.wrap_socket(self.server.socket, server_side=True)
        self.server.daemon_threads = True
        self.server.name = f"{host}:{port}"
        self.server.lock = threading.Lock()
        self.server.hits = 0
        self.server.requests = []
        self.server.hangups = threading.Event()
        self.server.path_hits = {}
        self.server.flaky_status = 200
        self.server.delay_ms = 0
        self.server.fail_status = None
        self.server.ip_list = ""
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    @property
    def hits(self):
        return self.server.hits

    @property
    def requests(self):
        return self.server.requests

    def path_hits(self, path):
        return self.server.path_hits.get(path, 0)

    @property
    def hangups(self):
        return self.server.hangups

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


class Gateway:
    """The real quickway binary with a config written for the test.

    `host`: the address its listener and admin listener are reached on (the config's
    `{HOST}`); `prefix`: a command it runs under, which must exec it in place so the PID
    stays the gateway's (`ip netns exec NS`, for a gateway in a network namespace)."""

    def __init__(self, config_text, workers=1, env=None, host="127.0.0.1", prefix=()):
        self.host = host
        self.port = free_port()
        self.admin_port = free_port()
        self.dir = tempfile.mkdtemp(prefix="qw-test-")
        self.config_path = os.path.join(self.dir, "config.yaml")
        text = config_text.replace("{PORT}", str(self.port)).replace("{ADMIN}", str(self.admin_port))
        text = text.replace("{WORKERS}", str(workers)).replace("{HOST}", host)
        with open(self.config_path, "w") as f:
            f.write(text)
        self.log_path = os.path.join(self.dir, "quickway.log")
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([*prefix, quickway_binary(), "serve", "--config", self.config_path],
                                     stdout=self.log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
        try:
            wait_until(self._healthy, timeout=15, what="gateway /health")
        except AssertionError:
            self.stop()
            raise AssertionError("gateway did not start:\n" + self.logs())

    def _healthy(self):
        if self.proc.poll() is not None:
            raise AssertionError("gateway exited:\n" + self.logs())
        try:
            with urllib.request.urlopen(f"http://{self.host}:{self.admin_port}/health", timeout=1) as r:
                return r.status == 200
        except OSError:
            return False

    def logs(self):
        if not self.log.closed:
            self.log.flush()
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def url(self, path):
        return f"http://{self.host}:{self.port}{path}"

    def stats(self):
        with urllib.request.urlopen(f"http://{self.host}:{self.admin_port}/stats", timeout=5) as r:
            return json.loads(r.read())

    def signal(self, sig):
        self.proc.send_signal(sig)

    def stop(self, timeout=20):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode


def http_call(g, method, path, headers=None, body=None, timeout=15):
    """One request on its own connection: (status, headers with lower-case names, body)."""
    import http.client
    conn = http.client.HTTPConnection(getattr(g, "host", "127.0.0.1"), g.port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def raw_exchange(port, data, timeout=5.0, read_until_close=True):
    """Sends raw bytes and returns everything read until the server closes (or timeout)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(data)
        chunks = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                b = s.recv(65536)
            except socket.timeout:
                break
            except ConnectionResetError:
                break
            if not b:
                break
            chunks.append(b)
            if not read_until_close:
                break
        return b"".join(chunks)
    finally:
        s.close()


def read_response(sock_file):
    """Reads one HTTP/1.1 response with Content-Length framing from a socket file."""
    status_line = sock_file.readline()
    if not status_line:
        return None
    headers = {}
    while True:
        line = sock_file.readline()
        if line in (b"\r\n", b""):
            break
        k, v = line.decode().split(":", 1)
        headers[k.strip().lower()] = v.strip()
    n = int(headers.get("content-length", "0"))
    body = sock_file.read(n) if n else b""
    return int(status_line.split()[1]), headers, body


class BackendProcess:
    """A backend in its own process, so a test can kill it outright (SIGKILL): its
    listening socket and every open connection go at once, as when a machine dies."""

    def __init__(self, host, port):
        self.host, self.port = host, port
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "serve", host, str(port)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(lambda: _connectable(host, port), what=f"backend process on {host}:{port}")

    def kill(self):
        self.proc.kill()
        self.proc.wait(10)


def _connectable(host, port):
    try:
        socket.create_connection((host, port), timeout=0.5).close()
        return True
    except OSError:
        return False


if __name__ == "__main__" and len(sys.argv) == 4 and sys.argv[1] == "serve":
    b = Backend(sys.argv[2], int(sys.argv[3]))
    b.thread.join()


class RedisServer:
    """A real redis-server (Debian's) on 127.0.0.1, in its own process, with no
    persistence. `stop()` and `start()` keep the port, as when Redis restarts.

    `tls`: a `CertAuthority.server_files()` tuple (cert, key, ca): Redis then listens with TLS
    only (`tls-port`; its plain port is off), and `command` speaks TLS too."""

    def __init__(self, password=None, tls=None, host="127.0.0.1", extra_args=()):
        import shutil
        self.binary = shutil.which("redis-server")
        if self.binary is None:
            raise RuntimeError("redis-server is not installed (apt-get install redis-server; .ci/run does)")
        self.host = host
        self.port = free_port(host)
        self.password = password
        self.tls = tls
        self.extra_args = list(extra_args)
        self.dir = tempfile.mkdtemp(prefix="qw-redis-")
        self.proc = None
        self.start()

    def start(self):
        args = [self.binary, "--port", str(self.port), "--bind", self.host, "--save", "", "--appendonly", "no",
                "--dir", self.dir, "--daemonize", "no"]
        if self.tls:
            cert, key, ca = self.tls
            args[1:3] = ["--port", "0", "--tls-port", str(self.port), "--tls-cert-file", cert, "--tls-key-file", key,
                         "--tls-ca-cert-file", ca, "--tls-auth-clients", "no"]
        args += self.extra_args
        if self.password:
            args += ["--requirepass", self.password]
        self.log = open(os.path.join(self.dir, "redis.log"), "ab")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        try:
            wait_until(lambda: _connectable(self.host, self.port), what=f"redis-server on {self.port}")
        except BaseException:
            self.stop()
            raise

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        self.log.close()

    def pause(self):
        """SIGSTOP: connections stay open but nothing is answered."""
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self):
        self.proc.send_signal(signal.SIGCONT)

    def command(self, *args, db=0):
        """One command over RESP on a fresh connection (our own tiny client, not the gateway's)."""
        def enc(parts):
            out = b"*%d\r\n" % len(parts)
            for p in parts:
                p = p if isinstance(p, bytes) else str(p).encode()
                out += b"$%d\r\n%s\r\n" % (len(p), p)
            return out
        with socket.create_connection((self.host, self.port), timeout=5) as plain:
            s = plain
            if self.tls:
                import ssl
                ctx = ssl.create_default_context(cafile=self.tls[2])
                s = ctx.wrap_socket(plain, server_hostname=self.host)
            f = s.makefile("rb")
            if self.password:
                s.sendall(enc(["AUTH", self.password]))
                _read_resp(f)
            if db:
                s.sendall(enc(["SELECT", db]))
                _read_resp(f)
            s.sendall(enc(args))
            return _read_resp(f)


def _read_resp(f):
    line = f.readline()
    kind, rest = line[:1], line[1:-2]
    if kind in (b"+", b"-"):
        return rest.decode() if kind == b"+" else RuntimeError(rest.decode())
    if kind == b":":
        return int(rest)
    if kind == b"$":
        n = int(rest)
        if n < 0:
            return None
        data = f.read(n + 2)
        return data[:-2]
    if kind == b"*":
        n = int(rest)
        return None if n < 0 else [_read_resp(f) for _ in range(n)]
    raise ValueError(f"unexpected RESP line {line!r}")


class CertAuthority:
    """A throw-away certificate authority made with the openssl command line in a
    temporary directory: `issue()` signs a server certificate for the given subject
    alternative names (`IP:127.0.0.1`, `DNS:localhost`)."""

    def __init__(self, name="Quickway test CA"):
        self.dir = tempfile.mkdtemp(prefix="qw-ca-")
        self.cert = os.path.join(self.dir, "ca.pem")
        self.key = os.path.join(self.dir, "ca.key")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                        "-keyout", self.key, "-out", self.cert, "-days", "2", "-subj", f"/CN={name}",
                        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign"],
                       check=True, capture_output=True)
        self.issued = 0

    def issue(self, sans):
        """(cert, key) files of a server certificate with `sans` (a list), signed by this CA."""
        self.issued += 1
        base = os.path.join(self.dir, f"server{self.issued}")
        subprocess.run(["openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                        "-keyout", base + ".key", "-out", base + ".csr", "-subj", "/CN=redis"], check=True, capture_output=True)
        ext = base + ".ext"
        with open(ext, "w") as f:
            f.write("subjectAltName=" + ",".join(sans) + "\nextendedKeyUsage=serverAuth\n")
        subprocess.run(["openssl", "x509", "-req", "-in", base + ".csr", "-CA", self.cert, "-CAkey", self.key,
                        "-CAcreateserial", "-days", "1", "-extfile", ext, "-out", base + ".pem"], check=True, capture_output=True)
        return base + ".pem", base + ".key"

    def server_files(self, sans):
        """(cert, key, ca) for `RedisServer(tls=...)`."""
        cert, key = self.issue(sans)
        return cert, key, self.cert
