#!/usr/bin/env bash
# Cache and merging benchmarks, run by scripts/bench.sh (--case cache|merge) or alone.
#
# cache: hit throughput for one 1 KB object through Quickway (route cache), nginx
#        proxy_cache with open_file_cache, HAProxy's cache and Varnish, each alone on
#        core 0 in turn (interleaved rounds); wrk and the backend on core 1. Prints
#        req/s, p99 and server CPU per hit, and Quickway's ratio to the best peer.
# merge: 200 identical GETs at once for a cold key, 50 ms backend (bench_merge.py, which
#        counts backend hits): Quickway coalesce, nginx proxy_cache_lock, Varnish, and
#        "direct" (the same burst straight to the backend: the backend's own time as this
#        client sees it, the baseline for the "within 10 ms" target).
#
# Usage: scripts/bench/bench-cache.sh [--rounds N] [--duration S] [--case cache|merge|all]
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=5; DURATION=8; CONNS=64; CASE=all
. scripts/bench/bench-common.sh
parse_bench_options "$@"
need_tools nginx:nginx-light wrk:wrk haproxy:haproxy varnishd:varnish
scripts/setup.sh >/dev/null
QW=${QW_BIN:-$PWD/.build/release/quickway}   # QW_BIN: benchmark another build (before/after)
bench_workdir cache

BACKEND=127.0.0.2:18381; MERGE_BACKEND=127.0.0.3:18382
P_QW=18380; P_QW_ADMIN=18390; P_NGINX=18383; P_HAPROXY=18384; P_VARNISH=18385
BODY=$(python3 -c 'import json; print(json.dumps({"items": [{"id": i, "name": "item-%04d" % i} for i in range(40)]})[:1024])')
mkdir -p "$WORK/backend" "$WORK/nginx/cache" "$WORK/varnish"
# nginx workers run as an unprivileged user: let them reach the cache folder.
chmod 755 "$WORK" "$WORK/nginx"; chmod 777 "$WORK/nginx/cache"

cat > "$WORK/backend/nginx.conf" <<CONF
daemon off; worker_processes 1; error_log $WORK/backend/error.log; pid $WORK/backend/nginx.pid;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 1000000;
  server { listen $BACKEND; location / { default_type application/json;
    # Explicit freshness: HAProxy's cache stores nothing without it; the same for all.
    add_header Cache-Control "public, max-age=600"; return 200 '$BODY'; } } }
CONF
cat > "$WORK/nginx/nginx.conf" <<CONF
daemon off; worker_processes 1; error_log $WORK/nginx/error.log; pid $WORK/nginx/nginx.pid;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 1000000;
  open_file_cache max=10000 inactive=60s;
  proxy_cache_path $WORK/nginx/cache levels=1:2 keys_zone=c:10m max_size=256m;
  upstream backend { server $BACKEND; keepalive 128; }
  upstream merge { server $MERGE_BACKEND; keepalive 128; }
  server { listen 127.0.0.1:$P_NGINX;
    location /merge/ { proxy_pass http://merge; proxy_http_version 1.1; proxy_set_header Connection "";
                       proxy_cache c; proxy_cache_valid 200 10m; proxy_cache_lock on; }
    location / { proxy_pass http://backend; proxy_http_version 1.1; proxy_set_header Connection "";
                 proxy_cache c; proxy_cache_valid 200 10m; } } }
CONF
cat > "$WORK/haproxy.cfg" <<CONF
global
  nbthread 1
defaults
  mode http
  timeout connect 1s
  timeout client 30s
  timeout server 30s
cache c
  total-max-size 256
  max-object-size 100000
  max-age 600
frontend f
  bind 127.0.0.1:$P_HAPROXY
  http-request cache-use c
  http-response cache-store c
  default_backend b
backend b
  http-reuse always
  server s1 $BACKEND
