#!/usr/bin/env python3
"""Merging benchmark helper (run by scripts/bench/bench-cache.sh).

Starts a backend that answers after a fixed delay and counts hits per path, then for
each proxy given and each round sends N identical GETs for a cold key at once (all
connections opened first) and reports backend hits and client latency percentiles.
Everything is asyncio on loopback, bounded in count and time.

usage: bench_merge.py --backend HOST:PORT --delay-ms 50 --n 200 --rounds 5 NAME=URL_PREFIX ...
"""
import argparse
import asyncio
import json
import statistics
import time

hits = {}


async def handle_backend(reader, writer, delay):
    try:
        while True:
            line = await reader.readline()
            if not line:
                break
            path = line.split()[1].decode()
            close = False
            while (h := await reader.readline()) not in (b"\r\n", b""):
                close = close or h.lower().startswith(b"connection: close")
            hits[path] = hits.get(path, 0) + 1
            await asyncio.sleep(delay)
            body = json.dumps({"path": path, "pad": "x" * 900}).encode()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            await writer.drain()
            if close:
                break
    except (ConnectionError, IndexError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


async def one_request(host, port, path, start_event, latencies, statuses):
    reader, writer = await asyncio.open_connection(host, port)
    await start_event.wait()
    t0 = time.monotonic()
    writer.write(f"GET {path} HTTP/1.1\r\nHost: bench.local\r\nConnection: close\r\n\r\n".encode())
    await writer.drain()
    status = await reader.readline()
    await reader.read()  # until close
    latencies.append((time.monotonic() - t0) * 1000)
    statuses.append(int(status.split()[1]) if status else 0)
    writer.close()


async def burst(url_prefix, path, n):
    host_port = url_prefix.split("//", 1)[1].split("/", 1)[0]
    host, port = host_port.rsplit(":", 1)
    prefix = "/" + url_prefix.split("//", 1)[1].split("/", 1)[1] if "/" in url_prefix.split("//", 1)[1] else ""
    start = asyncio.Event()
    latencies, statuses = [], []
    tasks = [asyncio.create_task(one_request(host, int(port), prefix.rstrip("/") + path, start, latencies, statuses)) for _ in range(n)]
    await asyncio.sleep(0.3)  # all connections open before the burst
    start.set()
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=30)
    return latencies, statuses


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", required=True)
    ap.add_argument("--delay-ms", type=float, default=50)
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("proxies", nargs="+")
    a = ap.parse_args()
    bhost, bport = a.backend.rsplit(":", 1)
    server = await asyncio.start_server(lambda r, w: handle_backend(r, w, a.delay_ms / 1000), bhost, int(bport), backlog=1024)
    results = {}
    for rnd in range(a.rounds):
        for spec in a.proxies:  # interleaved: every proxy once per round
            name, url = spec.split("=", 1)
            path = f"/merge/{name}/{rnd}-{time.time_ns()}"
            lat, st = await burst(url, path, a.n)
            backend_path = [p for p in hits if p.endswith(path.split("/merge/", 1)[1])]
            h = sum(hits[p] for p in backend_path)
            lat.sort()
            r = results.setdefault(name, {"hits": [], "p50": [], "p99": [], "ok": []})
            r["hits"].append(h)
            r["p50"].append(lat[len(lat) // 2])
            r["p99"].append(lat[min(len(lat) - 1, int(len(lat) * 0.99))])
            r["ok"].append(sum(1 for s in st if s == 200))
            print(f"round {rnd + 1} {name:<10} backend hits {h:>3}  p50 {lat[len(lat) // 2]:7.1f} ms  p99 {r['p99'][-1]:7.1f} ms  200s {r['ok'][-1]}/{a.n}", flush=True)
    server.close()
    print()
    print(f"{'merge case':<12}{'backend hits':>14}{'p50 ms':>10}{'p99 ms':>10}{'200s':>8}   (medians of {a.rounds} rounds, {a.n} identical GETs, {a.delay_ms:.0f} ms backend)")
    for name, r in results.items():
        print(f"{name:<12}{statistics.median(r['hits']):>14.0f}{statistics.median(r['p50']):>10.1f}{statistics.median(r['p99']):>10.1f}{statistics.median(r['ok']):>8.0f}")
    if "direct" in results:
        base = statistics.median(results["direct"]["p99"])
        for name, r in results.items():
            if name != "direct":
                print(f"{name}: p99 {statistics.median(r['p99']) - base:+.1f} ms over the backend's own p99 (target for quickway: within 10 ms)")


asyncio.run(main())
