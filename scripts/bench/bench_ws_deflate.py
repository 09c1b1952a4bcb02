#!/usr/bin/env python3
"""What counting inflated sizes costs per WebSocket message (attack round 3, item 11).

Runs the release binary on a WebSocket route in front of Tests/integration/ws_backend.py
(an echo backend on the `websockets` library) and sends N messages of a typical JSON
payload, once with permessage-deflate and once without, in interleaved rounds. Reports
the gateway's CPU per message (each message crosses it twice: in and echoed out), from
/proc/PID/stat, and the difference, which is the inflate-to-count work plus the smaller
frames. Usage: scripts/bench/bench_ws_deflate.py [--messages N] [--rounds R]
"""
import argparse
import json
import os
import select
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "Tests", "integration"))
from harness import admin_healthy as _up, cpu_seconds as cpu, free_port, wait_until  # noqa: E402
from websockets.sync.client import connect  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    host = "127.0.0.2"
    bport = free_port(host)
    backend = subprocess.Popen([sys.executable, os.path.join(ROOT, "Tests", "integration", "ws_backend.py"), host, str(bport)],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    select.select([backend.stdout], [], [], 10)
    backend.stdout.readline()
    port, admin = free_port(), free_port()
    d = tempfile.mkdtemp(prefix="qw-wsdeflate-")
    cfg = os.path.join(d, "q.yaml")
    open(cfg, "w").write(f"""listen: 127.0.0.1:{port}
workers: 1
admin: {{ listen: 127.0.0.1:{admin} }}
log: {{ level: warn, access_log: off }}
services: {{ chat: {{ host: chat.internal, port: {bport}, ips: [{host}] }} }}
routes:
  - {{ name: ws, match: {{ path_prefix: /ws/ }}, service: chat, websocket: {{ max_message_bytes: 1MiB }} }}
""")
    qw = subprocess.Popen([os.path.join(ROOT, ".build", "release", "quickway"), "serve", "--config", cfg],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    payload = json.dumps({"items": [{"id": i, "name": f"item-{i}", "price": i * 1.5, "tags": ["a", "b"]} for i in range(12)]})
    results = {"deflate": [], "plain": []}
    try:
        wait_until(lambda: _up(admin), timeout=15, what="gateway")
        for _ in range(a.rounds):
            for mode in ("deflate", "plain"):
                with connect(f"ws://127.0.0.1:{port}/ws/echo", compression="deflate" if mode == "deflate" else None,
                             ping_interval=None, max_size=None) as ws:
                    ws.send(payload)
                    ws.recv(timeout=5)
                    c0 = cpu(qw.pid)
                    for _ in range(a.messages):
                        ws.send(payload)
                        ws.recv(timeout=5)
                    results[mode].append((cpu(qw.pid) - c0) / a.messages * 1e6)
        med = {m: statistics.median(v) for m, v in results.items()}
        print(f"payload {len(payload)} bytes, {a.messages} messages x {a.rounds} rounds (each message in and out)")
        for m in ("plain", "deflate"):
            print(f"  {m:8s} gateway CPU per message: median {med[m]:.1f} us  (rounds: {', '.join(f'{x:.1f}' for x in results[m])})")
        print(f"  deflate - plain: {med['deflate'] - med['plain']:+.1f} us per message")
    finally:
        qw.terminate()
        qw.wait(20)
        backend.kill()
        backend.wait()



if __name__ == "__main__":
    main()
