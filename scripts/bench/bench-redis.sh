#!/usr/bin/env bash
# Shared-tier benchmark, run by scripts/bench.sh --case redis (or alone).
#
# Cache-hit throughput for one 1 KB object in three set-ups, each alone on core 0 in
# interleaved rounds; wrk, the backend and redis-server share core 1:
#   qw-local   Quickway answering from its local tier (the usual hit)
#   qw-redis   Quickway with a cold local tier: cache.max_bytes is too small to keep the
#              entry, so every request is a local miss answered from Redis (GET round trip)
#   nginx      nginx proxy_cache hit with open_file_cache (a peer's cache hit, for scale)
# Prints req/s, p50, p99, gateway CPU per request, and Redis's own CPU per request in the
# qw-redis rounds (charged separately: it runs on core 1).
#
# Usage: scripts/bench/bench-redis.sh [--rounds N] [--duration S] [--connections C]
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=5; DURATION=8; CONNS=64; CASE=redis
. scripts/bench/bench-common.sh
parse_bench_options "$@"
need_tools nginx:nginx-light wrk:wrk redis-server:redis-server
scripts/setup.sh >/dev/null
QW=$PWD/.build/release/quickway
bench_workdir redis

BACKEND=127.0.0.2:18481; REDIS_PORT=18489
P_LOCAL=18480; P_LOCAL_ADMIN=18490; P_REDIS=18482; P_REDIS_ADMIN=18492; P_NGINX=18483
BODY=$(python3 -c 'import json; print(json.dumps({"items": [{"id": i, "name": "item-%04d" % i} for i in range(40)]})[:1024])')
mkdir -p "$WORK/backend" "$WORK/nginx/cache"
chmod 755 "$WORK" "$WORK/nginx"; chmod 777 "$WORK/nginx/cache"
write_backend_conf "$WORK/backend" "$BACKEND" "$BODY"
cat > "$WORK/nginx/nginx.conf" <<CONF
daemon off; worker_processes 1; error_log $WORK/nginx/error.log; pid $WORK/nginx/nginx.pid;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 1000000; open_file_cache max=10000 inactive=60s;
  proxy_cache_path $WORK/nginx/cache levels=1:2 keys_zone=c:10m max_size=256m;
  upstream backend { server $BACKEND; keepalive 128; }
  server { listen 127.0.0.1:$P_NGINX; location / { proxy_pass http://backend; proxy_http_version 1.1;
    proxy_set_header Connection ""; proxy_cache c; proxy_cache_valid 200 10m; } } }
CONF
# $1 port, $2 admin port, $3 cache.max_bytes
qw_config() {
  cat <<CONF
listen: 127.0.0.1:$1
workers: 1
admin: { listen: 127.0.0.1:$2 }
log: { level: warn }
cache: { max_bytes: $3 }
redis: { url: "redis://127.0.0.1:$REDIS_PORT/0", timeout: 50ms }
services:
  backend: { host: backend.local, port: ${BACKEND#*:}, ips: ["${BACKEND%:*}"] }
routes:
  - { name: cached, match: { path_prefix: / }, service: backend, cache: { ttl: 600s } }
CONF
}
qw_config $P_LOCAL $P_LOCAL_ADMIN 256MiB > "$WORK/local.yaml"
qw_config $P_REDIS $P_REDIS_ADMIN 1KiB > "$WORK/redis.yaml"

taskset -c 1 redis-server --port $REDIS_PORT --bind 127.0.0.1 --save "" --appendonly no --dir "$WORK" >"$WORK/redis.log" 2>&1 & PIDS+=($!); REDIS_PID=$!
taskset -c 1 nginx -p "$WORK/backend" -c "$WORK/backend/nginx.conf" & PIDS+=($!)
for _ in $(seq 100); do redis-cli -p $REDIS_PORT ping >/dev/null 2>&1 && break; sleep 0.1; done
taskset -c 0 "$QW" serve --config "$WORK/local.yaml" 2>"$WORK/local.log" & PIDS+=($!); LOCAL_PID=$!
taskset -c 0 "$QW" serve --config "$WORK/redis.yaml" 2>"$WORK/redis-gw.log" & PIDS+=($!); REDISGW_PID=$!
taskset -c 0 nginx -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" & PIDS+=($!); NGINX_MASTER=$!
for url in "http://$BACKEND/" "http://127.0.0.1:$P_LOCAL/obj" "http://127.0.0.1:$P_REDIS/obj" "http://127.0.0.1:$P_NGINX/obj"; do wait_up "$url"; done
NGINX_WORKER=$(pgrep -P "$NGINX_MASTER" | head -1)

echo "shared tier: $ROUNDS interleaved rounds of ${DURATION}s, $CONNS connections, one 1 KB object; gateways on core 0, wrk+backend+redis on core 1"
for p in $P_LOCAL $P_REDIS $P_NGINX; do
  for _ in 1 2 3; do curl -s -o /dev/null "http://127.0.0.1:$p/obj"; done
  taskset -c 1 wrk -t1 -c"$CONNS" -d2s "http://127.0.0.1:$p/obj" >/dev/null
done
: > "$WORK/results"
for r in $(seq "$ROUNDS"); do
  line="round $r:"
  for spec in "qw-local:$P_LOCAL:$LOCAL_PID" "qw-redis:$P_REDIS:$REDISGW_PID" "nginx:$P_NGINX:$NGINX_WORKER"; do
    IFS=: read -r name port pid <<<"$spec"
    rt0=$(cpu_ticks "$REDIS_PID")
    v=$(run_one "http://127.0.0.1:$port/obj" "$pid")
    rt1=$(cpu_ticks "$REDIS_PID")
    total=$(grep -oE "[0-9]+ requests in" "$WORK/last-wrk.txt" | grep -oE "^[0-9]+")
    redis_us=$(python3 -c "print(f'{($rt1 - $rt0) / $(getconf CLK_TCK) * 1e6 / max($total, 1):.2f}')")
    echo "$name $v $redis_us" >> "$WORK/results"
    line="$line $name $v redis:$redis_us |"
  done
  echo "$line   (req/s p50ms p99ms cpu_us/req non2xx)"
done
print_medians "$WORK/results" "cache hit"
curl -s "http://127.0.0.1:$P_REDIS_ADMIN/stats" | python3 -c 'import json,sys; s=json.load(sys.stdin); r=s["redis"]; print("\nqw-redis: local entries %d, redis hits %d, misses %d, timeouts %d, unavailable %d" % (s["cache"]["entries"], r["cache"]["hits"], r["cache"]["misses"], r["timeouts"], r["unavailable"]))'
python3 - "$WORK/results" <<'PY'
import sys
sys.path.insert(0, "scripts/bench")
from bench_medians import medians
med = medians(sys.argv[1])
l, r, n = med["qw-local"], med["qw-redis"], med["nginx"]
print(f"ratio qw-redis/qw-local: req/s {r[0] / l[0]:.2f}x, p99 {r[2] / l[2]:.2f}x, gateway CPU/req {r[3] / l[3]:.2f}x; "
      f"Redis CPU per request {r[5]:.2f} us")
print(f"ratio qw-redis/nginx proxy_cache hit: req/s {r[0] / n[0]:.2f}x")
PY
