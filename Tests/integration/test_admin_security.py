"""Admin listener against cross-site requests (issue: request integrity).

spec/admin-and-errors.md: `POST` endpoints refuse (403) any request carrying an `Origin`
header (browsers send it on every cross-site POST; curl and scripts do not), so a web
page cannot drive them; with `admin.token_env` set they also need
`Authorization: Bearer <token>` (401 otherwise). `GET` endpoints stay open.
"""
import http.client
import json
import os
import subprocess

import pytest

from harness import Backend, Gateway, free_port, http_call, quickway_binary

CONFIG = """
listen: 127.0.0.1:{PORT}
workers: 2
admin: ADMIN_SECTION
services:
  api: { host: api.internal, port: BACKEND_PORT, ips: [127.0.0.2] }
routes:
  - name: cached
    match: { path_prefix: /l/ }
    service: api
    strip_prefix: true
    cache: { ttl: 60s }
EXTRA
"""

TOKEN = "t0k3n-for-tests-7f3a9c"
OTHER_TOKEN = "second-token-b81d22"
EVIL_ORIGIN = "http://evil.example"


@pytest.fixture(scope="module")
def backend():
    b = Backend("127.0.0.2", free_port("127.0.0.2"))
    yield b
    b.stop()


def config(backend, admin="{ listen: 127.0.0.1:{ADMIN} }", extra=""):
    port = backend.server.server_address[1]
    return CONFIG.replace("ADMIN_SECTION", admin).replace("BACKEND_PORT", str(port)).replace("EXTRA", extra)


def admin(g, method, path, body=None, headers=None):
    """One admin request on its own connection: (status, lower-case headers, JSON or None)."""
    conn = http.client.HTTPConnection("127.0.0.1", g.admin_port, timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        raw = r.read()
        try:
            doc = json.loads(raw)
        except ValueError:
            doc = None
        return r.status, {k.lower(): v for k, v in r.getheaders()}, doc
    finally:
        conn.close()


def cross_site(extra=None):
    """What a web page's `fetch(..., {method: "POST", mode: "no-cors"})` sends."""
    return {"Content-Type": "text/plain;charset=UTF-8", "Origin": EVIL_ORIGIN, **(extra or {})}


def x_cache(g, path):
    st, h, _ = http_call(g, "GET", path)
    assert st == 200
    return h["x-cache"]


def rewrite(g, text):
    text = text.replace("{PORT}", str(g.port)).replace("{ADMIN}", str(g.admin_port))
    tmp = g.config_path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, g.config_path)


def assert_error(st, h, doc, status, code):
    assert st == status, (st, doc)
    assert h["content-type"] == "application/json"
    assert doc["error"]["status"] == status and doc["error"]["code"] == code, doc
    assert doc["error"]["request_id"]


def test_foreign_origin_cannot_purge_or_reload_without_token(backend):
    g = Gateway(config(backend))
    try:
        assert x_cache(g, "/l/hdr?id=origin") == "MISS"
        assert x_cache(g, "/l/hdr?id=origin") == "HIT"

        st, h, doc = admin(g, "POST", "/cache/purge", b'{"all": true}', cross_site())
        assert_error(st, h, doc, 403, "forbidden")
        assert x_cache(g, "/l/hdr?id=origin") == "HIT", "a refused purge purges nothing"
        # Any Origin, even the admin listener's own or "null" (sandboxed pages).
        for origin in ["null", f"http://127.0.0.1:{g.admin_port}"]:
            st, h, doc = admin(g, "POST", "/cache/purge", b'{"prefix": "/"}', cross_site({"Origin": origin}))
            assert_error(st, h, doc, 403, "forbidden")
        assert x_cache(g, "/l/hdr?id=origin") == "HIT"

        # /reload with an Origin: refused, and the new route is not applied.
        rewrite(g, config(backend, extra="  - name: added\n    match: { path_prefix: /added/ }\n    service: api\n"))
        st, h, doc = admin(g, "POST", "/reload", b"", cross_site())
        assert_error(st, h, doc, 403, "forbidden")
        assert http_call(g, "GET", "/added/x")[0] == 404
        assert x_cache(g, "/l/hdr?id=origin") == "HIT"

        # Scripts (no Origin) still work without a token when none is configured.
        st, _, doc = admin(g, "POST", "/reload", b"")
        assert st == 200 and "route added added" in doc["changes"], doc
        assert http_call(g, "GET", "/added/x")[0] == 200
        st, _, doc = admin(g, "POST", "/cache/purge", b'{"all": true}', {"Content-Type": "application/json"})
        assert st == 200 and doc["purged"] >= 1, doc
        assert x_cache(g, "/l/hdr?id=origin") == "MISS"

        # GET endpoints stay open, Origin or not (read-only).
        for path in ["/stats", "/health", "/metrics", "/dashboard"]:
            assert admin(g, "GET", path, headers={"Origin": EVIL_ORIGIN})[0] == 200, path
    finally:
        assert g.stop() == 0, g.logs()


