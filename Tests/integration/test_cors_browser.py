"""CORS in a real browser (issue 32): headless Chromium (Debian's, as test_dashboard.py
drives it) loads a page from one origin (a Python server on 127.0.0.2 or 127.0.0.3) whose
script fetch()es the gateway on another (127.0.0.1) with a custom header, which makes the
browser send a preflight first. The browser is the independent implementation: from
the allowed origin the call succeeds and the script reads an exposed header; from an
origin not allowed the browser itself refuses the call (fetch rejects) after the
gateway's 403, and the backend never sees it."""
import re
import shutil
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from harness import Backend, Gateway, free_port, wait_until

CONFIG = """
listen: 127.0.0.1:{PORT}
workers: 2
admin: { listen: 127.0.0.1:{ADMIN} }
services:
  api: { host: api.internal, port: API_PORT, ips: [127.0.0.2] }
routes:
  - name: cors
    match: { path_prefix: /cors/, methods: [GET, POST] }
    service: api
    strip_prefix: true
    cors:
      allow_origins: ["ALLOWED_ORIGIN"]
      allow_headers: [X-Token]
      expose_headers: [X-Backend]
      max_age: 1m
"""

PAGE = """<!doctype html><html><body><div id="out">pending</div><script>
fetch("GATEWAY/cors/echo", {headers: {"X-Token": "t1"}})
  .then(r => r.json().then(j => {
    document.getElementById("out").textContent =
      "ok " + r.status + " backend=" + (r.headers.get("X-Backend") || "none") + " token=" + (j.headers["X-Token"] || j.headers["x-token"]);
  }))
  .catch(e => { document.getElementById("out").textContent = "failed " + e.name; });
</script></body></html>"""


def chromium():
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


class PageServer:
    """Serves PAGE on `host` (a port of its own, known before the gateway starts), in a
    thread; the gateway's address is filled in when the page is asked for."""

    def __init__(self, host):
        self.gateway_url = ""
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                page = PAGE.replace("GATEWAY", outer.gateway_url).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)

        self.server = ThreadingHTTPServer((host, free_port(host)), Handler)
        self.server.daemon_threads = True
        self.origin = f"http://{host}:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def page_result(url, profile):
    """What the page's script wrote, read from the DOM Chromium dumps once the page settled."""
    cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
           "--virtual-time-budget=10000", "--dump-dom", url]
    dom = subprocess.run(cmd, capture_output=True, text=True, timeout=90).stdout
    m = re.search(r'<div id="out">([^<]*)</div>', dom)
    assert m, f"no result in the page: {dom[:500]!r}"
    return m.group(1)


@pytest.mark.skipif(chromium() is None, reason="needs Chromium (apt-get install chromium; .ci/run installs it)")
def test_a_browser_calls_from_an_allowed_origin_and_is_refused_from_another(tmp_path):
    api = Backend("127.0.0.2", free_port("127.0.0.2"))
    allowed = PageServer("127.0.0.2")
    refused = PageServer("127.0.0.3")
    g = None
    try:
        g = Gateway(CONFIG.replace("API_PORT", str(api.server.server_address[1])).replace("ALLOWED_ORIGIN", allowed.origin))
        allowed.gateway_url = refused.gateway_url = f"http://127.0.0.1:{g.port}"

        assert page_result(allowed.origin + "/page.html", tmp_path / "a") == f"ok 200 backend={api.server.name} token=t1"
        assert api.path_hits("/echo") == 1
        assert all(r["method"] != "OPTIONS" for r in api.requests), "the preflight was answered by the gateway"

        assert page_result(refused.origin + "/page.html", tmp_path / "b") == "failed TypeError", "the browser refuses the call"
        assert api.path_hits("/echo") == 1, "the refused origin's call never reached the backend"
        assert all(r["method"] != "OPTIONS" for r in api.requests)
        # The refusal was the gateway's: one 4xx at the route (the preflight's 403), and
        # the allowed page's preflight (204) and call (200) as 2xx.
        def by_status():
            return g.stats()["routes"]["cors"]["by_status"]
        wait_until(lambda: by_status().get("4xx") == 1, what="the refused preflight counted")
        assert by_status().get("2xx") == 2, by_status()
    finally:
        allowed.stop()
        refused.stop()
        if g is not None:
            assert g.stop() == 0
        api.stop()
