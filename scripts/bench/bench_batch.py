#!/usr/bin/env python3
"""Batch calls against one connection's worth of separate calls, over a slow link (issue 34).

Starts the release gateway (one worker) with an `auth: off` API route and a batch route, an
asyncio backend that answers at once (a 1 KiB JSON body), and a TCP relay on 127.0.0.3
that delays every piece of data by DELAY ms in each direction (a phone's round trip:
2 x DELAY). Then, in interleaved rounds, on connections opened and warmed beforehand:

- batch:  one HTTP/1.1 POST carrying N GETs (spec/batch.md), one JSON answer;
- http1:  N GETs one after another on one keep-alive HTTP/1.1 connection (no pipelining,
          as browsers and app HTTP stacks do);
- http2:  N GETs as N concurrent streams on one h2c connection (python-hyper's h2).

For each: the wall time from the first byte sent to the last answer received (median and
spread over the rounds), and the gateway's CPU time per call (the sum of its threads'
run time from /proc/PID/task/*/schedstat, over that case's rounds). Bounded in rounds and
time; the processes it starts are stopped by PID.

usage: scripts/bench/bench_batch.py [--calls 10] [--delay-ms 50] [--rounds 20] [--bin .build/release/quickway]
"""
import argparse
import asyncio
import glob
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import h2.config
import h2.connection
import h2.events

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def free_port(host):
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def cpu_ns(pid):
    """Run time of every thread of `pid`, in ns (schedstat's first field)."""
    total = 0
    for f in glob.glob(f"/proc/{pid}/task/*/schedstat"):
        try:
            with open(f) as fh:
                total += int(fh.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total


# MARK: backend and delaying relay

BODY = json.dumps({"item": 1, "pad": "x" * 1000}).encode()


async def backend(reader, writer):
    try:
        while True:
            line = await reader.readline()
            if not line:
                break
            length = 0
            while (h := await reader.readline()) not in (b"\r\n", b""):
                if h.lower().startswith(b"content-length:"):
                    length = int(h.split(b":")[1])
            if length:
                await reader.readexactly(length)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY))
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


def relay_factory(target, delay):
    """Each connection to the relay is piped to `target`, every piece held `delay` s each way."""
    async def pipe(src, dst):
        loop = asyncio.get_running_loop()
        try:
            while data := await src.read(65536):
                loop.call_later(delay, dst.write, data)
        except ConnectionError:
            pass
        finally:
            loop.call_later(delay + 0.001, dst.close)

    async def handle(reader, writer):
        try:
            up_r, up_w = await asyncio.open_connection(*target)
            await asyncio.gather(pipe(reader, up_w), pipe(up_r, writer))
        except (asyncio.CancelledError, ConnectionError):
            pass   # the run is over
    return handle


# MARK: the three clients

async def read_response(reader):
    """One HTTP/1.1 answer with Content-Length or chunked framing: its body."""
    status = await reader.readline()
    assert status.startswith(b"HTTP/1.1 200"), status
    length, chunked = None, False
    while (h := await reader.readline()) != b"\r\n":
        k, _, v = h.partition(b":")
        if k.lower() == b"content-length":
            length = int(v)
        if k.lower() == b"transfer-encoding" and b"chunked" in v.lower():
            chunked = True
    if not chunked:
        return await reader.readexactly(length)
    body = b""
    while (size := int((await reader.readline()).split(b";")[0], 16)) > 0:
        body += await reader.readexactly(size)
        await reader.readline()
    await reader.readline()
    return body


async def run_batch(conn, n):
    reader, writer = conn
    envelope = json.dumps({"calls": [{"method": "GET", "path": f"/api/item/{i}"} for i in range(n)]}).encode()
    writer.write(b"POST /batch HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                 % (len(envelope), envelope))
    results = json.loads(await read_response(reader))["results"]
    assert len(results) == n and all(r["status"] == 200 for r in results), results


async def run_http1(conn, n):
    reader, writer = conn
    for i in range(n):
        writer.write(b"GET /api/item/%d HTTP/1.1\r\nHost: bench\r\n\r\n" % i)
        await read_response(reader)


class H2:
    def __init__(self, reader, writer):
        self.reader, self.writer = reader, writer
        self.conn = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=True))
        self.conn.initiate_connection()
        self.writer.write(self.conn.data_to_send())

    async def get_all(self, paths):
        ended = {}
        for p in paths:
            sid = self.conn.get_next_available_stream_id()
            self.conn.send_headers(sid, [(":method", "GET"), (":path", p), (":scheme", "http"), (":authority", "bench")], end_stream=True)
            ended[sid] = False
        self.writer.write(self.conn.data_to_send())
        while not all(ended.values()):
            data = await self.reader.read(65536)
            assert data, "connection closed"
            for ev in self.conn.receive_data(data):
                if isinstance(ev, h2.events.DataReceived):
                    self.conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                elif isinstance(ev, h2.events.StreamEnded) and ev.stream_id in ended:
                    ended[ev.stream_id] = True
                elif isinstance(ev, h2.events.StreamReset):
                    raise AssertionError(f"stream {ev.stream_id} reset")
            out = self.conn.data_to_send()
            if out:
                self.writer.write(out)