def test_token_env_requires_the_bearer_token_on_posts(backend):
    g = Gateway(config(backend, "{ listen: 127.0.0.1:{ADMIN}, token_env: QW_TEST_ADMIN_TOKEN }"),
                env={"QW_TEST_ADMIN_TOKEN": TOKEN})
    try:
        assert x_cache(g, "/l/hdr?id=token") == "MISS"
        assert x_cache(g, "/l/hdr?id=token") == "HIT"
        refused = [
            {},
            {"Authorization": "Bearer wrong-token"},
            {"Authorization": f"Bearer {TOKEN}x"},
            {"Authorization": f"Bearer {TOKEN[:-1]}"},
            {"Authorization": TOKEN},
            {"Authorization": f"Basic {TOKEN}"},
            {"Authorization": "Bearer "},
        ]
        for headers in refused:
            for path, body in [("/cache/purge", b'{"all": true}'), ("/reload", b"")]:
                st, h, doc = admin(g, "POST", path, body, {"Content-Type": "application/json", **headers})
                assert_error(st, h, doc, 401, "admin_unauthorized")
                assert h["www-authenticate"] == "Bearer", h
                assert TOKEN not in json.dumps(doc)
        assert x_cache(g, "/l/hdr?id=token") == "HIT", "refused purges purge nothing"

        # The right token, but from a browser: still refused.
        st, h, doc = admin(g, "POST", "/cache/purge", b'{"all": true}', cross_site({"Authorization": f"Bearer {TOKEN}"}))
        assert_error(st, h, doc, 403, "forbidden")
        assert x_cache(g, "/l/hdr?id=token") == "HIT"

        # GET endpoints need no token.
        st, _, stats = admin(g, "GET", "/stats")
        assert st == 200 and stats["version"]
        assert admin(g, "GET", "/health")[0] == 200

        # The right token works (scheme name in any case).
        st, _, doc = admin(g, "POST", "/reload", b"", {"Authorization": f"Bearer {TOKEN}"})
        assert st == 200 and doc["status"] == "reloaded", doc
        st, _, doc = admin(g, "POST", "/cache/purge", b'{"all": true}', {"Authorization": f"bearer {TOKEN}"})
        assert st == 200 and doc["purged"] >= 1, doc
        assert x_cache(g, "/l/hdr?id=token") == "MISS"

        # The token is never shown.
        for path in ["/stats", "/metrics"]:
            conn = http.client.HTTPConnection("127.0.0.1", g.admin_port, timeout=10)
            conn.request("GET", path)
            assert TOKEN.encode() not in conn.getresponse().read(), path
            conn.close()
    finally:
        assert g.stop() == 0, g.logs()
    assert TOKEN not in g.logs()


def test_a_reload_applies_a_new_admin_token(backend):
    env = {"QW_TEST_ADMIN_TOKEN": TOKEN, "QW_TEST_ADMIN_TOKEN_2": OTHER_TOKEN}
    g = Gateway(config(backend, "{ listen: 127.0.0.1:{ADMIN}, token_env: QW_TEST_ADMIN_TOKEN }"), env=env)
    try:
        rewrite(g, config(backend, "{ listen: 127.0.0.1:{ADMIN}, token_env: QW_TEST_ADMIN_TOKEN_2 }"))
        st, _, doc = admin(g, "POST", "/reload", b"", {"Authorization": f"Bearer {TOKEN}"})
        assert st == 200 and "admin token changed" in doc["changes"], doc
        assert TOKEN not in json.dumps(doc) and OTHER_TOKEN not in json.dumps(doc)
        st, h, doc = admin(g, "POST", "/cache/purge", b'{"all": true}', {"Authorization": f"Bearer {TOKEN}"})
        assert_error(st, h, doc, 401, "admin_unauthorized")
        assert admin(g, "POST", "/cache/purge", b'{"all": true}', {"Authorization": f"Bearer {OTHER_TOKEN}"})[0] == 200

        # Removing token_env opens the POST endpoints to scripts again (never to browsers).
        rewrite(g, config(backend))
        st, _, doc = admin(g, "POST", "/reload", b"", {"Authorization": f"Bearer {OTHER_TOKEN}"})
        assert st == 200 and "admin token removed" in doc["changes"], doc
        assert admin(g, "POST", "/cache/purge", b'{"all": true}')[0] == 200
        assert admin(g, "POST", "/cache/purge", b'{"all": true}', cross_site())[0] == 403
    finally:
        assert g.stop() == 0, g.logs()
    logs = g.logs()
    assert TOKEN not in logs and OTHER_TOKEN not in logs


def test_an_unset_token_env_is_a_config_error_for_serve_and_a_warning_for_check(backend, tmp_path):
    path = tmp_path / "config.yaml"
    text = config(backend, "\n  listen: 127.0.0.1:19901\n  token_env: QW_TEST_NO_SUCH_TOKEN\n")
    path.write_text(text.replace("{PORT}", "18080"))
    env = {k: v for k, v in os.environ.items() if k != "QW_TEST_NO_SUCH_TOKEN"}
    for value in [None, ""]:
        if value is not None:
            env["QW_TEST_NO_SUCH_TOKEN"] = value
        # `serve` refuses to start; `check` (CI that validates configs has no secrets,
        # issue 30) warns with the same place and variable and says serve will refuse.
        r = subprocess.run([quickway_binary(), "serve", "--config", str(path)], capture_output=True, text=True, env=env, timeout=30)
        assert r.returncode == 1, r
        assert f"{path}:6: admin.token_env:" in r.stderr and "QW_TEST_NO_SUCH_TOKEN" in r.stderr, r.stderr
        r = subprocess.run([quickway_binary(), "check", "--config", str(path)], capture_output=True, text=True, env=env, timeout=30)
        assert r.returncode == 0, r
        assert f"warning: {path}:6: admin.token_env:" in r.stderr and "QW_TEST_NO_SUCH_TOKEN" in r.stderr, r.stderr
        assert "serve will refuse" in r.stderr
