"""WebSocket benchmark helpers for scripts/bench-websocket.sh, raw sockets only (no
library in the measured path), so the Python side stays as cheap as it can be.

    bench_websocket.py backend HOST PORT
        An echo backend: answers the handshake, echoes every data frame unmasked,
        answers pings and closes. One thread, selectors (epoll). Prints "ready".

    bench_websocket.py client HOST PORT PATH CONNECTIONS SECONDS SIZE
        CONNECTIONS connections, each in a closed loop: send one masked binary message
        of SIZE bytes, wait for its echo, again. Prints
        "messages_per_s p50_ms p99_ms" (round trips, over SECONDS after a 1 s warm-up).
"""
import base64
import hashlib
import os
import selectors
import socket
import struct
import sys
import time

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def parse_frames(buf):
    """Complete frames at the start of buf: [(opcode, payload unmasked)], rest."""
    out = []
    i = 0
    n = len(buf)
    while n - i >= 2:
        b0, b1 = buf[i], buf[i + 1]
        length = b1 & 0x7F
        h = 2
        if length == 126:
            if n - i < 4:
                break
            length = struct.unpack_from("!H", buf, i + 2)[0]
            h = 4
        elif length == 127:
            if n - i < 10:
                break
            length = struct.unpack_from("!Q", buf, i + 2)[0]
            h = 10
        masked = b1 & 0x80
        if masked:
            h += 4
        if n - i < h + length:
            break
        payload = bytes(buf[i + h:i + h + length])
        if masked and length:
            key = buf[i + h - 4:i + h]
            k = (bytes(key) * (length // 4 + 1))[:length]
            payload = (int.from_bytes(payload, "big") ^ int.from_bytes(k, "big")).to_bytes(length, "big")
        out.append((b0 & 0x0F, payload))
        i += h + length
    return out, buf[i:]


def frame(op, payload, mask):
    n = len(payload)
    m = 0x80 if mask else 0
    if n < 126:
        head = struct.pack("!BB", 0x80 | op, m | n)
    elif n < 65536:
        head = struct.pack("!BBH", 0x80 | op, m | 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | op, m | 127, n)
    if not mask:
        return head + payload
    # A zero mask keeps the payload as is (valid: the key is the client's choice).
    return head + b"\0\0\0\0" + payload


def backend(host, port):
    sel = selectors.DefaultSelector()
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((host, port))
    ls.listen(1024)
    ls.setblocking(False)
    sel.register(ls, selectors.EVENT_READ, None)
    state = {}
    print("ready", flush=True)
    while True:
        for key, _ in sel.select():
            s = key.fileobj
            if s is ls:
                c, _ = ls.accept()
                c.setblocking(False)
                c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                state[c] = [b"", False]
                sel.register(c, selectors.EVENT_READ, None)
                continue
            try:
                data = s.recv(262144)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                data = b""
            if not data:
                sel.unregister(s)
                s.close()
                state.pop(s, None)
                continue
            st = state[s]
            st[0] += data
            if not st[1]:
                if b"\r\n\r\n" not in st[0]:
                    continue
                head, st[0] = st[0].split(b"\r\n\r\n", 1)
                if not head.startswith(b"GET"):   # a probe or a stray request
                    s.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                    continue
                k = [l.split(b":", 1)[1].strip() for l in head.split(b"\r\n") if l.lower().startswith(b"sec-websocket-key:")][0]
                accept = base64.b64encode(hashlib.sha1(k + GUID).digest())
                s.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " + accept + b"\r\n\r\n")
                st[1] = True
            frames, st[0] = parse_frames(st[0])
            out = []
            for op, payload in frames:
                if op in (1, 2):
                    out.append(frame(op, payload, False))
                elif op == 9:
                    out.append(frame(10, payload, False))
                elif op == 8:
                    out.append(frame(8, payload[:2], False))
            if out:
                try:
                    s.sendall(b"".join(out))
                except OSError:
                    pass


def client(host, port, path, conns, seconds, size):
    sel = selectors.DefaultSelector()
    payload = os.urandom(size)
    msg = frame(2, payload, True)
    socks = []
    for _ in range(conns):
        s = socket.create_connection((host, port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        key = base64.b64encode(os.urandom(16))
        s.sendall(b"GET " + path.encode() + b" HTTP/1.1\r\nHost: bench\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  b"Sec-WebSocket-Key: " + key + b"\r\nSec-WebSocket-Version: 13\r\n\r\n")
        buf = b""
        while b"\r\n\r\n" not in buf:
            buf += s.recv(4096)
        assert b" 101 " in buf.split(b"\r\n", 1)[0], buf
        s.setblocking(False)
        socks.append(s)
    state = {}
    start = time.monotonic()
    warm_until = start + 1.0
    end = warm_until + seconds
    rtts = []
    count = 0
    for s in socks:
        sel.register(s, selectors.EVENT_READ, None)
        state[s] = [b"", time.monotonic()]
        s.sendall(msg)
    while True:
        now = time.monotonic()
        if now >= end:
            break
        for key, _ in sel.select(timeout=0.5):
            s = key.fileobj
            st = state[s]
            data = s.recv(262144)
            if not data:
                raise SystemExit("connection closed by the proxy")
            st[0] += data
            frames, st[0] = parse_frames(st[0])
            for op, _ in frames:
                if op != 2:
                    continue
                t = time.monotonic()
                if t >= warm_until:
                    rtts.append(t - st[1])
                    count += 1
                st[1] = t
                s.sendall(msg)
    for s in socks:
        s.close()
    rtts.sort()
    p = lambda q: rtts[min(len(rtts) - 1, int(q * len(rtts)))] * 1000 if rtts else 0
    print(f"{count / seconds:.0f} {p(0.5):.3f} {p(0.99):.3f}")


if __name__ == "__main__":
    if sys.argv[1] == "backend":
        backend(sys.argv[2], int(sys.argv[3]))
    else:
        client(sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5]), float(sys.argv[6]), int(sys.argv[7]))
