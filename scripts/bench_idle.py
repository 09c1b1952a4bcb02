#!/usr/bin/env python3
"""Memory per idle keep-alive connection: Quickway against nginx, in one run.

Starts an nginx backend (1 KB JSON) on 127.0.0.2, then in turn Quickway (1 worker,
proxying to it) and nginx (1 worker, `master_process off`, `proxy_pass` with upstream
keepalive). For each it opens --connections client connections to 127.0.0.1, half of
which make one proxied GET first (and then stay open, idle), waits --settle seconds,
and reads the server's resident memory (VmRSS) before and after. Reports bytes per idle
connection, medians of --rounds rounds. Every process is stopped by its PID.

usage: bench_idle.py [--binary PATH] [--connections N] [--rounds R] [--settle S]
"""
import argparse
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


def measure(pid, port, n, settle):
    """Opens n connections (half make one request), returns bytes per connection."""
    time.sleep(0.5)
    before = rss_kib(pid)
    socks = []
    try:
        for i in range(n):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            socks.append(s)
            if i % 2 == 0:
                s.sendall(b"GET /item HTTP/1.1\r\nHost: bench.local\r\n\r\n")
                got = b""
                while b"\r\n\r\n" not in got or len(got) < got.index(b"\r\n\r\n") + 4 + len(BODY):
                    chunk = s.recv(65536)
                    if not chunk:
                        raise RuntimeError("connection closed before the answer")
                    got += chunk
        time.sleep(settle)
        after = rss_kib(pid)
        return (after - before) * 1024 / n
    finally:
        for s in socks:
            s.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default=".build/release/quickway")
    ap.add_argument("--connections", type=int, default=4000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--settle", type=float, default=1.0)
    a = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, a.connections * 2 + 1024)), hard))
    work = tempfile.mkdtemp(prefix="qw-idle-")
    bport, qport, aport, nport = free_port("127.0.0.2"), free_port(), free_port(), free_port()
    procs = []
    try:
        with open(f"{work}/backend.conf", "w") as f:
            f.write(f"""daemon off; master_process off; worker_processes 1; error_log {work}/backend-error.log; pid {work}/backend.pid;
events {{ worker_connections 1024; }}
http {{ access_log off; server {{ listen 127.0.0.2:{bport}; location / {{ default_type application/json; return 200 '{BODY}'; }} }} }}
""")
        with open(f"{work}/nginx.conf", "w") as f:
            f.write(f"""daemon off; master_process off; worker_processes 1; error_log {work}/nginx-error.log; pid {work}/nginx.pid;
worker_rlimit_nofile {a.connections * 2 + 1024};
events {{ worker_connections {a.connections + 512}; }}
http {{ access_log off; keepalive_timeout 120s; keepalive_requests 1000000;
  upstream backend {{ server 127.0.0.2:{bport}; keepalive 64; }}
  server {{ listen 127.0.0.1:{nport}; location / {{ proxy_pass http://backend; proxy_http_version 1.1; proxy_set_header Connection ""; }} }} }}
""")
        with open(f"{work}/q.yaml", "w") as f:
            f.write(f"""listen: 127.0.0.1:{qport}
workers: 1
admin: {{ listen: 127.0.0.1:{aport} }}
log: {{ level: warn }}
limits: {{ max_connections: {a.connections + 512}, client_idle_timeout: 120s }}
services: {{ b: {{ host: backend.local, port: {bport}, ips: [127.0.0.2] }} }}
routes: [ {{ name: all, match: {{ path_prefix: / }}, service: b }} ]
""")
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
                    per = measure(p.pid, port, a.connections, a.settle)
                finally:
                    stop(p)
                    procs.remove(p)
                results[name].append(per)
                print(f"round {rnd + 1} {name:<9} {per:8.0f} bytes per idle connection", flush=True)
        q, n = statistics.median(results["quickway"]), statistics.median(results["nginx"])
        print(f"\nmedians of {a.rounds} rounds, {a.connections} idle keep-alive connections (half after one proxied GET):")
        print(f"quickway {q:8.0f} bytes/connection\nnginx    {n:8.0f} bytes/connection\nratio quickway/nginx {q / n:.2f}x")
    finally:
        for p in procs:
            stop(p)


if __name__ == "__main__":
    main()
