#!/usr/bin/env python3
"""Memory per idle connection: Quickway against nginx, in one run.

Starts a backend on 127.0.0.2, then in turn Quickway (1 worker, proxying to it) and
nginx (1 worker, `master_process off`, proxying the same way). For each it opens
--connections client connections to 127.0.0.1, half of which make one proxied call
first (and then stay open, idle), waits --settle seconds, and reads the server's
resident memory (VmRSS) before and after. Reports bytes per idle connection, medians of
--rounds rounds. Every process is stopped by its PID.

--protocol picks the connections:
  http1      HTTP/1.1 keep-alive; the call is a GET of a 1 KB JSON (nginx backend;
             nginx `proxy_pass` with upstream keepalive).
  h2         HTTP/2 with prior knowledge (h2c): preface and SETTINGS exchanged, then the
             same GET on stream 1 for half (nginx `listen ... http2`). Frames are made by
             the `h2` package (PyPI).
  websocket  A WebSocket handshake through the proxy to an echo backend
             (scripts/bench/bench_ws_load.c, compiled here), then one 64-byte message echoed
             for half. Each connection also holds the proxy's backend socket, on both
             sides (nginx proxy_pass with Upgrade).

--burst (HTTP/1.1): memory after a burst. All --connections (default 8,000) are opened
first; then every other one sends its GET at once (4,000 concurrent upstream calls), and
the answers are read. Both sides keep --keepalive idle upstream connections per worker
(nginx `keepalive N`, Quickway `services.<name>.keepalive`); the backend accepts them all.
Reported: bytes per connection once RSS is stable again, and the backend connections the
server still holds.

--given-back: memory given back. Opens --connections (default 12,000; --tls of them over
TLS, to a TLS listener), each sending one proxied GET (in waves of --wave), holds them,
closes them all, then waits for RSS to be stable. Reports RSS before, at the peak and after,
and after/before.

RSS is read once it is stable (--settle seconds at least, then until four samples 0.5 s
apart lie within 1%, at most --settle-max seconds).

usage: bench_idle.py [--protocol http1|h2|websocket] [--burst | --given-back] [--binary PATH]
                     [--connections N] [--rounds R] [--settle S] [--keepalive N] [--tls N]
                     [--no-quickway-keepalive] [--env NAME=VALUE ...]
"""
import argparse
import base64
import os
import resource
import signal
import selectors
import socket
import ssl
import statistics
import subprocess
import tempfile
import time

BODY = '{"items":[' + ",".join('{"id":%d}' % i for i in range(120)) + "]}"


def free_port(host="127.0.0.1"):
    s = socket.socket()
    s.bind((host, 0))
    p = s.getsockname()[1]
    s.close()
    return p


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def rss_parts_kib(pid):
    """(RssAnon, RssFile) in KiB: the heap and stacks, and mapped files (code pages touched)."""
    parts = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("RssAnon:", "RssFile:")):
                parts[line.split(":")[0]] = int(line.split()[1])
    return parts.get("RssAnon", 0), parts.get("RssFile", 0)


def stable_rss_kib(pid, settle, settle_max):
    """VmRSS once it has settled: after `settle` s, the first time four samples 0.5 s apart
    lie within 1% of each other (at most `settle_max` s); the last sample."""
    time.sleep(settle)
    end = time.monotonic() + settle_max
    samples = [rss_kib(pid)]
    while time.monotonic() < end:
        time.sleep(0.5)
        samples.append(rss_kib(pid))
        last = samples[-4:]
        if len(last) == 4 and max(last) - min(last) <= max(last) // 100:
            break
    return samples[-1]


def backend_connections(host, port):
    """Established TCP connections whose local end is host:port (the backend's side of
    the server's upstream connections), from /proc/net/tcp."""
    want = "%08X:%04X" % (int.from_bytes(socket.inet_aton(host), "little"), port)
    n = 0
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            parts = line.split()
            if parts[1] == want and parts[3] == "01":
                n += 1
    return n


def wait_port(port, deadline=10):
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


def stop(proc):
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def read_http_answer(s):
    got = b""
    while b"\r\n\r\n" not in got or len(got) < got.index(b"\r\n\r\n") + 4 + len(BODY):
        chunk = s.recv(65536)
        if not chunk:
            raise RuntimeError("connection closed before the answer")
        got += chunk


