"""The dashboard in a real headless browser (Chromium from Debian): it loads against a
running gateway under traffic, draws every chart, and shows the figures of /stats."""
import re
import shutil
import subprocess
import threading
import urllib.request

import pytest

from harness import Backend, Gateway, free_port, wait_until

CONFIG = """
listen: 127.0.0.1:{PORT}
workers: 2
admin: { listen: 127.0.0.1:{ADMIN} }
services:
  api:
    host: api.internal
    port: BACKEND_PORT
    ips: [127.0.0.2]
    probe: { kind: http, path: /health, interval: 300ms, timeout: 300ms }
routes:
  - { name: api, match: { path_prefix: /api/ }, service: api, cache: { ttl: 1s } }
"""


def chromium():
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.mark.skipif(chromium() is None, reason="needs Chromium (apt-get install chromium; .ci/run installs it)")
def test_dashboard_draws_its_charts_under_traffic(tmp_path):
    b = Backend("127.0.0.2", free_port("127.0.0.2"))
    g = Gateway(CONFIG.replace("BACKEND_PORT", str(b.server.server_address[1])))
    stop = threading.Event()
    sent = []

    def traffic():
        while not stop.is_set() and len(sent) < 5000:
            for path in ("/api/a", "/api/b", "/nope"):
                try:
                    urllib.request.urlopen(g.url(path), timeout=5).read()
                    sent.append(200)
                except Exception:
                    sent.append(0)
            stop.wait(0.02)

    t = threading.Thread(target=traffic)
    try:
        t.start()
        wait_until(lambda: len(sent) > 30, what="traffic")
        before = g.stats()
        url = f"http://127.0.0.1:{g.admin_port}/dashboard"
        common = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                  "--window-size=1300,1000", "--virtual-time-budget=5000"]
        dom = subprocess.run(common + ["--dump-dom", url], capture_output=True, text=True, timeout=90).stdout
        shot = tmp_path / "dashboard.png"
        subprocess.run(common + [f"--screenshot={shot}", url], capture_output=True, timeout=90)
        after = g.stats()
        assert shot.exists() and shot.stat().st_size > 10_000, "a screenshot was taken"

        def text(id_):
            m = re.search(rf'id="{id_}">([^<]*)<', dom)
            assert m, f"no #{id_} in the page"
            return m.group(1)
        assert text("version") == before["version"]
        assert before["requests"]["total"] <= int(text("total")) <= after["requests"]["total"]
        assert float(text("p99")) > 0
        assert 0 <= float(text("hit-ratio")) <= 1
        drawn = [int(x) for x in re.findall(r'<canvas[^>]*data-drawn="(\d+)"', dom)]
        assert len(drawn) == 5, "four charts and one per service"
        assert all(d > 100 for d in drawn), drawn
        assert "api: IP latency (ms): estimate solid, probe round trip dashed, selected 127.0.0.2" in dom
        # Both routing signals are shown (issue 16): the probe round trip and the service time.
        assert "<th>probe ms</th><th>service ms</th>" in dom
        assert "127.0.0.2 *" in dom, "the selected IP is marked"
        assert re.search(r'<div id="err"></div>', dom), "no error shown in the page"
    finally:
        stop.set()
        t.join(10)
        g.stop()
        b.stop()


@pytest.mark.skipif(chromium() is None, reason="needs Chromium (apt-get install chromium; .ci/run installs it)")
def test_dashboard_opens_with_the_last_minute_drawn(tmp_path):
    """Issue 30, point 10: the charts were empty until the page had polled a while. The
    gateway keeps the last minute (`/stats?history=1`), and the page draws it on its first
    poll: with a virtual time budget shorter than one poll interval, every chart is drawn."""
    b = Backend("127.0.0.2", free_port("127.0.0.2"))
    g = Gateway(CONFIG.replace("BACKEND_PORT", str(b.server.server_address[1])))
    try:
        for _ in range(20):
            urllib.request.urlopen(g.url("/api/a"), timeout=5).read()
        import json
        def history():
            with urllib.request.urlopen(f"http://127.0.0.1:{g.admin_port}/stats?history=1", timeout=5) as r:
                return json.loads(r.read())["history"]
        wait_until(lambda: len(history()) >= 4, timeout=10, what="four seconds of history")
        h = history()
        assert all("p99" in p and "ips" in p for p in h) and "rate" in h[-1] and "api" in h[-1]["ips"], h[-1]
        with urllib.request.urlopen(f"http://127.0.0.1:{g.admin_port}/stats", timeout=5) as r:
            assert "history" not in json.loads(r.read()), "plain /stats stays small"
        url = f"http://127.0.0.1:{g.admin_port}/dashboard"
        dom = subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1300,1000",
                              "--virtual-time-budget=300", "--dump-dom", url], capture_output=True, text=True, timeout=90).stdout
        drawn = [int(d) for d in re.findall(r'data-drawn="(\d+)"', dom)]
        assert len(drawn) == 5 and all(d > 100 for d in drawn), drawn
    finally:
        g.stop()
        b.stop()
