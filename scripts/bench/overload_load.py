#!/usr/bin/env python3
"""Overload: a slow backend and an open-loop load generator (scripts/bench.sh --case
overload, Tests/integration/test_overload.py).

The backend serves at most K requests at once, each taking S ms; the rest wait in its
own queue (a semaphore, unbounded, as a thread-pool server's accept queue is), so its
capacity is K / S requests a second and anything offered past it piles up there.

The load is open-loop: requests start at a fixed rate whatever the answers do (a
closed-loop generator such as wrk slows down with the server and never overloads it).
Each request is timed from its scheduled start; the run is bounded by its count (rate x
seconds), a connection bound and a per-request timeout.

    overload_load.py backend --host H --port P --workers K --service-ms S
    overload_load.py load --host H --port P --path /x --rate R --seconds T [--json]
"""
import argparse
import asyncio
import json
import sys
import time


async def serve_backend(host, port, workers, service_ms, ready=None):
    """The slow backend: keep-alive HTTP/1.1, K requests served at once, S ms each (a
    path with /delay/N in it: N ms). Paths under /cached/ answer with Cache-Control:
    max-age=300."""
    gate = asyncio.Semaphore(workers)

    async def conn(reader, writer):
        try:
            while True:
                line = await reader.readline()
                if not line:
                    break
                length = 0
                while (h := await reader.readline()) not in (b"\r\n", b"\n", b""):
                    k, _, v = h.decode("latin-1").partition(":")
                    if k.strip().lower() == "content-length":
                        length = int(v)
                if length:
                    await reader.readexactly(length)
                path = line.split(b" ")[1] if len(line.split(b" ")) > 1 else b"/"
                # .../delay/N: this request takes N ms instead (the tests' long calls).
                wait = int(path.split(b"/delay/")[1].split(b"/")[0]) if b"/delay/" in path else service_ms
                async with gate:
                    await asyncio.sleep(wait / 1000)
                body = b'{"ok":true,"path":"%s"}' % path
                extra = b"Cache-Control: max-age=300\r\n" if path.startswith(b"/cached/") else b""
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n%s"
                             % (extra, len(body), body))
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(conn, host, port, backlog=1024, reuse_address=True)
    if ready:
        ready()
    async with server:
        await server.serve_forever()


class Result:
    __slots__ = ("status", "ms", "retry_after", "body")

    def __init__(self, status, ms, retry_after=None, body=b""):
        self.status, self.ms, self.retry_after, self.body = status, ms, retry_after, body


async def _exchange(reader, writer, request):
    writer.write(request)
    await writer.drain()
    status_line = await reader.readline()
    if not status_line:
        raise ConnectionError("closed before the answer")
    status = int(status_line.split()[1])
    length, retry_after, close = 0, None, False
    while (h := await reader.readline()) not in (b"\r\n", b""):
        k, _, v = h.decode("latin-1").partition(":")
        k = k.strip().lower()
        if k == "content-length":
            length = int(v)
        elif k == "retry-after":
            retry_after = v.strip()
        elif k == "connection" and v.strip().lower() == "close":
            close = True
    body = await reader.readexactly(length) if length else b""
    return status, retry_after, body, close


async def open_loop(host, port, path, rate, seconds, max_conns=1024, timeout=15.0):
    """Starts rate x seconds GETs of `path`, one every 1/rate s, over keep-alive
    connections (at most `max_conns`; a request with none free is counted as status -1,
    not sent). Returns the results, in completion order."""
    request = b"GET %s HTTP/1.1\r\nHost: overload.test\r\n\r\n" % path.encode()
    idle, results = [], []
    opened = 0

    async def one(scheduled):
        nonlocal opened
        if idle:
            reader, writer = idle.pop()
        elif opened >= max_conns:
            results.append(Result(-1, 0.0))
            return
        else:
            opened += 1
            try:
                reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
            except (OSError, asyncio.TimeoutError):
                opened -= 1
                results.append(Result(0, (time.monotonic() - scheduled) * 1000))
                return
        try:
            status, retry_after, body, close = await asyncio.wait_for(_exchange(reader, writer, request), timeout)
        except (OSError, ConnectionError, asyncio.IncompleteReadError, asyncio.TimeoutError, ValueError, IndexError):
            opened -= 1
            writer.close()
            results.append(Result(0, (time.monotonic() - scheduled) * 1000))
            return
        results.append(Result(status, (time.monotonic() - scheduled) * 1000, retry_after, body))
        if close:
            opened -= 1
            writer.close()
        else:
            idle.append((reader, writer))

    tasks = []
    start = time.monotonic()
    for i in range(int(rate * seconds)):
        scheduled = start + i / rate
        delay = scheduled - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.ensure_future(one(scheduled)))
    await asyncio.wait_for(asyncio.gather(*tasks), timeout + seconds)
    for _, writer in idle:
        writer.close()
    return results


def percentile(values, p):
    """Nearest-rank percentile (p in 0..100); None for no values."""
    if not values:
        return None
    s = sorted(values)
    rank = max(1, -(-len(s) * p // 100))
    return s[int(min(len(s), rank)) - 1]


def summary(results):
    ok = [r.ms for r in results if r.status == 200]
    return {"sent": len(results), "admitted": len(ok),
            "shed": sum(1 for r in results if r.status == 503),
            "other": sum(1 for r in results if r.status not in (200, 503)),
            "p50_ms": percentile(ok, 50), "p99_ms": percentile(ok, 99), "max_ms": max(ok) if ok else None}


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("backend")
    b.add_argument("--host", default="127.0.0.2")
    b.add_argument("--port", type=int, required=True)
    b.add_argument("--workers", type=int, default=4)
    b.add_argument("--service-ms", type=float, default=20)
    g = sub.add_parser("load")
    g.add_argument("--host", default="127.0.0.1")
    g.add_argument("--port", type=int, required=True)
    g.add_argument("--path", default="/slow")
    g.add_argument("--rate", type=float, required=True)
    g.add_argument("--seconds", type=float, default=5)
    g.add_argument("--max-conns", type=int, default=1024)
    a = ap.parse_args()
    if a.cmd == "backend":
        try:
            asyncio.run(serve_backend(a.host, a.port, a.workers, a.service_ms, ready=lambda: print("ready", flush=True)))
        except KeyboardInterrupt:
            pass
        return
    results = asyncio.run(open_loop(a.host, a.port, a.path, a.rate, a.seconds, a.max_conns))
    json.dump(summary(results), sys.stdout)
    print()


if __name__ == "__main__":
    main()
