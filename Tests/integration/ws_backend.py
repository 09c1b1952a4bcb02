"""A WebSocket backend for the integration tests and the benchmark, on the `websockets`
package (PyPI): an implementation independent of the gateway's.

    python3 ws_backend.py HOST PORT

Paths: anything echoes each message back; `/headers` first sends the handshake's
request headers as JSON; `/path` first sends the request target it was asked for; `/ping` first pings the client and sends "pong-ok" once the
pong is back. Prints "ready" once listening.
"""
import asyncio
import json
import sys

from websockets.asyncio.server import serve


async def handler(ws):
    path = ws.request.path
    if path.split("?")[0].endswith("/path"):
        await ws.send(path)
    if path.endswith("/headers"):
        await ws.send(json.dumps({k.lower(): v for k, v in ws.request.headers.raw_items()}))
    if path.endswith("/ping"):
        waiter = await ws.ping(b"from-backend")
        await asyncio.wait_for(waiter, 5)
        await ws.send("pong-ok")
    async for message in ws:
        await ws.send(message)


async def main(host, port):
    async with serve(handler, host, port, max_size=None, ping_interval=None, close_timeout=2) as server:
        print("ready", flush=True)
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