async def main_async(a, gateway_port, pid):
    loop = asyncio.get_running_loop()
    relay_host = "127.0.0.3"
    relay_port = free_port(relay_host)
    relay = await asyncio.start_server(relay_factory(("127.0.0.1", gateway_port), a.delay_ms / 1000), relay_host, relay_port)
    h1_batch = await asyncio.open_connection(relay_host, relay_port)
    h1_plain = await asyncio.open_connection(relay_host, relay_port)
    r2, w2 = await asyncio.open_connection(relay_host, relay_port)
    client2 = H2(r2, w2)
    paths = [f"/api/item/{i}" for i in range(a.calls)]
    cases = {
        "batch": lambda: run_batch(h1_batch, a.calls),
        "http1": lambda: run_http1(h1_plain, a.calls),
        "http2": lambda: client2.get_all(paths),
    }
    for c in cases.values():   # warm: connections, the gateway's upstream pool
        await asyncio.wait_for(c(), 30)
    # What the gateway spends doing nothing (its sweeps, probes, admin loop), per second:
    # taken off each case's CPU for the time it ran, so a slow case is not charged for idling.
    idle_before = cpu_ns(pid)
    await asyncio.sleep(2)
    idle_ns_per_s = (cpu_ns(pid) - idle_before) / 2
    walls = {k: [] for k in cases}
    cpu = {k: 0 for k in cases}
    deadline = loop.time() + a.max_seconds
    for _ in range(a.rounds):
        for name, c in cases.items():
            before = cpu_ns(pid)
            t0 = time.monotonic()
            await asyncio.wait_for(c(), 30)
            walls[name].append((time.monotonic() - t0) * 1000)
            cpu[name] += cpu_ns(pid) - before
        if loop.time() > deadline:
            break
    for _, w in (h1_batch, h1_plain, (r2, w2)):
        w.close()
    relay.close()
    rounds = len(walls["batch"])
    print(f"{a.calls} GETs per round, {a.delay_ms} ms added each way (round trip {2 * a.delay_ms} ms), {rounds} rounds, 1 worker;"
          f" gateway idle: {idle_ns_per_s / 1000:.0f} us CPU/s")
    print(f"{'case':8} {'median ms':>10} {'min ms':>8} {'max ms':>8} {'CPU us/call':>12} {'less idle':>10}")
    for name in cases:
        w = walls[name]
        calls = rounds * a.calls
        net = cpu[name] - idle_ns_per_s * sum(w) / 1000
        print(f"{name:8} {statistics.median(w):10.1f} {min(w):8.1f} {max(w):8.1f} {cpu[name] / 1000 / calls:12.1f} {net / 1000 / calls:10.1f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--delay-ms", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--max-seconds", type=float, default=120)
    ap.add_argument("--bin", default=os.path.join(ROOT, ".build", "release", "quickway"))
    a = ap.parse_args()

    async def serve_backend(port, ready):
        server = await asyncio.start_server(backend, "127.0.0.2", port)
        ready.set()
        async with server:
            await server.serve_forever()

    backend_port = free_port("127.0.0.2")
    gateway_port, admin_port = free_port("127.0.0.1"), free_port("127.0.0.1")
    d = tempfile.mkdtemp(prefix="qw-bench-batch-")
    config = os.path.join(d, "config.yaml")
    with open(config, "w") as f:
        f.write(f"""listen: 127.0.0.1:{gateway_port}
workers: 1
admin: {{ listen: 127.0.0.1:{admin_port} }}
log: {{ level: warn, access_log: off }}
services:
  api: {{ host: api.internal, port: {backend_port}, ips: [127.0.0.2] }}
routes:
  - {{ name: batch, match: {{ path_prefix: /batch }}, batch: {{ max_calls: 100, timeout: 10s }}, auth: off }}
  - {{ name: api, match: {{ path_prefix: /api/ }}, service: api, auth: off }}
""")
    proc = subprocess.Popen([a.bin, "serve", "--config", config], stdout=subprocess.DEVNULL, stderr=open(os.path.join(d, "log"), "wb"))
    try:
        async def run():
            ready = asyncio.Event()
            b = asyncio.create_task(serve_backend(backend_port, ready))
            await ready.wait()
            end = time.monotonic() + 15
            while time.monotonic() < end:   # the gateway's port accepts
                try:
                    _, w = await asyncio.open_connection("127.0.0.1", gateway_port)
                    w.close()
                    break
                except OSError:
                    await asyncio.sleep(0.05)
            await main_async(a, gateway_port, proc.pid)
            b.cancel()
        asyncio.run(run())
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    sys.exit(main())
