#!/usr/bin/env python3
"""A batch client using only Python's standard library: sends several calls in one
signed POST to a Quickway batch route (spec/batch.md) and prints each result.

    QW_SECRET=demo-secret-change-me python3 examples/batch_client.py \\
        --url http://127.0.0.1:8080/batch --key demo-app --salt demo-salt-change-me \\
        GET /catalog/items/1  GET /catalog/items/2  'POST /orders/ {"item": 42}'

Each call is `METHOD PATH` (one argument) or `METHOD PATH BODY`; `--ndjson` asks for one
result per line as each call ends. The envelope is signed with the QW1 scheme of
spec/signature.md by examples/qw1_client.py (beside this file): its body hash covers
every call, and every call carries the envelope's key.

As a library:

    from batch_client import BatchClient
    client = BatchClient("http://127.0.0.1:8080/batch", key="demo-app", secret="...", salt="...")
    for r in client.send([{"id": "a", "method": "GET", "path": "/catalog/items/1"}]):
        print(r["id"], r["status"], r.get("body"))
"""
import argparse
import base64
import http.client
import json
import os
import sys
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from qw1_client import authorization as qw1_authorization  # noqa: E402  (spec/signature.md, one signer)


class BatchClient:
    """Sends envelopes to one batch route. `key` None: unsigned (an `auth: optional` route)."""

    def __init__(self, url, key=None, secret=None, salt=None, timeout=30):
        u = urllib.parse.urlsplit(url)
        self.https = u.scheme == "https"
        self.host, self.port = u.hostname, u.port or (443 if self.https else 80)
        self.target = (u.path or "/") + (f"?{u.query}" if u.query else "")
        self.key, self.secret, self.salt, self.timeout = key, secret, salt, timeout

    def _post(self, calls, accept):
        body = json.dumps({"calls": calls}).encode()
        headers = {"Content-Type": "application/json", "Accept": accept}
        if self.key:
            headers["Authorization"] = qw1_authorization(self.key, self.secret, self.salt, "POST", self.target, body)
        cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
        conn = cls(self.host, self.port, timeout=self.timeout)
        conn.request("POST", self.target, body=body, headers=headers)
        return conn, conn.getresponse()

    def send(self, calls):
        """All results, in call order (one JSON answer)."""
        conn, r = self._post(calls, "application/json")
        try:
            data = r.read()
            if r.status != 200:
                raise RuntimeError(f"batch refused: {r.status} {data.decode(errors='replace')}")
            return json.loads(data)["results"]
        finally:
            conn.close()

    def stream(self, calls):
        """Yields each result as its call ends (ndjson)."""
        conn, r = self._post(calls, "application/x-ndjson")
        try:
            if r.status != 200:
                raise RuntimeError(f"batch refused: {r.status} {r.read().decode(errors='replace')}")
            for line in r:
                if line.strip():
                    yield json.loads(line)
        finally:
            conn.close()


def body_of(result):
    """A result's body as bytes, whichever form it came in."""
    if "body_base64" in result:
        return base64.b64decode(result["body_base64"])
    b = result.get("body", "")
    return b.encode() if isinstance(b, str) else json.dumps(b).encode()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True, help="the batch route, e.g. http://127.0.0.1:8080/batch")
    ap.add_argument("--key", help="key id (omit for an unsigned envelope)")
    ap.add_argument("--salt", default="")
    ap.add_argument("--secret-env", default="QW_SECRET", help="environment variable holding the secret")
    ap.add_argument("--ndjson", action="store_true", help="print each result as its call ends")
    ap.add_argument("calls", nargs="+", help="'METHOD PATH' or 'METHOD PATH BODY'")
    a = ap.parse_args()
    calls = []
    for i, spec in enumerate(a.calls):
        parts = spec.split(" ", 2)
        if len(parts) < 2:
            ap.error(f"call {i}: expected 'METHOD PATH [BODY]', got {spec!r}")
        call = {"id": f"c{i}", "method": parts[0].upper(), "path": parts[1]}
        if len(parts) == 3:
            call["body"] = parts[2]
            call["headers"] = {"Content-Type": "application/json"}
        calls.append(call)
    secret = os.environ.get(a.secret_env, "") if a.key else None
    client = BatchClient(a.url, key=a.key, secret=secret, salt=a.salt)
    results = client.stream(calls) if a.ndjson else client.send(calls)
    for r in results:
        print(f"{r['id']} ({r['index']}): {r['status']} {body_of(r).decode(errors='replace')}")


if __name__ == "__main__":
    sys.exit(main())
