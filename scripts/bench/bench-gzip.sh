#!/usr/bin/env bash
# Compressed answers, run by scripts/bench.sh --case gzip (or alone). A 20 KB JSON
# answer, every request with Accept-Encoding: gzip, level 5 on every side:
#
#   qw-hit     Quickway, a cached route with compression: true: a cache hit served from
#              the entry's stored gzip bytes (made once)
#   ng-gzip    nginx serving the file with `gzip on` (compressed on every request)
#   ng-static  nginx `gzip_static on` with the pre-compressed .gz beside it (the floor)
#   qw-miss    Quickway, an uncached route: each request goes upstream and is compressed
#   ng-proxy   nginx proxy_pass to the same backend with `gzip on` (the miss's peer)
#
# Each alone on core 0 in interleaved rounds, wrk on core 1, the backend (nginx, file as
# it is) on core 1 too. Prints medians (req/s, p50, p99, server CPU per request) and the
# ratios. Then the bytes on the wire of the same answer per coding and level (curl without
# decoding, through Quickway started once per level set).
# Usage: scripts/bench/bench-gzip.sh [--rounds N] [--duration S] [--connections C]
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=5; DURATION=8; CONNS=64; CASE=gzip
. scripts/bench/bench-common.sh
parse_bench_options "$@"
need_tools nginx:nginx-light wrk:wrk
scripts/setup.sh >/dev/null
QW=${QW_BIN:-$PWD/.build/release/quickway}
bench_workdir gzip

P_QW=18880; P_QW_ADMIN=18890; P_NG=18884; P_BACKEND=18881
mkdir -p "$WORK/www" "$WORK/nginx" "$WORK/backend"
chmod 755 "$WORK" "$WORK/www"   # nginx workers (user nobody) read the files
# A typical JSON answer: 20 KB of records with varied names and numbers.
python3 - "$WORK/www/data.json" <<'PY'
import json, random, sys
random.seed(7)
items, size = [], 0
while size < 20000:
    it = {"id": len(items), "name": "item-%d" % random.randrange(10**6), "price": round(random.random() * 1000, 2),
          "tags": random.sample(["red", "blue", "green", "sale", "new", "eco"], 2), "stock": random.randrange(500)}
    items.append(it); size += len(json.dumps(it))
open(sys.argv[1], "w").write(json.dumps({"items": items}))
PY
gzip -5 -k -n "$WORK/www/data.json"
cat > "$WORK/backend/nginx.conf" <<CONF
daemon off; worker_processes 1; error_log $WORK/backend/error.log; pid $WORK/backend/nginx.pid;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 1000000; types { application/json json; }
  server { listen 127.0.0.2:$P_BACKEND; root $WORK/www; gzip off; } }
