#!/usr/bin/env python3
"""Routing benchmark helper (run by scripts/bench.sh --case routing).

Starts three backends on 127.0.0.2-4 that answer after 2, 20 and 50 ms and name
themselves in an X-Backend header, then for each proxy and each round sends a bounded
number of GETs from C concurrent keep-alive clients, and reports median and p99 client
latency and the share of calls each backend got.

usage: bench_routing.py --port P --requests N --concurrency C --rounds R NAME=HOST:PORT ...
"""
import argparse
import asyncio
import statistics
import time

DELAYS = {"127.0.0.2": 2, "127.0.0.3": 20, "127.0.0.4": 50}


async def backend(reader, writer, ip, delays=DELAYS):
    """Answers each request after `delays[ip]` ms (read per request, so a caller may
    change it while it runs), naming itself in X-Backend."""
    try:
        while True:
            line = await reader.readline()
            if not line:
                break
            while (await reader.readline()) not in (b"\r\n", b""):
                pass
            await asyncio.sleep(delays[ip] / 1000)
            body = b'{"ok":true}'
            writer.write(b"HTTP/1.1 200 OK\r\nX-Backend: %s\r\nContent-Length: %d\r\n\r\n%s" % (ip.encode(), len(body), body))
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


async def client(host, port, n, latencies, shares):
    reader, writer = await asyncio.open_connection(host, port)
    for _ in range(n):
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
        latencies.append((time.monotonic() - t0) * 1000)
        shares[who] = shares.get(who, 0) + 1
    writer.close()


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup-seconds", type=float, default=3)
    ap.add_argument("proxies", nargs="+")
    a = ap.parse_args()
    servers = [await asyncio.start_server(lambda r, w, ip=ip: backend(r, w, ip), ip, a.port) for ip in DELAYS]
    await asyncio.sleep(a.warmup_seconds)  # let probes score every IP
    results = {}
    for rnd in range(a.rounds):
        for spec in a.proxies:
            name, addr = spec.split("=", 1)
            host, port = addr.rsplit(":", 1)
            lat, shares = [], {}
            per = a.requests // a.concurrency
            await asyncio.wait_for(asyncio.gather(*[client(host, int(port), per, lat, shares) for _ in range(a.concurrency)]), 120)
            lat.sort()
            r = results.setdefault(name, {"p50": [], "p99": [], "share": []})
            r["p50"].append(lat[len(lat) // 2]); r["p99"].append(lat[int(len(lat) * 0.99)])
            total = sum(shares.values())
            r["share"].append({ip: shares.get(ip, 0) / total for ip in DELAYS})
            print(f"round {rnd + 1} {name:<9} p50 {r['p50'][-1]:6.1f} ms  p99 {r['p99'][-1]:6.1f} ms  share "
                  + "  ".join(f"{ip}({DELAYS[ip]}ms) {shares.get(ip, 0) / total:5.1%}" for ip in DELAYS), flush=True)
    for s in servers:
        s.close()
    print(f"\n{'routing':<10}{'p50 ms':>8}{'p99 ms':>8}   share per backend (2 ms / 20 ms / 50 ms), medians of {a.rounds} rounds, "
          f"{a.requests} GETs from {a.concurrency} keep-alive clients")
    for name, r in results.items():
        sh = [statistics.median(x[ip] for x in r["share"]) for ip in DELAYS]
        print(f"{name:<10}{statistics.median(r['p50']):>8.1f}{statistics.median(r['p99']):>8.1f}   " + " / ".join(f"{v:.1%}" for v in sh))


if __name__ == "__main__":
    asyncio.run(main())
