#!/usr/bin/env python3
"""How fast fastest-IP routing follows a change of latencies, and what users paid meanwhile.

Three backends on 127.0.0.2-4 answer every path (probes included) after 40, 5 and 80 ms.
One Quickway (the binary given, 1 worker, probes every 500 ms, switch margin 20%) takes a
steady stream of GETs from C keep-alive clients. After --before seconds the latencies
change at once to 40, 120 and 5 ms (the fastest turns slow, the slowest fast), as in
issue 16's trial. Reported, per round:
- when the first call reached the newly fastest IP, after the change;
- extra latency paid: for each call after the change, the served backend's delay minus
  the best delay then (5 ms), summed (ms x calls), over the --after seconds;
- share of calls after the change that went to the fastest IP.
Bounded: every round lasts --before + --after seconds; the gateway is stopped by its PID.

usage: bench_routing_change.py --binary PATH [--rounds R] [--before S] [--after S] [--concurrency C]
"""
import argparse
import asyncio
import os
import signal
import socket
import statistics
import subprocess
import tempfile
import time

from bench_routing import backend  # the same scripted backend, with its delays passed in

IPS = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
BEFORE = {"127.0.0.2": 40, "127.0.0.3": 5, "127.0.0.4": 80}
AFTER = {"127.0.0.2": 40, "127.0.0.3": 120, "127.0.0.4": 5}


def free_port():
    for _ in range(50):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        ok = True
        for ip in IPS:
            t = socket.socket()
            try:
                t.bind((ip, port))
            except OSError:
                ok = False
            finally:
                t.close()
        if ok:
            return port
    raise RuntimeError("no free port")


async def client(port, stop_at, calls):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    while time.monotonic() < stop_at:
        t0 = time.monotonic()
        writer.write(b"GET /route HTTP/1.1\r\nHost: bench.local\r\n\r\n")
        await writer.drain()
        length, who = 0, "?"
        while (h := await reader.readline()) not in (b"\r\n", b""):
            k, _, v = h.decode().partition(":")
            if k.lower() == "content-length":
                length = int(v)
            elif k.lower() == "x-backend":
                who = v.strip()
        await reader.readexactly(length)
        calls.append((t0, who))
    writer.close()


async def one_round(binary, bport, before, after, concurrency):
    delays = dict(BEFORE)
    servers = [await asyncio.start_server(lambda r, w, ip=ip: backend(r, w, ip, delays), ip, bport) for ip in IPS]
    qport, aport = free_port(), free_port()
    work = tempfile.mkdtemp(prefix="qw-route-")
    conf = os.path.join(work, "q.yaml")
    with open(conf, "w") as f:
        f.write(f"""listen: 127.0.0.1:{qport}
workers: 1
admin: {{ listen: 127.0.0.1:{aport} }}
log: {{ level: warn }}
services:
  api:
    host: api.local
    port: {bport}
    ips: [{", ".join(IPS)}]
    probe: {{ kind: http, path: /health, interval: 500ms, timeout: 1s }}
    selection: {{ strategy: fastest, switch_margin: 20% }}
routes: [ {{ name: all, match: {{ path_prefix: / }}, service: api }} ]
""")
    proc = subprocess.Popen([binary, "serve", "--config", conf], stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "q.log"), "w"))
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", qport), timeout=0.2).close()
                break
            except OSError:
                await asyncio.sleep(0.05)
        calls = []
        start = time.monotonic()
        change_at = start + before
        stop_at = change_at + after

        async def flip():
            await asyncio.sleep(max(0, change_at - time.monotonic()))
            delays.update(AFTER)
        await asyncio.wait_for(asyncio.gather(flip(), *[client(qport, stop_at, calls) for _ in range(concurrency)]), before + after + 30)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for s in servers:
            s.close()
    after_calls = [(t, who) for t, who in calls if t >= change_at]
    first = next((t - change_at for t, who in after_calls if who == "127.0.0.4"), None)
    best = min(AFTER.values())
    extra = sum(AFTER.get(who, best) - best for _, who in after_calls)
    share = sum(1 for _, who in after_calls if who == "127.0.0.4") / max(1, len(after_calls))
    return first, extra, share, len(after_calls)


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--before", type=float, default=8)
    ap.add_argument("--after", type=float, default=12)
    ap.add_argument("--concurrency", type=int, default=4)
    a = ap.parse_args()
    bport = free_port()
    firsts, extras, shares = [], [], []
    for rnd in range(a.rounds):
        first, extra, share, n = await one_round(a.binary, bport, a.before, a.after, a.concurrency)
        firsts.append(first if first is not None else float("inf"))
        extras.append(extra)
        shares.append(share)
        print(f"round {rnd + 1}: first call to the new fastest IP after {first if first is not None else float('inf'):.2f} s; "
              f"extra latency paid {extra:,} ms x calls over {n} calls; {share:.1%} of them to the fastest", flush=True)
    print(f"\nmedians of {a.rounds} rounds ({a.binary}): first call after {statistics.median(firsts):.2f} s, "
          f"extra {statistics.median(extras):,.0f} ms x calls, fastest share {statistics.median(shares):.1%}")


asyncio.run(main())
