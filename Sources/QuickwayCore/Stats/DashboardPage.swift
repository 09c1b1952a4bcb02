/// `GET /dashboard`: one self-contained HTML page (no file from the internet) that polls
/// `/stats` every second and draws the last few minutes: request rate, status classes,
/// latency percentiles, cache hit ratio and merges, and per service each IP's latency
/// and state, with the selected IP highlighted. The latest figures are also written as
/// text in the page (ids `total`, `rate`, `p99`, `hit-ratio`, `version`) and each chart
/// records how many pixels it drew (`data-drawn`), which the browser test reads.
public enum DashboardPage {
    public static let html = #"""
<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Quickway dashboard</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
 body{font:14px system-ui,sans-serif;margin:0;background:#f5f6f8;color:#1d2330}
 header{background:#1d2330;color:#fff;padding:10px 18px;display:flex;gap:28px;align-items:baseline;flex-wrap:wrap}
 header h1{font-size:18px;margin:0} header .k{opacity:.7;font-size:12px;margin-right:4px}
 main{display:grid;grid-template-columns:repeat(auto-fill,minmax(540px,1fr));gap:14px;padding:14px}
 section{background:#fff;border-radius:8px;padding:10px 12px;box-shadow:0 1px 2px rgba(0,0,0,.08)}
 h2{font-size:14px;margin:0 0 6px} canvas{width:100%;height:180px;display:block}
 .legend span{display:inline-block;margin-right:12px;font-size:12px} .legend i{display:inline-block;width:10px;height:10px;margin-right:4px;border-radius:2px}
 table{border-collapse:collapse;font-size:12px;margin-top:6px;width:100%} td,th{padding:2px 6px;text-align:left;border-bottom:1px solid #eee}
 tr.sel td{font-weight:700} .up{color:#1a7f37} .down{color:#b42318} .ejected{color:#b54708} #err{color:#b42318}
</style></head><body>
<header><h1>Quickway</h1>
 <div><span class="k">version</span><span id="version">-</span></div>
 <div><span class="k">uptime</span><span id="uptime">-</span></div>
 <div><span class="k">requests</span><span id="total">-</span></div>
 <div><span class="k">req/s</span><span id="rate">-</span></div>
 <div><span class="k">p99 ms</span><span id="p99">-</span></div>
 <div><span class="k">cache hit ratio</span><span id="hit-ratio">-</span></div>
 <div><span class="k">in flight</span><span id="inflight">-</span></div>
 <div><span class="k">websockets open</span><span id="ws-open">-</span></div>
 <div id="err"></div></header>
<main>
 <section><h2>Request rate (req/s)</h2><canvas id="c-rate"></canvas></section>
 <section><h2>Status classes (req/s)</h2><canvas id="c-status"></canvas><div class="legend" id="l-status"></div></section>
 <section><h2>Latency percentiles over the last minute (ms)</h2><canvas id="c-lat"></canvas><div class="legend" id="l-lat"></div></section>
 <section><h2>Cache hit ratio and merged requests</h2><canvas id="c-cache"></canvas><div class="legend" id="l-cache"></div></section>
 <div id="services" style="display:contents"></div>
</main>
<script>
"use strict";
const KEEP = 180, COLORS = ["#2563eb","#16a34a","#d97706","#dc2626","#7c3aed","#0891b2","#db2777","#4b5563"];
let hist = []; let prev = null;
function fmt(n, d) { return (n === null || n === undefined || isNaN(n)) ? "-" : Number(n).toFixed(d); }
function legend(id, names) { document.getElementById(id).innerHTML = names.map((n, i) => `<span><i style="background:${COLORS[i % COLORS.length]}"></i>${n}</span>`).join(""); }
function draw(id, series, opts) {
  const c = document.getElementById(id); if (!c) return;
  const w = c.clientWidth || 520, h = c.clientHeight || 180, r = window.devicePixelRatio || 1;
  c.width = w * r; c.height = h * r;
  const g = c.getContext("2d"); g.setTransform(r, 0, 0, r, 0, 0); g.clearRect(0, 0, w, h);
  let max = (opts && opts.max) || 0;
  for (const s of series) for (const v of s.values) if (v !== null && v > max) max = v;
  if (max <= 0) max = 1;
  g.strokeStyle = "#e5e7eb"; g.fillStyle = "#6b7280"; g.font = "11px system-ui"; g.lineWidth = 1;
  for (let i = 0; i <= 4; i++) { const y = 8 + (h - 24) * i / 4; g.beginPath(); g.moveTo(36, y); g.lineTo(w - 4, y); g.stroke(); g.fillText(fmt(max * (1 - i / 4), max < 10 ? 1 : 0), 2, y + 4); }
  const n = Math.max(2, KEEP), x = i => 36 + (w - 40) * (i + (n - hist.length)) / (n - 1);
  series.forEach((s, k) => {
    g.strokeStyle = s.color || COLORS[(s.colorIndex !== undefined ? s.colorIndex : k) % COLORS.length]; g.lineWidth = s.bold ? 3 : 1.5;
    g.setLineDash(s.dashed ? [4, 3] : []); g.beginPath(); let started = false;
    s.values.forEach((v, i) => { if (v === null) { started = false; return; } const y = 8 + (h - 24) * (1 - v / max); if (!started) { g.moveTo(x(i), y); started = true; } else g.lineTo(x(i), y); });
    g.stroke();
    if (s.marks) s.values.forEach((v, i) => { if (v !== null && s.marks[i]) { g.fillStyle = s.marks[i]; g.fillRect(x(i) - 2, 8 + (h - 24) * (1 - v / max) - 2, 4, 4); } });
  });
  // How much was drawn, for the browser test.
  const px = g.getImageData(0, 0, c.width, c.height).data; let drawn = 0;
  for (let i = 3; i < px.length; i += 16) if (px[i] > 0) drawn++;
  c.dataset.drawn = drawn;
}
function col(key) { return hist.map(p => p[key] === undefined ? null : p[key]); }
function render(s) {
  document.getElementById("version").textContent = s.version;
  document.getElementById("uptime").textContent = fmt(s.uptime_seconds, 0) + " s";
  document.getElementById("total").textContent = s.requests.total;
  document.getElementById("inflight").textContent = s.requests.in_flight;
  if (s.websocket) document.getElementById("ws-open").textContent = `${s.websocket.open} (msgs ${s.websocket.messages_in} in / ${s.websocket.messages_out} out, heartbeats missed ${s.websocket.heartbeats_missed})`;
  document.getElementById("p99").textContent = fmt(s.latency_ms.p99, 2);
  const last = hist[hist.length - 1] || {};
  document.getElementById("rate").textContent = fmt(last.rate, 1);
  document.getElementById("hit-ratio").textContent = s.cache && (s.cache.hits + s.cache.misses) > 0 ? fmt(s.cache.hits / (s.cache.hits + s.cache.misses), 3) : "-";
  draw("c-rate", [{ values: col("rate") }]);
  const cls = ["2xx", "3xx", "4xx", "5xx"]; legend("l-status", cls);
  draw("c-status", cls.map((c, i) => ({ values: col("s" + c), color: ["#16a34a", "#2563eb", "#d97706", "#dc2626"][i] })));
  legend("l-lat", ["p50", "p90", "p99"]);
  draw("c-lat", [{ values: col("p50") }, { values: col("p90") }, { values: col("p99") }]);
  legend("l-cache", ["hit ratio x100", "merged req/s"]);
  draw("c-cache", [{ values: col("hit") }, { values: col("merged") }]);
  const box = document.getElementById("services");
  for (const [name, svc] of Object.entries(s.services || {})) {
    let sec = document.getElementById("svc-" + name);
    if (!sec) { sec = document.createElement("section"); sec.id = "svc-" + name; sec.innerHTML = `<h2></h2><canvas id="c-svc-${name}"></canvas><div class="legend" id="l-svc-${name}"></div><table><thead><tr><th>IP</th><th>state</th><th>estimate ms</th><th>probe ms</th><th>service ms</th><th>requests</th><th>errors</th></tr></thead><tbody></tbody></table>`; box.appendChild(sec); }
    sec.querySelector("h2").textContent = `${name}: IP latency (ms): estimate solid, probe round trip dashed` + (svc.selected ? `, selected ${svc.selected}` : "");
    const ips = svc.upstreams.map(u => u.address); legend("l-svc-" + name, ips.map(ip => ip + (ip === svc.selected ? " (selected)" : "")));
    const at = (p, ip) => p.ips && p.ips[name] && p.ips[name][ip];
    draw("c-svc-" + name, ips.flatMap((ip, k) => [
      { values: hist.map(p => at(p, ip) ? at(p, ip).lat : null), colorIndex: k,
        marks: hist.map(p => { const u = at(p, ip); return u && u.state !== "up" ? (u.state === "down" ? "#b42318" : "#b54708") : null; }),
        bold: ip === svc.selected },
      { values: hist.map(p => at(p, ip) && at(p, ip).probe !== null ? at(p, ip).probe : null), colorIndex: k, dashed: true }]));
    sec.querySelector("tbody").innerHTML = svc.upstreams.map(u => `<tr class="${u.address === svc.selected ? "sel" : ""}"><td>${u.address}${u.address === svc.selected ? " *" : ""}</td><td class="${u.state}">${u.state}</td><td>${fmt(u.latency_ms, 2)}</td><td>${fmt(u.probe_latency_ms, 2)}</td><td>${fmt(u.service_ms, 2)}</td><td>${u.requests}</td><td>${u.errors}</td></tr>`).join("");
  }
}
async function tick() {
  try {
    const r = await fetch(prev ? "/stats" : "/stats?history=1", { cache: "no-store" }); const s = await r.json(); const now = performance.now() / 1000;
    // The first poll brings the last minute, so the charts are drawn at once.
    if (!prev && Array.isArray(s.history)) hist = s.history.slice(-KEEP);
    const lat = s.latency_ms_last_minute && s.latency_ms_last_minute.requests > 0 ? s.latency_ms_last_minute : s.latency_ms;
    const p = { t: now, p50: lat.p50, p90: lat.p90, p99: lat.p99, ips: {} };
    if (prev) {
      const dt = Math.max(0.001, now - prev.t), d = k => (s.requests.by_status[k] - prev.s.requests.by_status[k]) / dt;
      p.rate = (s.requests.total - prev.s.requests.total) / dt;
      for (const k of ["2xx", "3xx", "4xx", "5xx"]) p["s" + k] = d(k);
      const lookups = (s.cache.hits + s.cache.misses) - (prev.s.cache.hits + prev.s.cache.misses);
      p.hit = lookups > 0 ? 100 * (s.cache.hits - prev.s.cache.hits) / lookups : null;
      p.merged = (s.coalescing.waiters - prev.s.coalescing.waiters) / dt;
    }
    for (const [name, svc] of Object.entries(s.services || {})) { p.ips[name] = {}; for (const u of svc.upstreams) p.ips[name][u.address] = { lat: u.latency_ms, probe: u.probe_latency_ms, state: u.state }; }
    prev = { t: now, s }; hist.push(p); if (hist.length > KEEP) hist.shift();
    document.getElementById("err").textContent = ""; render(s);
  } catch (e) { document.getElementById("err").textContent = "cannot read /stats: " + e; }
}
tick(); setInterval(tick, 1000);
</script></body></html>
"""#
}