CONF
cat > "$WORK/nginx/nginx.conf" <<CONF
daemon off; worker_processes 1; error_log $WORK/nginx/error.log; pid $WORK/nginx/nginx.pid;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 1000000; types { application/json json; }
  gzip_comp_level 5; gzip_types application/json; gzip_min_length 1024; gzip_vary on;
  upstream b { server 127.0.0.2:$P_BACKEND; keepalive 64; }
  server { listen 127.0.0.1:$P_NG; root $WORK/www;
    location /gzip/ { alias $WORK/www/; gzip on; }
    location /static/ { alias $WORK/www/; gzip_static on; }
    location /proxy/ { gzip on; gzip_proxied any; proxy_pass http://b/; proxy_http_version 1.1; proxy_set_header Connection ""; } } }
CONF
write_quickway() {   # levels: gzip br zstd
  { quickway_one_worker_conf "$P_QW" "$P_QW_ADMIN" "$P_BACKEND"
    cat <<CONF
cache: { max_bytes: 64MiB }
compression: { encodings: [gzip, br, zstd], min_bytes: 1KiB, types: [application/json], level: {gzip: $1, br: $2, zstd: $3} }
routes:
  - { name: hit, match: { path_prefix: /hit/ }, service: b, strip_prefix: true, cache: { ttl: 1h }, compression: true }
  - { name: miss, match: { path_prefix: /miss/ }, service: b, strip_prefix: true, compression: true }
CONF
  } > "$WORK/q.yaml"
  sed -i 's/log: { level: warn }/log: { level: warn, access_log: off }/' "$WORK/q.yaml"
}
write_quickway 5 4 3
taskset -c 1 nginx -p "$WORK/backend" -c "$WORK/backend/nginx.conf" & PIDS+=($!)
taskset -c 0 nginx -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" & PIDS+=($!); NGINX_MASTER=$!
taskset -c 0 "$QW" serve --config "$WORK/q.yaml" 2>"$WORK/q.log" & PIDS+=($!); QW_PID=$!
AE=(-H "Accept-Encoding: gzip")
for u in "http://127.0.0.1:$P_NG/gzip/data.json" "http://127.0.0.1:$P_NG/static/data.json" "http://127.0.0.1:$P_NG/proxy/data.json" \
         "http://127.0.0.1:$P_QW/hit/data.json" "http://127.0.0.1:$P_QW/miss/data.json"; do
  wait_up "$u"
  enc=$(curl -s -o /dev/null -D - "${AE[@]}" "$u" | tr -d '\r' | awk -F': ' 'tolower($1)=="content-encoding"{print $2}')
  [ "$enc" = gzip ] || { echo "bench gzip: $u does not answer gzip (got '$enc')" >&2; exit 1; }
  cmp -s <(curl -s --compressed "${AE[@]}" "$u") "$WORK/www/data.json" || { echo "bench gzip: $u decodes to other bytes" >&2; exit 1; }
done
NGINX_WORKER=$(pgrep -P "$NGINX_MASTER" | head -1)
cat > "$WORK/gzip.lua" <<LUA
wrk.headers["Accept-Encoding"] = "gzip"
LUA
echo "bench gzip: $ROUNDS interleaved rounds of ${DURATION}s, $CONNS connections; servers on core 0, wrk and the backend on core 1"
: > "$WORK/results"
for r in $(seq "$ROUNDS"); do
  a=$(run_one "http://127.0.0.1:$P_QW/hit/data.json" "$QW_PID" "$WORK/gzip.lua"); echo "qw-hit $a" >> "$WORK/results"
  b=$(run_one "http://127.0.0.1:$P_NG/gzip/data.json" "$NGINX_WORKER" "$WORK/gzip.lua"); echo "ng-gzip $b" >> "$WORK/results"
  c=$(run_one "http://127.0.0.1:$P_NG/static/data.json" "$NGINX_WORKER" "$WORK/gzip.lua"); echo "ng-static $c" >> "$WORK/results"
  d=$(run_one "http://127.0.0.1:$P_QW/miss/data.json" "$QW_PID" "$WORK/gzip.lua"); echo "qw-miss $d" >> "$WORK/results"
  e=$(run_one "http://127.0.0.1:$P_NG/proxy/data.json" "$NGINX_WORKER" "$WORK/gzip.lua"); echo "ng-proxy $e" >> "$WORK/results"
  echo "round $r: qw-hit $a | ng-gzip $b | ng-static $c | qw-miss $d | ng-proxy $e"
done
print_medians "$WORK/results" "gzip"
python3 - "$WORK/results" <<'PY'
import sys
sys.path.insert(0, "scripts/bench")
from bench_medians import medians
m = medians(sys.argv[1])
print(f"\nquickway hit / nginx gzip on:     req/s {m['qw-hit'][0]/m['ng-gzip'][0]:.2f}x, CPU/req {m['qw-hit'][3]/m['ng-gzip'][3]:.2f}x")
print(f"quickway hit / nginx gzip_static: req/s {m['qw-hit'][0]/m['ng-static'][0]:.2f}x, CPU/req {m['qw-hit'][3]/m['ng-static'][3]:.2f}x")
print(f"quickway miss / nginx proxy+gzip: req/s {m['qw-miss'][0]/m['ng-proxy'][0]:.2f}x, CPU/req {m['qw-miss'][3]/m['ng-proxy'][3]:.2f}x")
PY

# Bytes on the wire per coding and level (the same answer; Quickway restarted per level set).
kill "$QW_PID" 2>/dev/null; wait "$QW_PID" 2>/dev/null || true
echo -e "\nbytes on the wire for $(stat -c %s "$WORK/www/data.json") bytes of JSON (nginx gzip_static -5: $(stat -c %s "$WORK/www/data.json.gz"))"
printf "%-10s %8s %8s %8s\n" "levels" gzip br zstd
for set in "1 0 1" "5 4 3" "9 11 19" "6 5 6"; do
  write_quickway $set
  taskset -c 0 "$QW" serve --config "$WORK/q.yaml" 2>"$WORK/q.log" & PIDS+=($!); QW_PID=$!
  wait_up "http://127.0.0.1:$P_QW/miss/data.json"
  sizes=()
  for enc in gzip br zstd; do
    sizes+=("$(curl -s -o /dev/null -w '%{size_download}' -H "Accept-Encoding: $enc" "http://127.0.0.1:$P_QW/miss/data.json")")
  done
  printf "%-10s %8s %8s %8s\n" "${set// //}" "${sizes[@]}"
  kill "$QW_PID"; wait "$QW_PID" 2>/dev/null || true
done
