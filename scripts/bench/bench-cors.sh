#!/usr/bin/env bash
# CORS preflight benchmark, run by scripts/bench.sh --case cors (or alone): a preflight
# (OPTIONS with Origin, Access-Control-Request-Method and -Headers) answered by Quickway's
# route `cors` against nginx answering the same preflight itself (a `map` of allowed
# origins, `add_header` of the same fields, `return 204`; 403 for another origin). Each
# alone on core 0 in interleaved rounds, wrk on core 1; nothing is forwarded, so no
# backend runs. Both check the origin, and both answer with the same fields.
#
# Prints medians (req/s, p50, p99, server CPU per request) and the Quickway/nginx ratio.
# Usage: scripts/bench/bench-cors.sh [--rounds N] [--duration S] [--connections C]
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=5; DURATION=8; CONNS=64; CASE=cors
. scripts/bench/bench-common.sh
parse_bench_options "$@"
need_tools nginx:nginx-light wrk:wrk
scripts/setup.sh >/dev/null
QW=${QW_BIN:-$PWD/.build/release/quickway}
bench_workdir cors

P_QW=18780; P_QW_ADMIN=18790; P_NGINX=18784; BACKEND_PORT=18781
ORIGIN=https://app.example.com
mkdir -p "$WORK/nginx"
cat > "$WORK/nginx/nginx.conf" <<CONF
daemon off; worker_processes 1; error_log $WORK/nginx/error.log; pid $WORK/nginx/nginx.pid;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 1000000;
  map \$http_origin \$cors_origin { default ""; "$ORIGIN" \$http_origin; }
  server { listen 127.0.0.1:$P_NGINX;
    location / {
      if (\$cors_origin = "") { return 403; }
      if (\$request_method = OPTIONS) {
        add_header Access-Control-Allow-Origin \$cors_origin;
        add_header Access-Control-Allow-Methods "GET, POST";
        add_header Access-Control-Allow-Headers "Authorization, Content-Type";
        add_header Access-Control-Max-Age 600;
        add_header Vary "Origin, Access-Control-Request-Method, Access-Control-Request-Headers";
        return 204;
      }
      return 404;
    } } }
CONF
{ quickway_one_worker_conf "$P_QW" "$P_QW_ADMIN" "$BACKEND_PORT"
  cat <<CONF
routes:
  - name: api
    match: { path_prefix: /, methods: [GET, POST] }
    service: b
    cors: { allow_origins: ["$ORIGIN"], allow_headers: [Authorization, Content-Type], max_age: 10m }
CONF
} > "$WORK/q.yaml"
sed -i 's/log: { level: warn }/log: { level: warn, access_log: off }/' "$WORK/q.yaml"
cat > "$WORK/preflight.lua" <<LUA
wrk.method = "OPTIONS"
wrk.headers["Origin"] = "$ORIGIN"
wrk.headers["Access-Control-Request-Method"] = "POST"
wrk.headers["Access-Control-Request-Headers"] = "content-type"
LUA
taskset -c 0 nginx -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" & PIDS+=($!); NGINX_MASTER=$!
taskset -c 0 "$QW" serve --config "$WORK/q.yaml" 2>"$WORK/q.log" & PIDS+=($!); QW_PID=$!
pf=(-X OPTIONS -H "Origin: $ORIGIN" -H "Access-Control-Request-Method: POST" -H "Access-Control-Request-Headers: content-type")
for u in "http://127.0.0.1:$P_NGINX/x" "http://127.0.0.1:$P_QW/x"; do
  for _ in $(seq 150); do [ "$(curl -s -o /dev/null -w '%{http_code}' "${pf[@]}" "$u")" = 204 ] && break; sleep 0.1; done
  [ "$(curl -s -o /dev/null -w '%{http_code}' "${pf[@]}" "$u")" = 204 ] || { echo "bench cors: $u does not answer the preflight" >&2; exit 1; }
done
NGINX_WORKER=$(pgrep -P "$NGINX_MASTER" | head -1)
echo "bench cors: $ROUNDS interleaved rounds of ${DURATION}s, $CONNS connections; servers on core 0, wrk on core 1"
taskset -c 1 wrk -t1 -c"$CONNS" -d2s -s "$WORK/preflight.lua" "http://127.0.0.1:$P_QW/x" >/dev/null
taskset -c 1 wrk -t1 -c"$CONNS" -d2s -s "$WORK/preflight.lua" "http://127.0.0.1:$P_NGINX/x" >/dev/null
: > "$WORK/results"
for r in $(seq "$ROUNDS"); do
  q=$(run_one "http://127.0.0.1:$P_QW/x" "$QW_PID" "$WORK/preflight.lua"); echo "qw-preflight $q" >> "$WORK/results"
  n=$(run_one "http://127.0.0.1:$P_NGINX/x" "$NGINX_WORKER" "$WORK/preflight.lua"); echo "ng-preflight $n" >> "$WORK/results"
  echo "round $r: quickway $q | nginx $n   (req/s p50ms p99ms cpu_us/req non2xx)"
done
print_medians "$WORK/results" "cors"
python3 - "$WORK/results" <<'PY'
import sys
sys.path.insert(0, "scripts/bench")
from bench_medians import medians
m = medians(sys.argv[1])
q, n = m["qw-preflight"], m["ng-preflight"]
print(f"\nratio quickway/nginx preflight: req/s {q[0]/n[0]:.2f}x, CPU/req {q[3]/n[3]:.2f}x")
PY
