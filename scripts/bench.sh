#!/usr/bin/env bash
# Proxy benchmark: Quickway against nginx doing the same job on the same machine.
#
#   core 0: the proxy under test (Quickway, 1 worker | nginx, 1 worker, proxy_pass with
#           upstream keepalive), one at a time
#   core 1: the backend (nginx answering a 1 KB JSON) and the load generator (wrk)
#
# Rounds are interleaved (Q, N, Q, N, ...) so drift on a shared machine hits both alike;
# the summary gives medians and the Quickway/nginx ratios. Server CPU per request is
# read from /proc/PID/stat before and after each run.
#
# Second case, "signed": the same Quickway proxy on a route with QW1 verification
# (auth: required) against a route with auth: off. wrk replays pre-signed requests, each
# with a fresh nonce, made before each round by examples/qw1_client.py; both routes get
# the same requests (same Authorization header), so only the verification differs.
# Target: signed req/s >= 0.95x unsigned (issue 17).
#
# Cases "cache" (hit throughput against nginx proxy_cache, HAProxy's cache, Varnish) and
# "merge" (200 identical cold GETs against nginx proxy_cache_lock and Varnish) are run by
# scripts/bench/bench-cache.sh, which this script calls for --case cache|merge|all.
#
# Case "log": the same proxy with the access log written to a file (and stats, always
# on) against a second instance with the access log off. Target: >= 0.95x.
#
# Case "routing": three backends with 2, 20 and 50 ms delay behind Quickway (fastest, with
# probes) and nginx (round robin, its open-source default): median and p99 client latency
# and each backend's share of calls (scripts/bench/bench_routing.py drives it).
#
# Case "redis": cache hits served from the shared Redis tier with a cold local tier,
# against local hits (scripts/bench/bench-redis.sh).
#
# Case "redis-tls": QW1-signed calls with their nonces in Redis, reached over plain TCP
# against over TLS (rediss://): the cost of TLS to Redis (scripts/bench/bench-redis-tls.sh).
#
# Case "tls": HTTP/1.1 over TLS against nginx ssl, kept-alive and a full handshake per
# request (scripts/bench/bench-tls.sh).
# Case "http2": HTTP/2 over TLS against nginx `ssl http2` with h2load: 1 and 100 streams per
# connection, full and resumed handshakes (scripts/bench/bench-http2.sh).
#
# Case "scaling": req/s and p99 with 1 and 2 workers and 1, 64 and 1,024 connections, against
# nginx with as many workers (scripts/bench/bench-scaling.sh).
#
# Case "websocket": echo round trips over 100 WebSocket connections against nginx proxying
# the same backend (scripts/bench/bench-websocket.sh).
#
# Case "cors": a CORS preflight answered by a route's `cors` against nginx answering the
# same preflight with add_header and return 204 (scripts/bench/bench-cors.sh).
#
# Case "gzip": compressed answers of a 20 KB JSON: Quickway's compressed cache hits against
# nginx `gzip on` and `gzip_static`, an uncached compressed proxy against nginx proxy_pass
# with gzip, and bytes on the wire per coding and level (scripts/bench/bench-gzip.sh).
#
# Case "overload": a slow backend (4 at once x 20 ms) offered 2x its capacity, open-loop,
# through Quickway with services.<name>.concurrency, Quickway without it, nginx, and nginx
# with max_conns: unloaded p99, admitted p50/p99 and calls refused
# (scripts/bench/bench-overload.sh; 3 rounds of 5 s unless --rounds/--duration say otherwise).
#
# Usage: scripts/bench.sh [--rounds N] [--duration SECONDS] [--connections C] [--case proxy|signed|log|cache|merge|routing|redis|redis-tls|tls|http2|websocket|scaling|cors|gzip|jwt|upload|overload|all]
# Needs: nginx, wrk (Debian packages; installed if missing). Traffic stays on 127.0.0.1/.2.
set -euo pipefail
[ "${QW_BENCH_DEBUG:-0}" = 1 ] && set -x
cd "$(dirname "$0")/.."
ROUNDS=5; DURATION=8; CONNS=64; CASE=all
. scripts/bench/bench-common.sh
parse_bench_options "$@"
need_tools nginx:nginx-light wrk:wrk
scripts/setup.sh >/dev/null
if [ "$CASE" = routing ]; then
  bench_workdir routing
  RPORT=18681
  cat > "$WORK/q.yaml" <<CONF
