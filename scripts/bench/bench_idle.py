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

usage: bench_idle.py [--protocol http1|h2|websocket] [--binary PATH] [--connections N]
                     [--rounds R] [--settle S]
"""
import argparse
import base64
import os
import resource
import signal
import socket
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--protocol", choices=["http1", "h2", "websocket"], default="http1")
    ap.add_argument("--binary", default=".build/release/quickway")
    ap.add_argument("--connections", type=int, default=4000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--settle", type=float, default=1.0)
    a = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, a.connections * 3 + 1024)), hard))
    work = tempfile.mkdtemp(prefix="qw-idle-")
    bport, qport, aport, nport = free_port("127.0.0.2"), free_port(), free_port(), free_port()
    procs = []
    try:
        with open(f"{work}/backend.conf", "w") as f:
            f.write(f"""daemon off; master_process off; worker_processes 1; error_log {work}/backend-error.log; pid {work}/backend.pid;
events {{ worker_connections 1024; }}
http {{ access_log off; server {{ listen 127.0.0.2:{bport}; location / {{ default_type application/json; return 200 '{BODY}'; }} }} }}
""")
        if a.protocol == "websocket":
            location = f"""location / {{ proxy_pass http://backend; proxy_http_version 1.1; proxy_buffering off;
      proxy_set_header Upgrade $http_upgrade; proxy_set_header Connection "upgrade"; proxy_read_timeout 1h; }}"""
            upstream = f"upstream backend {{ server 127.0.0.2:{bport}; }}"
        else:
            location = f"""location / {{ proxy_pass http://backend; proxy_http_version 1.1; proxy_set_header Connection ""; }}"""
            upstream = f"upstream backend {{ server 127.0.0.2:{bport}; keepalive 64; }}"
        http2 = " http2" if a.protocol == "h2" else ""
        with open(f"{work}/nginx.conf", "w") as f:
            f.write(f"""daemon off; master_process off; worker_processes 1; error_log {work}/nginx-error.log; pid {work}/nginx.pid;
worker_rlimit_nofile {a.connections * 3 + 1024};
events {{ worker_connections {a.connections * 2 + 512}; }}
http {{ access_log off; keepalive_timeout 120s; keepalive_requests 1000000; http2_idle_timeout 120s;
  {upstream}
  server {{ listen 127.0.0.1:{nport}{http2}; {location} }} }}
""")
        route_extra = ", websocket: { heartbeat: 10m, idle_timeout: 10m }" if a.protocol == "websocket" else ""
        with open(f"{work}/q.yaml", "w") as f:
            f.write(f"""listen: 127.0.0.1:{qport}
workers: 1
admin: {{ listen: 127.0.0.1:{aport} }}
log: {{ level: warn }}
limits: {{ max_connections: {a.connections + 512}, client_idle_timeout: 120s }}
services: {{ b: {{ host: backend.local, port: {bport}, ips: [127.0.0.2] }} }}
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
        for rnd in range(a.rounds):
            for name in ("quickway", "nginx"):
                if name == "quickway":
                    p = subprocess.Popen([a.binary, "serve", "--config", f"{work}/q.yaml"], stderr=open(f"{work}/q.log", "a"))
                    port = qport
                else:
                    p = subprocess.Popen(["nginx", "-p", work, "-c", f"{work}/nginx.conf"])
                    port = nport
                procs.append(p)
                try:
                    wait_port(port)
                    per = measure(p.pid, port, a.connections, a.settle, a.protocol)
                finally:
                    stop(p)
                    procs.remove(p)
                results[name].append(per)
                print(f"round {rnd + 1} {name:<9} {per:8.0f} bytes per idle connection", flush=True)
        q, n = statistics.median(results["quickway"]), statistics.median(results["nginx"])
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