CONF
cat > "$WORK/varnish/default.vcl" <<CONF
vcl 4.1;
backend default { .host = "${BACKEND%:*}"; .port = "${BACKEND#*:}"; }
backend merge { .host = "${MERGE_BACKEND%:*}"; .port = "${MERGE_BACKEND#*:}"; }
sub vcl_recv { if (req.url ~ "^/merge/") { set req.backend_hint = merge; } }
sub vcl_backend_response { set beresp.ttl = 10m; }
CONF
cat > "$WORK/quickway.yaml" <<CONF
listen: 127.0.0.1:$P_QW
workers: 1
admin: { listen: 127.0.0.1:$P_QW_ADMIN }
log: { level: warn }
cache: { max_bytes: 256MiB }
services:
  backend: { host: backend.local, port: ${BACKEND#*:}, ips: ["${BACKEND%:*}"] }
  merge: { host: merge.local, port: ${MERGE_BACKEND#*:}, ips: ["${MERGE_BACKEND%:*}"] }
routes:
  - name: merge
    match: { path_prefix: /merge/ }
    service: merge
    cache: { ttl: 600s }
    coalesce: true
    coalesce_max_waiters: 10000
  - name: cached
    match: { path_prefix: / }
    service: backend
    cache: { ttl: 600s }
CONF

taskset -c 1 nginx -p "$WORK/backend" -c "$WORK/backend/nginx.conf" & PIDS+=($!)
taskset -c 0 "$QW" serve --config "$WORK/quickway.yaml" 2>"$WORK/quickway.log" & PIDS+=($!); QW_PID=$!
taskset -c 0 nginx -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" & PIDS+=($!); NGINX_MASTER=$!
taskset -c 0 haproxy -f "$WORK/haproxy.cfg" -db & PIDS+=($!); HAPROXY_PID=$!
taskset -c 0 varnishd -F -j none -a 127.0.0.1:$P_VARNISH -f "$WORK/varnish/default.vcl" -n "$WORK/varnish" -s malloc,256m \
  -p thread_pools=1 -p thread_pool_min=20 >"$WORK/varnish.log" 2>&1 & PIDS+=($!); VARNISH_MASTER=$!

for url in "http://$BACKEND/" "http://127.0.0.1:$P_QW/obj" "http://127.0.0.1:$P_NGINX/obj" "http://127.0.0.1:$P_HAPROXY/obj" "http://127.0.0.1:$P_VARNISH/obj"; do wait_up "$url"; done
NGINX_WORKER=$(pgrep -P "$NGINX_MASTER" | head -1)
# Varnish serves from its child process.
VARNISH_CHILD=$(pgrep -P "$VARNISH_MASTER" | head -1)

if [ "$CASE" = all ] || [ "$CASE" = cache ]; then
  echo "cache hits: $ROUNDS interleaved rounds of ${DURATION}s, $CONNS connections, one 1 KB object; servers on core 0, wrk+backend on core 1"
  for s in "$P_QW" "$P_NGINX" "$P_HAPROXY" "$P_VARNISH"; do
    for _ in 1 2 3; do curl -s -o /dev/null "http://127.0.0.1:$s/obj"; done
    taskset -c 1 wrk -t1 -c"$CONNS" -d2s "http://127.0.0.1:$s/obj" >/dev/null
  done
  curl -s "http://127.0.0.1:$P_QW_ADMIN/stats" | python3 -c 'import json,sys; c=json.load(sys.stdin)["cache"]; print("quickway cache after warm-up: %d entry, %d hits" % (c["entries"], c["hits"]))'
  : > "$WORK/results"
  for r in $(seq "$ROUNDS"); do
    line="round $r:"
    for spec in "quickway:$P_QW:$QW_PID" "nginx:$P_NGINX:$NGINX_WORKER" "haproxy:$P_HAPROXY:$HAPROXY_PID" "varnish:$P_VARNISH:$VARNISH_CHILD"; do
      IFS=: read -r name port pid <<<"$spec"
      v=$(run_one "http://127.0.0.1:$port/obj" "$pid"); echo "$name $v" >> "$WORK/results"
      line="$line $name $v |"
    done
    echo "$line   (req/s p50ms p99ms cpu_us/req non2xx)"
  done
  print_medians "$WORK/results" "cache hit"
  python3 - "$WORK/results" <<'PY'
import sys
sys.path.insert(0, "scripts/bench")
from bench_medians import medians
med = medians(sys.argv[1])
peers = {k: v for k, v in med.items() if k != "quickway"}
best_rps = max(peers, key=lambda k: peers[k][0]); best_cpu = min(peers, key=lambda k: peers[k][3])
q = med["quickway"]
print(f"\nratio quickway/best peer: req/s {q[0] / peers[best_rps][0]:.2f}x vs {best_rps} (target >= 1.0), "
      f"CPU per hit {q[3] / peers[best_cpu][3]:.2f}x vs {best_cpu} (lower is better)")
PY
fi

if [ "$CASE" = all ] || [ "$CASE" = merge ]; then
  echo
  echo "merging: 200 identical GETs at once, cold key each round, 50 ms backend (counts its hits)"
  taskset -c 1 python3 scripts/bench/bench_merge.py --backend "$MERGE_BACKEND" --delay-ms 50 --n 200 --rounds "$ROUNDS" \
    "direct=http://$MERGE_BACKEND/" "quickway=http://127.0.0.1:$P_QW/" "nginx=http://127.0.0.1:$P_NGINX/" "varnish=http://127.0.0.1:$P_VARNISH/"
fi