listen: 127.0.0.1:18680
workers: 1
admin: { listen: 127.0.0.1:18690 }
log: { level: warn }
services:
  api:
    host: api.local
    port: $RPORT
    ips: [127.0.0.2, 127.0.0.3, 127.0.0.4]
    probe: { kind: http, path: /health, interval: 1s, timeout: 500ms }
    selection: { strategy: fastest, switch_margin: 20% }
routes: [ { name: all, match: { path_prefix: / }, service: api } ]
CONF
  cat > "$WORK/nginx.conf" <<CONF
daemon off; worker_processes 1; error_log $WORK/error.log; pid $WORK/nginx.pid;
events { worker_connections 1024; }
http { access_log off;
  upstream api { server 127.0.0.2:$RPORT; server 127.0.0.3:$RPORT; server 127.0.0.4:$RPORT; keepalive 64; }
  server { listen 127.0.0.1:18682; location / { proxy_pass http://api; proxy_http_version 1.1; proxy_set_header Connection ""; } } }
CONF
  taskset -c 0 "$PWD/.build/release/quickway" serve --config "$WORK/q.yaml" 2>"$WORK/q.log" & PIDS+=($!)
  taskset -c 0 nginx -p "$WORK" -c "$WORK/nginx.conf" & PIDS+=($!)
  echo "routing: backends 2/20/50 ms on 127.0.0.2-4; Quickway fastest vs nginx round robin"
  taskset -c 1 python3 scripts/bench/bench_routing.py --port "$RPORT" --rounds "$ROUNDS" --requests 3000 --concurrency 16 \
    quickway=127.0.0.1:18680 nginx=127.0.0.1:18682
  exit 0
fi
if [ "$CASE" = websocket ]; then
  # 100 connections unless --connections says otherwise (64 is the HTTP cases' default).
  exec scripts/bench/bench-websocket.sh --rounds "$ROUNDS" --duration "$DURATION" --connections "$([ "$CONNS" = 64 ] && echo 100 || echo "$CONNS")"
fi
if [ "$CASE" = overload ]; then
  exec scripts/bench/bench-overload.sh --rounds "$([ "$ROUNDS" = 5 ] && echo 3 || echo "$ROUNDS")" --duration "$([ "$DURATION" = 8 ] && echo 5 || echo "$DURATION")"
fi
if [ "$CASE" = scaling ]; then
  exec scripts/bench/bench-scaling.sh --rounds "$ROUNDS" --duration "$DURATION"
fi
if [ "$CASE" = tls ]; then
  exec scripts/bench/bench-tls.sh --rounds "$ROUNDS" --duration "$DURATION" --connections "$CONNS"
fi
if [ "$CASE" = http2 ]; then
  exec scripts/bench/bench-http2.sh --rounds "$ROUNDS" --duration "$DURATION"
fi
if [ "$CASE" = jwt ]; then
  exec scripts/bench/bench-jwt.sh --rounds "$ROUNDS" --duration "$DURATION" --connections "$CONNS"
fi
if [ "$CASE" = cors ]; then
  exec scripts/bench/bench-cors.sh --rounds "$ROUNDS" --duration "$DURATION" --connections "$CONNS"
fi
if [ "$CASE" = upload ]; then
  exec scripts/bench/bench-upload.sh --rounds "$ROUNDS"
fi
if [ "$CASE" = gzip ]; then
  exec scripts/bench/bench-gzip.sh --rounds "$ROUNDS" --duration "$DURATION" --connections "$CONNS"
fi
if [ "$CASE" = redis-tls ]; then
  exec scripts/bench/bench-redis-tls.sh --rounds "$ROUNDS" --duration "$DURATION" --connections "$CONNS"
fi
if [ "$CASE" = redis ]; then
  exec scripts/bench/bench-redis.sh --rounds "$ROUNDS" --duration "$DURATION" --connections "$CONNS"
fi
if [ "$CASE" = cache ] || [ "$CASE" = merge ]; then
  exec scripts/bench/bench-cache.sh --rounds "$ROUNDS" --duration "$DURATION" --connections "$CONNS" --case "$CASE"
fi
QW=${QW_BIN:-$PWD/.build/release/quickway}   # QW_BIN: benchmark another build (before/after)
WORK=$(mktemp -d /tmp/qw-bench.XXXXXX)
PIDS=()
cleanup() { [ -f "$WORK/last-wrk.txt" ] && cp "$WORK/last-wrk.txt" /tmp/qw-bench-last-wrk.txt; for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT

BACKEND_PORT=18081; QW_PORT=18080; QW_ADMIN=18090; NGINX_PORT=18082
BODY=$(python3 -c 'import json; print(json.dumps({"items": [{"id": i, "name": "item-%04d" % i} for i in range(40)]})[:1024])')

mkdir -p "$WORK/backend" "$WORK/nginx"
write_backend_conf "$WORK/backend" "127.0.0.2:$BACKEND_PORT" "$BODY"
cat > "$WORK/nginx/nginx.conf" <<CONF
daemon off; worker_processes 1; error_log $WORK/nginx/error.log; pid $WORK/nginx/nginx.pid;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 1000000;
  upstream backend { server 127.0.0.2:$BACKEND_PORT; keepalive 128; }
  server { listen 127.0.0.1:$NGINX_PORT;
    location / { proxy_pass http://backend; proxy_http_version 1.1; proxy_set_header Connection "";
                 proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for; } } }
CONF
cat > "$WORK/quickway.yaml" <<CONF
listen: 127.0.0.1:$QW_PORT
workers: 1
admin: { listen: 127.0.0.1:$QW_ADMIN }
log: { level: warn, access_log: off }
services:
  backend:
    host: backend.local
    port: $BACKEND_PORT
    ips: [127.0.0.2]
auth:
  salt: bench-salt
  nonce_capacity: 10000000
  keys: [ { id: bench-app, secret: bench-secret } ]
routes:
  - name: signed
    match: { path_prefix: /signed/ }
    service: backend
    auth: required
  - name: all
    match: { path_prefix: / }
    service: backend
    auth: off
CONF
write_replay_lua "$WORK/replay.lua"

taskset -c 1 nginx -p "$WORK/backend" -c "$WORK/backend/nginx.conf" & PIDS+=($!)
taskset -c 0 nginx -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" & PIDS+=($!); NGINX_MASTER=$!
taskset -c 0 "$QW" serve --config "$WORK/quickway.yaml" 2>"$WORK/quickway.log" & PIDS+=($!); QW_PID=$!
sed -e "s/127.0.0.1:$QW_PORT/127.0.0.1:18088/" -e "s/127.0.0.1:$QW_ADMIN/127.0.0.1:18089/" \
    -e "s|log: { level: warn, access_log: off }|log: { level: warn, access_log: $WORK/access.log }|" "$WORK/quickway.yaml" > "$WORK/quickway-log.yaml"
taskset -c 0 "$QW" serve --config "$WORK/quickway-log.yaml" 2>"$WORK/quickway-log.err" & PIDS+=($!); QW_LOG_PID=$!

wait_up "http://127.0.0.2:$BACKEND_PORT/"
wait_up "http://127.0.0.1:$NGINX_PORT/"
wait_up "http://127.0.0.1:$QW_PORT/"
wait_up "http://127.0.0.1:18088/"
# nginx's worker is the master's child; CPU is counted on the worker.
NGINX_WORKER=$(pgrep -P "$NGINX_MASTER" | head -1)

echo "bench: $ROUNDS interleaved rounds of ${DURATION}s, $CONNS connections, 1 KB JSON; proxies on core 0, wrk+backend on core 1"
# Warm-up (connection pools, caches).
taskset -c 1 wrk -t1 -c"$CONNS" -d2s "http://127.0.0.1:$QW_PORT/" >/dev/null
taskset -c 1 wrk -t1 -c"$CONNS" -d2s "http://127.0.0.1:$NGINX_PORT/" >/dev/null
: > "$WORK/results"
# Enough pre-signed requests that none is sent twice in a run (a replay would be a 401):
# 100,000 a second, above what one worker serves here (60,000 was overrun at 61k req/s).
SIGNED_N=$(( DURATION * 100000 ))
for r in $(seq "$ROUNDS"); do
  if [ "$CASE" = all ] || [ "$CASE" = proxy ]; then
    q=$(run_one "http://127.0.0.1:$QW_PORT/" "$QW_PID"); echo "quickway $q" >> "$WORK/results"
    n=$(run_one "http://127.0.0.1:$NGINX_PORT/" "$NGINX_WORKER"); echo "nginx $n" >> "$WORK/results"
    echo "round $r: quickway $q | nginx $n   (req/s p50ms p99ms cpu_us/req non2xx)"
  fi
  if [ "$CASE" = all ] || [ "$CASE" = log ]; then
    o=$(run_one "http://127.0.0.1:$QW_PORT/open/x" "$QW_PID"); echo "qw-log-off $o" >> "$WORK/results"
    l=$(run_one "http://127.0.0.1:18088/open/x" "$QW_LOG_PID"); echo "qw-log-file $l" >> "$WORK/results"
    echo "round $r: access log off $o | to a file $l"
  fi
  if [ "$CASE" = all ] || [ "$CASE" = signed ]; then
    presign "$SIGNED_N" "$WORK/signed.txt"
    o=$(run_one "http://127.0.0.1:$QW_PORT/" "$QW_PID" "$WORK/replay.lua" "$WORK/signed.txt" "/open"); echo "qw-auth-off $o" >> "$WORK/results"
    presign "$SIGNED_N" "$WORK/signed.txt"
    sg=$(run_one "http://127.0.0.1:$QW_PORT/" "$QW_PID" "$WORK/replay.lua" "$WORK/signed.txt" "/signed"); echo "qw-signed $sg" >> "$WORK/results"
    echo "round $r: auth off $o | signed $sg"
  fi
done

print_medians "$WORK/results" "case"
python3 - "$WORK/results" <<'PY'
import sys
sys.path.insert(0, "scripts/bench")
from bench_medians import medians
med = medians(sys.argv[1])
print()
if "quickway" in med:
    q, n = med["quickway"], med["nginx"]
    print(f"ratio quickway/nginx: req/s {q[0]/n[0]:.2f}x (target >= 0.70), p99 {q[2]/n[2]:.2f}x (target <= 1.50), CPU/req {q[3]/n[3]:.2f}x")
if "qw-log-file" in med:
    lf, lo = med["qw-log-file"], med["qw-log-off"]
    print(f"ratio access log on/off: req/s {lf[0]/lo[0]:.2f}x (target >= 0.95), CPU/req {lf[3]/lo[3]:.2f}x")
if "qw-signed" in med:
    s, o = med["qw-signed"], med["qw-auth-off"]
    print(f"ratio signed/auth-off: req/s {s[0]/o[0]:.2f}x (target >= 0.95), CPU/req {s[3]/o[3]:.2f}x, extra CPU per signed request {s[3]-o[3]:.2f} us")
# A round with non-2xx answers measured something else (a replayed nonce is a cheap 401).
bad = {}
for line in open(sys.argv[1]):
    name, *vals = line.split()
    if len(vals) >= 5 and float(vals[4]) > 0: bad[name] = bad.get(name, 0) + 1
for name, n in sorted(bad.items()):
    print(f"WARNING: {n} round(s) of {name} had non-2xx answers; their figures are not comparable")
PY

if [ "$CASE" = all ]; then
  cleanup
  trap - EXIT
  echo
  scripts/bench/bench-cache.sh --rounds "$ROUNDS" --duration "$DURATION" --connections "$CONNS" --case all
  echo
  scripts/bench/bench-redis.sh --rounds "$ROUNDS" --duration "$DURATION" --connections "$CONNS"
fi