def h2_open(s, request):
    """Preface and SETTINGS both ways (h2c); with `request`, a GET on stream 1 read to its end."""
    import h2.config
    import h2.connection
    import h2.events
    c = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=True))
    c.initiate_connection()
    if request:
        c.send_headers(1, [(":method", "GET"), (":path", "/item"), (":scheme", "http"), (":authority", "bench.local")],
                       end_stream=True)
    s.sendall(c.data_to_send())
    settled = ended = False
    while not settled or (request and not ended):
        data = s.recv(65536)
        if not data:
            raise RuntimeError("connection closed during the HTTP/2 set-up")
        for e in c.receive_data(data):
            if isinstance(e, h2.events.RemoteSettingsChanged):
                settled = True
            elif isinstance(e, h2.events.StreamEnded):
                ended = True
            elif isinstance(e, h2.events.DataReceived):
                c.acknowledge_received_data(e.flow_controlled_length, e.stream_id)
        s.sendall(c.data_to_send())


def ws_open(s, message):
    """A WebSocket handshake; with `message`, one masked 64-byte binary message echoed."""
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall((f"GET /echo HTTP/1.1\r\nHost: bench.local\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    got = b""
    while b"\r\n\r\n" not in got:
        chunk = s.recv(4096)
        if not chunk:
            raise RuntimeError("connection closed during the WebSocket handshake")
        got += chunk
    if not got.startswith(b"HTTP/1.1 101"):
        raise RuntimeError("no 101: " + got[:80].decode(errors="replace"))
    rest = got[got.index(b"\r\n\r\n") + 4:]
    if message:
        payload, mask = os.urandom(64), os.urandom(4)
        s.sendall(bytes([0x82, 0x80 | 64]) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))
        while len(rest) < 2 + 64:
            chunk = s.recv(4096)
            if not chunk:
                raise RuntimeError("connection closed before the echo")
            rest += chunk
        if rest[2:66] != payload:
            raise RuntimeError("wrong echo")


def measure(pid, port, n, settle, protocol):
    """Opens n connections (half make one call), returns bytes per connection."""
    time.sleep(0.5)
    before = rss_kib(pid)
    socks = []
    try:
        for i in range(n):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            socks.append(s)
            if protocol == "h2":
                h2_open(s, i % 2 == 0)
            elif protocol == "websocket":
                ws_open(s, i % 2 == 0)
            elif i % 2 == 0:
                s.sendall(b"GET /item HTTP/1.1\r\nHost: bench.local\r\n\r\n")
                read_http_answer(s)
        time.sleep(settle)
        after = rss_kib(pid)
        return (after - before) * 1024 / n
    finally:
        for s in socks:
            s.close()


def send_all_then_read(socks):
    """Sends one GET on every socket first, then reads every answer: len(socks) requests in
    flight at once."""
    for s in socks:
        s.sendall(b"GET /item HTTP/1.1\r\nHost: bench.local\r\n\r\n")
    for s in socks:
        read_http_answer(s)


def measure_burst(pid, port, n, a, bport):
    """n connections open, half of them after one GET sent all at once; bytes per connection
    once RSS is stable, and the backend connections still held."""
    before = stable_rss_kib(pid, 0.5, a.settle_max)
    socks = []
    try:
        for _ in range(n):
            socks.append(socket.create_connection(("127.0.0.1", port), timeout=30))
        send_all_then_read(socks[::2])
        after = stable_rss_kib(pid, a.settle, a.settle_max)
        return (after - before) * 1024 / n, backend_connections("127.0.0.2", bport)
    finally:
        for s in socks:
            s.close()


def measure_given_back(pid, port, tls_port, n, a):
    """n connections (a.tls of them over TLS), each one GET (in waves), then all closed:
    RSS before, peak (while open) and after (stable again), in KiB."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["http/1.1"])
    # A few TLS calls first, so that "before" has the TLS code's pages too (RssFile).
    for _ in range(5):
        t = ctx.wrap_socket(socket.create_connection(("127.0.0.1", tls_port), timeout=10), server_hostname="bench.local")
        send_all_then_read([t])
        t.close()
    before = stable_rss_kib(pid, 0.5, a.settle_max)
    before_anon, before_files = rss_parts_kib(pid)
    socks = []
    peak = before
    tls_every = max(1, n // max(1, a.tls))
    tls_open = 0
    try:
        for start in range(0, n, a.wave):
            wave = []
            for i in range(start, min(n, start + a.wave)):
                if a.tls and i % tls_every == 0 and tls_open < a.tls:
                    tls_open += 1
                    raw = socket.create_connection(("127.0.0.1", tls_port), timeout=30)
                    s = ctx.wrap_socket(raw, server_hostname="bench.local")
                else:
                    s = socket.create_connection(("127.0.0.1", port), timeout=30)
                socks.append(s)
                wave.append(s)
            send_all_then_read(wave)
            peak = max(peak, rss_kib(pid))
        peak = max(peak, stable_rss_kib(pid, 0.5, a.settle_max))
    finally:
        for s in socks:
            s.close()
    after = stable_rss_kib(pid, a.settle, a.settle_max)
    anon, files = rss_parts_kib(pid)
    print(f"  after: RssAnon {anon / 1024:.1f} MiB, RssFile {files / 1024:.1f} MiB (before: RssAnon {before_anon / 1024:.1f}, "
          f"RssFile {before_files / 1024:.1f})", flush=True)
    return before, peak, after


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--protocol", choices=["http1", "h2", "websocket"], default="http1")
    ap.add_argument("--binary", default=".build/release/quickway")
    ap.add_argument("--connections", type=int, default=0, help="4,000; --burst 8,000; --given-back 12,000")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--settle", type=float, default=1.0)
    ap.add_argument("--settle-max", type=float, default=20.0)
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--burst", action="store_true")
    mode.add_argument("--given-back", action="store_true")
    ap.add_argument("--keepalive", type=int, default=0, help="idle upstream connections per worker (default 64; --burst 32)")
    ap.add_argument("--no-quickway-keepalive", action="store_true", help="for builds without services.*.keepalive")
    ap.add_argument("--tls", type=int, default=2000, help="--given-back: connections over TLS")
    ap.add_argument("--wave", type=int, default=500, help="--given-back: requests sent at once")
    ap.add_argument("--env", action="append", default=[], help="NAME=VALUE for Quickway's environment (MALLOC_ARENA_MAX=1)")
    a = ap.parse_args()
    if (a.burst or a.given_back) and a.protocol != "http1":
        ap.error("--burst and --given-back measure HTTP/1.1")
    if not a.connections:
        a.connections = 8000 if a.burst else 12000 if a.given_back else 4000
    if not a.keepalive:
        a.keepalive = 32 if a.burst else 64
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, a.connections * 3 + 1024)), hard))
    work = tempfile.mkdtemp(prefix="qw-idle-")
    bport, qport, aport, nport = free_port("127.0.0.2"), free_port(), free_port(), free_port()
    qtls, ntls = free_port(), free_port()
    if a.given_back:
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                        "-keyout", f"{work}/key.pem", "-out", f"{work}/cert.pem", "-days", "2", "-subj", "/CN=bench.local",
                        "-addext", "subjectAltName=DNS:bench.local"], check=True, capture_output=True)
    procs = []
    try:
        with open(f"{work}/backend.conf", "w") as f:
            f.write(f"""daemon off; master_process off; worker_processes 1; error_log {work}/backend-error.log; pid {work}/backend.pid;
worker_rlimit_nofile {a.connections + 1024};
events {{ worker_connections {a.connections + 512}; }}
http {{ access_log off; keepalive_timeout 300s; keepalive_requests 1000000; server {{ listen 127.0.0.2:{bport}; location / {{ default_type application/json; return 200 '{BODY}'; }} }} }}
""")
        if a.protocol == "websocket":
            location = f"""location / {{ proxy_pass http://backend; proxy_http_version 1.1; proxy_buffering off;
      proxy_set_header Upgrade $http_upgrade; proxy_set_header Connection "upgrade"; proxy_read_timeout 1h; }}"""
            upstream = f"upstream backend {{ server 127.0.0.2:{bport}; }}"
        else:
            location = f"""location / {{ proxy_pass http://backend; proxy_http_version 1.1; proxy_set_header Connection ""; }}"""
            upstream = f"upstream backend {{ server 127.0.0.2:{bport}; keepalive {a.keepalive}; keepalive_timeout 300s; }}"
        http2 = " http2" if a.protocol == "h2" else ""
        nginx_tls = (f"server {{ listen 127.0.0.1:{ntls} ssl; ssl_certificate {work}/cert.pem; ssl_certificate_key {work}/key.pem; {location} }}"
                     if a.given_back else "")
        with open(f"{work}/nginx.conf", "w") as f:
            f.write(f"""daemon off; master_process off; worker_processes 1; error_log {work}/nginx-error.log; pid {work}/nginx.pid;
worker_rlimit_nofile {a.connections * 3 + 1024};
events {{ worker_connections {a.connections * 2 + 512}; }}
http {{ access_log off; keepalive_timeout 120s; keepalive_requests 1000000; http2_idle_timeout 120s;
  {upstream}
  server {{ listen 127.0.0.1:{nport}{http2}; {location} }} {nginx_tls} }}
""")
        keepalive = "" if a.no_quickway_keepalive else f", keepalive: {a.keepalive}"
        tls_listen = (f"\ntls_listen: {{ listen: 127.0.0.1:{qtls}, alpn: [http/1.1], certificates: [ {{ cert_file: {work}/cert.pem, key_file: {work}/key.pem }} ] }}"
                      if a.given_back else "")
        route_extra = ", websocket: { heartbeat: 10m, idle_timeout: 10m }" if a.protocol == "websocket" else ""
        with open(f"{work}/q.yaml", "w") as f:
            f.write(f"""listen: 127.0.0.1:{qport}
workers: 1
admin: {{ listen: 127.0.0.1:{aport} }}
log: {{ level: warn }}
limits: {{ max_connections: {a.connections + 512}, client_idle_timeout: 120s }}
services: {{ b: {{ host: backend.local, port: {bport}, ips: [127.0.0.2]{keepalive} }} }}{tls_listen}
routes: [ {{ name: all, match: {{ path_prefix: / }}, service: b{route_extra} }} ]
""")
        if a.protocol == "websocket":
            subprocess.run(["cc", "-O2", "-o", f"{work}/ws_load", "scripts/bench/bench_ws_load.c", "-lcrypto"], check=True)
            backend = subprocess.Popen([f"{work}/ws_load", "backend", "127.0.0.2", str(bport)], stdout=subprocess.DEVNULL)
        else:
            backend = subprocess.Popen(["nginx", "-p", work, "-c", f"{work}/backend.conf"])
        procs.append(backend)
        time.sleep(0.3)
        results = {"quickway": [], "nginx": []}
        extra = {"quickway": [], "nginx": []}
        env = dict(os.environ, **dict(e.split("=", 1) for e in a.env))
        for rnd in range(a.rounds):
            for name in ("quickway", "nginx"):
                if name == "quickway":
                    p = subprocess.Popen([a.binary, "serve", "--config", f"{work}/q.yaml"], stderr=open(f"{work}/q.log", "a"), env=env)
                    port, tls_port = qport, qtls
                else:
                    p = subprocess.Popen(["nginx", "-p", work, "-c", f"{work}/nginx.conf"])
                    port, tls_port = nport, ntls
                procs.append(p)
                try:
                    wait_port(port)
                    # A few calls first: both sides have their upstream connection and
                    # their start-up allocations before "before" is read.
                    warm = socket.create_connection(("127.0.0.1", port), timeout=10)
                    for _ in range(20):
                        send_all_then_read([warm])
                    warm.close()
                    if a.burst:
                        per, held = measure_burst(p.pid, port, a.connections, a, bport)
                        extra[name].append(held)
                        note = f", {held} backend connections held"
                    elif a.given_back:
                        before, peak, after = measure_given_back(p.pid, port, tls_port, a.connections, a)
                        extra[name].append((before, peak, after))
                        per = after / before
                        note = f": RSS {before / 1024:.1f} MiB before, {peak / 1024:.1f} at the peak, {after / 1024:.1f} after"
                    else:
                        per = measure(p.pid, port, a.connections, a.settle, a.protocol)
                        note = ""
                finally:
                    stop(p)
                    procs.remove(p)
                results[name].append(per)
                if a.given_back:
                    print(f"round {rnd + 1} {name:<9} after/before {per:.3f}{note}", flush=True)
                else:
                    print(f"round {rnd + 1} {name:<9} {per:8.0f} bytes per idle connection{note}", flush=True)
        q, n = statistics.median(results["quickway"]), statistics.median(results["nginx"])
        if a.given_back:
            print(f"\nmedians of {a.rounds} rounds, {a.connections} connections ({a.tls} TLS) opened, one GET each, closed:")
            for name in ("quickway", "nginx"):
                b, pk, af = (statistics.median(x[i] for x in extra[name]) / 1024 for i in range(3))
                print(f"{name:<9} RSS before {b:6.1f} MiB, peak {pk:6.1f} MiB, after {af:6.1f} MiB, after/before {statistics.median(results[name]):.3f}")
            return
        if a.burst:
            print(f"\nmedians of {a.rounds} rounds, {a.connections} idle HTTP/1.1 connections, half after one GET sent at once "
                  f"(keepalive {a.keepalive}):")
            print(f"backend connections held: quickway {statistics.median(extra['quickway'])}, nginx {statistics.median(extra['nginx'])}")
            print(f"quickway {q:8.0f} bytes/connection\nnginx    {n:8.0f} bytes/connection\nratio quickway/nginx {q / n:.2f}x")
            return
        what = {"http1": "HTTP/1.1 keep-alive connections (half after one proxied GET)",
                "h2": "HTTP/2 (h2c) connections (half after one proxied GET on a stream)",
                "websocket": "WebSocket connections (half after one 64-byte echo)"}[a.protocol]
        print(f"\nmedians of {a.rounds} rounds, {a.connections} idle {what}:")
        print(f"quickway {q:8.0f} bytes/connection\nnginx    {n:8.0f} bytes/connection\nratio quickway/nginx {q / n:.2f}x")
    finally:
        for p in procs:
            stop(p)


if __name__ == "__main__":
    main()
