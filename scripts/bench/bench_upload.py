#!/usr/bin/env python3
"""Upload benchmark driver (scripts/bench/bench-upload.sh): a sink backend that reads and
drops request bodies (Content-Length or chunked), and the two measures of issue 34.

  sink PORT                      run the sink on 127.0.0.2:PORT (its own process)
  big NAME=URL... --pid NAME=PID --bytes N --rounds R
                                 one upload of N bytes per server per round, interleaved:
                                 wall time, MB/s and the server's RSS before and at peak
  many URL --pid PID --count C --bytes N
                                 C signed uploads of N bytes at once (QW1): RSS before,
                                 at peak and after, and the wall time
"""
import hashlib
import os
import socket
import statistics
import sys
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "examples"))


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def serve_sink(port):
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.2", port))
    srv.listen(256)

    def handle(c):
        f = c.makefile("rb", buffering=1 << 20)
        buf = bytearray(1 << 20)
        view = memoryview(buf)
        try:
            while True:
                line = f.readline()
                if not line:
                    return
                headers = {}
                while True:
                    h = f.readline()
                    if h in (b"\r\n", b""):
                        break
                    k, v = h.decode("latin-1").split(":", 1)
                    headers[k.strip().lower()] = v.strip()
                total = 0
                if headers.get("transfer-encoding", "").lower() == "chunked":
                    while True:
                        size = int(f.readline().split(b";")[0], 16)
                        if size == 0:
                            while f.readline() not in (b"\r\n", b""):
                                pass
                            break
                        left = size
                        while left:
                            n = f.readinto(view[:min(left, len(buf))])
                            if not n:
                                return
                            left -= n
                        total += size
                        f.readline()
                else:
                    left = int(headers.get("content-length", "0"))
                    while left:
                        n = f.readinto(view[:min(left, len(buf))])
                        if not n:
                            return
                        left -= n
                        total += n
                body = b'{"bytes":%d}' % total
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        except OSError:
            pass
        finally:
            c.close()

    while True:
        c, _ = srv.accept()
        threading.Thread(target=handle, args=(c,), daemon=True).start()


def upload(url, total, chunked=False, headers=(), body_piece=None):
    host, _, rest = url.partition("//")[2].partition("/")
    h, _, p = host.partition(":")
    s = socket.create_connection((h, int(p)))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    piece = body_piece or bytes(1 << 20)
    framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {total}"
    extra = "".join(f"{k}: {v}\r\n" for k, v in headers)
    s.sendall(f"POST /{rest} HTTP/1.1\r\nHost: bench\r\n{framing}\r\n{extra}\r\n".encode())
    sent = 0
    while sent < total:
        n = min(len(piece), total - sent)
        if chunked:
            s.sendall(b"%x\r\n" % n)
            s.sendall(piece[:n])
            s.sendall(b"\r\n")
        else:
            s.sendall(piece[:n])
        sent += n
    if chunked:
        s.sendall(b"0\r\n\r\n")
    data = b""
    while b"\r\n\r\n" not in data:
        b = s.recv(65536)
        if not b:
            break
        data += b
    s.close()
    status = int(data.split(b" ", 2)[1]) if data else 0
    return status, data


def sample_peak(pid, stop, out):
    peak = rss_kb(pid)
    while not stop.is_set():
        peak = max(peak, rss_kb(pid))
        time.sleep(0.02)
    out.append(max(peak, rss_kb(pid)))


def big(args):
    servers = [a.split("=", 1) for i, a in enumerate(args) if "=" in a and (i == 0 or args[i - 1] != "--pid")]
    pids = dict(a.split("=", 1) for a in opt(args, "--pid", many=True))
    total = int(opt(args, "--bytes")[0])
    rounds = int(opt(args, "--rounds")[0])
    chunked = "--chunked" in args
    results = {name: [] for name, _ in servers}
    for r in range(rounds):
        for name, url in servers:
            pid = int(pids[name])
            before = rss_kb(pid)
            stop, out = threading.Event(), []
            t = threading.Thread(target=sample_peak, args=(pid, stop, out))
            t.start()
            start = time.monotonic()
            status, answer = upload(url, total, chunked=chunked)
            took = time.monotonic() - start
            stop.set()
            t.join()
            if status != 200 or b'"bytes":%d' % total not in answer:
                sys.exit(f"{name}: upload failed: {answer[:300]!r}")
            results[name].append((total / took / 1e6, out[0] - before, before))
            print(f"round {r + 1} {name}: {total / took / 1e6:.0f} MB/s, RSS {before} KiB -> peak {out[0]} KiB (+{out[0] - before} KiB)", flush=True)
    print(f"\n{total / (1 << 30):.2f} GiB upload{' (chunked)' if chunked else ''}, medians of {rounds} interleaved rounds:")
    base = None
    for name, _ in servers:
        mbs = statistics.median(x[0] for x in results[name])
        grew = statistics.median(x[1] for x in results[name])
        worst = max(x[1] for x in results[name])
        base = base or mbs
        print(f"  {name:10s} {mbs:7.0f} MB/s ({mbs / base:.2f}x the first)  RSS +{grew} KiB median, +{worst} KiB worst")


def many(args):
    url = args[0]
    pid = int(opt(args, "--pid")[0])
    count = int(opt(args, "--count")[0])
    total = int(opt(args, "--bytes")[0])
    import qw1_client
    body = (hashlib.sha256(b"upload").digest() * (total // 32 + 1))[:total]
    path = "/" + url.partition("//")[2].partition("/")[2]
    auths = [qw1_client.authorization("bench", "bench-secret", "bench-salt", "POST", f"{path}{i}", body) for i in range(count)]
    before = rss_kb(pid)
    stop, out = threading.Event(), []
    sampler = threading.Thread(target=sample_peak, args=(pid, stop, out))
    sampler.start()
    statuses = []
    lock = threading.Lock()
    gate = threading.Barrier(count)

    def one(i):
        gate.wait()
        st, _ = upload(f"{url}{i}", total, headers=[("Authorization", auths[i])], body_piece=body[:1 << 20] if total >= 1 << 20 else body)
        with lock:
            statuses.append(st)

    start = time.monotonic()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    took = time.monotonic() - start
    stop.set()
    sampler.join()
    time.sleep(1)
    after = rss_kb(pid)
    ok = statuses.count(200)
    print(f"{count} concurrent signed uploads of {total >> 20} MiB ({count * total >> 20} MiB in all): {ok} answered 200 in {took:.1f} s")
    print(f"  RSS {before} KiB before, {out[0]} KiB at peak (+{out[0] - before} KiB), {after} KiB after")
    if ok != count:
        sys.exit(f"only {ok} of {count} uploads answered 200: {sorted(set(statuses))}")


def opt(args, name, many=False):
    vals = [args[i + 1] for i, a in enumerate(args) if a == name]
    return vals if many else vals[:1]


if __name__ == "__main__":
    cmd, rest = sys.argv[1], sys.argv[2:]
    if cmd == "sink":
        serve_sink(int(rest[0]))
    elif cmd == "big":
        big(rest)
    elif cmd == "many":
        many(rest)
