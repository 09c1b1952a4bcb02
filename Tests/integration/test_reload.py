"""Config reload: SIGHUP and POST /reload (issues: signed calls, hardening).

Keys and routes change without a restart, an invalid file is refused with the old
config kept, remembered nonces survive, and requests in flight during reloads all
succeed.
"""
import json
import os
import signal
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from harness import ROOT, Backend, Gateway, free_port, wait_until

sys.path.insert(0, os.path.join(ROOT, "examples"))
import qw1_client  # noqa: E402

BASE = """
listen: 127.0.0.1:{PORT}
workers: 2
admin: { listen: 127.0.0.1:{ADMIN} }
auth:
  salt: pepper
  keys:
KEYS
services:
  api: { host: api.internal, port: BACKEND_PORT, ips: [127.0.0.2] }
routes:
  - name: signed
    match: { path_prefix: /signed/ }
    service: api
  - name: open
    match: { path_prefix: /open/ }
    service: api
    auth: off
EXTRA
"""


def config(port, keys, extra=""):
    k = "\n".join(f"    - {{ id: {i}, secret: {s}{', disabled: true' if d else ''} }}" for i, s, d in keys)
    return BASE.replace("BACKEND_PORT", str(port)).replace("KEYS", k).replace("EXTRA", extra)


@pytest.fixture(scope="module")
def backend():
    b = Backend("127.0.0.2", free_port("127.0.0.2"))
    yield b
    b.stop()


def call(g, path, key=None, secret=None, nonce=None):
    headers = {}
    if key:
        headers["Authorization"] = qw1_client.authorization(key, secret, "pepper", "GET", path, nonce=nonce)
    req = urllib.request.Request(g.url(path), headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def admin_post(g, path):
    req = urllib.request.Request(f"http://127.0.0.1:{g.admin_port}{path}", data=b"", method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def write(g, text):
    text = text.replace("{PORT}", str(g.port)).replace("{ADMIN}", str(g.admin_port))
    tmp = g.config_path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, g.config_path)


def test_sighup_applies_new_keys_and_routes_and_keeps_nonces(backend):
    port = backend.server.server_address[1]
    g = Gateway(config(port, [("app-a", "sa", False), ("app-c", "sc", False)]))
    try:
        assert call(g, "/signed/x", "app-a", "sa")[0] == 200
        assert call(g, "/signed/n", "app-c", "sc", nonce="kept-nonce-1")[0] == 200
        assert call(g, "/new/x")[0] == 404
        write(g, config(port, [("app-a", "sa", True), ("app-b", "sb", False), ("app-c", "sc", False)],
                        "  - name: new\n    match: { path_prefix: /new/ }\n    service: api\n    auth: off\n"))
        g.signal(signal.SIGHUP)
        wait_until(lambda: call(g, "/new/x")[0] == 200, what="new route after SIGHUP")
        assert call(g, "/signed/x", "app-b", "sb")[0] == 200
        st, body = call(g, "/signed/x", "app-a", "sa")
        assert st == 401 and json.loads(body)["error"]["code"] == "auth_unknown_key"
        st, body = call(g, "/signed/n", "app-c", "sc", nonce="kept-nonce-1")
        assert st == 401 and json.loads(body)["error"]["code"] == "auth_replayed", "nonces survive a reload"
        assert "new" in g.stats()["routes"]
        assert "reload: applied" in g.logs() and "key app-b added" in g.logs()
        assert "sb" not in g.logs().replace("app-b", ""), "no secret in the log"
    finally:
        assert g.stop() == 0


def test_sighup_with_a_rotated_secret_drops_the_old_signing_key_on_every_worker(backend):
    """Each key's HMAC states are prepared once per config: a reload that changes a key's
    secret (same id) must prepare new ones on every worker, so the old secret stops
    working and the new one works, with nothing of the old config's state kept."""
    port = backend.server.server_address[1]
    g = Gateway(config(port, [("app-a", "old-secret", False)]))
    try:
        assert call(g, "/signed/x", "app-a", "old-secret")[0] == 200
        write(g, config(port, [("app-a", "new-secret", False)]))
        g.signal(signal.SIGHUP)
        # Both workers (a new connection per call, spread over them) take the new secret.
        wait_until(lambda: all(call(g, "/signed/x", "app-a", "new-secret")[0] == 200 for _ in range(8)),
                   what="new secret accepted after SIGHUP")
        for _ in range(16):
            st, body = call(g, "/signed/x", "app-a", "old-secret")
            assert st == 401 and json.loads(body)["error"]["code"] == "auth_bad_signature"
            assert call(g, "/signed/x", "app-a", "new-secret")[0] == 200
    finally:
        assert g.stop() == 0


def test_post_reload_refuses_an_invalid_file_and_keeps_serving(backend):
    port = backend.server.server_address[1]
    g = Gateway(config(port, [("app-a", "sa", False)]))
    try:
        write(g, config(port, [("app-a", "sa", False)]).replace("service: api\n    auth: off", "service: nowhere\n    auth: off"))
        st, doc = admin_post(g, "/reload")
        assert st == 400 and doc["error"]["code"] == "invalid_config"
        assert any(i["path"] == "routes[1].service" and i["line"] for i in doc["error"]["issues"]), doc
        assert call(g, "/open/still")[0] == 200
        assert call(g, "/signed/x", "app-a", "sa")[0] == 200
        write(g, config(port, [("app-a", "sa", False), ("app-z", "sz", False)]))
        st, doc = admin_post(g, "/reload")
        assert st == 200 and "key app-z added" in doc["changes"]
        assert call(g, "/signed/x", "app-z", "sz")[0] == 200
    finally:
        assert g.stop() == 0


def test_reloads_under_load_lose_no_request(backend):
    port = backend.server.server_address[1]
    g = Gateway(config(port, [("app-a", "sa", False)]))
    results = []
    stop = threading.Event()

    def load():
        deadline = time.monotonic() + 20
        while not stop.is_set() and time.monotonic() < deadline and len(results) < 5000:
            results.append(call(g, "/open/load")[0])

    threads = [threading.Thread(target=load) for _ in range(4)]
    try:
        for t in threads:
            t.start()
        wait_until(lambda: len(results) > 20, what="load running")
        for i in range(6):
            extra = "" if i % 2 else "  - name: extra\n    match: { path_prefix: /extra/ }\n    service: api\n    auth: off\n"
            write(g, config(port, [("app-a", "sa", False)], extra))
            if i % 2:
                g.signal(signal.SIGHUP)
            else:
                assert admin_post(g, "/reload")[0] == 200
            time.sleep(0.05)
        wait_until(lambda: len(results) > 200, what="more load after reloads")
    finally:
        stop.set()
        for t in threads:
            t.join(30)
        assert g.stop() == 0
    assert len(results) > 200
    assert set(results) == {200}, {s: results.count(s) for s in set(results)}


# A config nested 20,000 levels deep overflowed the YAML parser's stack and killed the
# gateway on reload (and `quickway check`). It must be refused like any invalid file.
DEEP_FILES = {
    "flow sequences": "[" * 20000 + "\n",
    "flow mappings": "{" * 20000 + "\n",
    "block sequences": "- " * 20000 + "x\n",
    "block mappings": "".join(" " * i + f"k{i}:\n" for i in range(100)) + " " * 100 + "x\n",
}


def test_reload_refuses_a_deeply_nested_file_and_keeps_serving(backend):
    port = backend.server.server_address[1]
    good = config(port, [("app-a", "sa", False)])
    g = Gateway(good)
    try:
        for shape, text in DEEP_FILES.items():
            write(g, text)
            st, doc = admin_post(g, "/reload")
            assert st == 400 and doc["error"]["code"] == "invalid_config", (shape, st, doc)
            issue = doc["error"]["issues"][0]
            assert issue["message"] == "config nests deeper than 64 levels", (shape, doc)
            assert issue["line"] == (65 if shape == "block mappings" else 1), (shape, doc)
            assert g.proc.poll() is None, f"gateway died on {shape}"
            assert call(g, "/open/still")[0] == 200
            assert call(g, "/signed/x", "app-a", "sa")[0] == 200
        # SIGHUP with a deep file: logged, kept.
        write(g, DEEP_FILES["flow sequences"])
        g.signal(signal.SIGHUP)
        wait_until(lambda: "nests deeper than 64 levels" in g.logs(), what="SIGHUP reload refused")
        assert g.proc.poll() is None and call(g, "/open/after-sighup")[0] == 200
        # A file over the size limit is refused too, and a good file applies again.
        write(g, "# padding\n" * (500 * 1024))
        st, doc = admin_post(g, "/reload")
        assert st == 400 and "larger than 4MiB" in doc["error"]["issues"][0]["message"], doc
        write(g, good.replace("    auth: off\n", "    auth: off\n  - name: back\n    match: { path_prefix: /back/ }\n    service: api\n    auth: off\n", 1))
        st, doc = admin_post(g, "/reload")
        assert st == 200 and "route back added" in doc["changes"], doc
        assert call(g, "/back/x")[0] == 200
    finally:
        assert g.stop() == 0, g.logs()


@pytest.mark.parametrize("shape", sorted(DEEP_FILES))
def test_check_refuses_a_deeply_nested_file(shape, tmp_path):
    import subprocess
    from harness import quickway_binary
    path = tmp_path / "deep.yaml"
    path.write_text(DEEP_FILES[shape])
    r = subprocess.run([quickway_binary(), "check", "--config", str(path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, (r.returncode, r.stderr[-2000:])
    line = 65 if shape == "block mappings" else 1
    assert f"{path}:{line}: config nests deeper than 64 levels" in r.stderr, r.stderr[-2000:]
