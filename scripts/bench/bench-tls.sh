#!/usr/bin/env bash
# TLS benchmark, run by scripts/bench.sh --case tls (or alone): Quickway's tls_listen
# against nginx `listen ... ssl` doing the same job (HTTP/1.1 over TLS, proxying a 1 KB
# JSON to the same backend over kept-alive connections), same certificate (ECDSA P-256),
# each alone on core 0 in interleaved rounds; wrk and the backend on core 1.
#
#   *-keepalive   64 kept-alive TLS connections: requests per second over TLS
#   *-handshake   "Connection: close" on every request, so each request is a new TCP
#                 connection and a full TLS handshake (wrk does not resume sessions):
#                 new connections per second
#
# Prints medians (req/s, p50, p99, server CPU per request) and Quickway/nginx ratios.
# Usage: scripts/bench/bench-tls.sh [--rounds N] [--duration S] [--connections C]
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=5; DURATION=8; CONNS=64; CASE=tls
. scripts/bench/bench-common.sh
parse_bench_options "$@"
need_tools nginx:nginx-light wrk:wrk openssl:openssl
scripts/setup.sh >/dev/null
QW=${QW_BIN:-$PWD/.build/release/quickway}
bench_workdir tls

BACKEND=127.0.0.2:18581; P_QW=18580; P_QW_ADMIN=18590; P_QW_TLS=18583; P_NGINX=18584
BODY=$(python3 -c 'import json; print(json.dumps({"items": [{"id": i, "name": "item-%04d" % i} for i in range(40)]})[:1024])')
mkdir -p "$WORK/backend" "$WORK/nginx"
write_bench_cert "$WORK"
write_backend_conf "$WORK/backend" "$BACKEND" "$BODY"
cat > "$WORK/nginx/nginx.conf" <<CONF
daemon off; worker_processes 1; error_log $WORK/nginx/error.log; pid $WORK/nginx/nginx.pid;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 1000000;
  upstream backend { server $BACKEND; keepalive 128; }
  server { listen 127.0.0.1:$P_NGINX ssl;
    ssl_certificate $WORK/cert.pem; ssl_certificate_key $WORK/key.pem;
    ssl_protocols TLSv1.2 TLSv1.3; ssl_session_tickets on;
    location / { proxy_pass http://backend; proxy_http_version 1.1; proxy_set_header Connection ""; } } }
CONF
cat > "$WORK/q.yaml" <<CONF
listen: 127.0.0.1:$P_QW
workers: 1
admin: { listen: 127.0.0.1:$P_QW_ADMIN }
tls_listen:
  listen: 127.0.0.1:$P_QW_TLS
  certificates: [ { cert_file: $WORK/cert.pem, key_file: $WORK/key.pem } ]
  alpn: [http/1.1]
log: { level: warn, access_log: off }
services: { backend: { host: backend.local, port: ${BACKEND#*:}, ips: [${BACKEND%:*}] } }
routes: [ { name: all, match: { path_prefix: / }, service: backend } ]
CONF
taskset -c 1 nginx -p "$WORK/backend" -c "$WORK/backend/nginx.conf" & PIDS+=($!)
taskset -c 0 nginx -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" & PIDS+=($!); NGINX_MASTER=$!
taskset -c 0 "$QW" serve --config "$WORK/q.yaml" 2>"$WORK/q.log" & PIDS+=($!); QW_PID=$!
wait_up "http://$BACKEND/"
for u in "https://127.0.0.1:$P_NGINX/" "https://127.0.0.1:$P_QW_TLS/"; do
  for _ in $(seq 150); do curl -skf -o /dev/null "$u" && break; sleep 0.1; done
done
NGINX_WORKER=$(pgrep -P "$NGINX_MASTER" | head -1)
echo "bench tls: $ROUNDS interleaved rounds of ${DURATION}s; servers on core 0, wrk+backend on core 1; ECDSA P-256, $(openssl version | cut -d' ' -f1-2)"
cat > "$WORK/close.lua" <<'LUA'
wrk.headers["Connection"] = "close"
LUA
taskset -c 1 wrk -t1 -c"$CONNS" -d2s "https://127.0.0.1:$P_QW_TLS/" >/dev/null
taskset -c 1 wrk -t1 -c"$CONNS" -d2s "https://127.0.0.1:$P_NGINX/" >/dev/null
: > "$WORK/results"
for r in $(seq "$ROUNDS"); do
  q=$(run_one "https://127.0.0.1:$P_QW_TLS/" "$QW_PID"); echo "qw-keepalive $q" >> "$WORK/results"
  n=$(run_one "https://127.0.0.1:$P_NGINX/" "$NGINX_WORKER"); echo "ng-keepalive $n" >> "$WORK/results"
  qh=$(CONNS=16 run_one "https://127.0.0.1:$P_QW_TLS/" "$QW_PID" "$WORK/close.lua"); echo "qw-handshake $qh" >> "$WORK/results"
  nh=$(CONNS=16 run_one "https://127.0.0.1:$P_NGINX/" "$NGINX_WORKER" "$WORK/close.lua"); echo "ng-handshake $nh" >> "$WORK/results"
  echo "round $r: keep-alive quickway $q | nginx $n; handshake quickway $qh | nginx $nh   (req/s p50ms p99ms cpu_us/req non2xx)"
done
print_medians "$WORK/results" "tls"
python3 - "$WORK/results" <<'PY'
import sys
sys.path.insert(0, "scripts/bench")
from bench_medians import medians
m = medians(sys.argv[1])
print()
for kind in ("keepalive", "handshake"):
    q, n = m[f"qw-{kind}"], m[f"ng-{kind}"]
    print(f"ratio quickway/nginx {kind}: req/s {q[0]/n[0]:.2f}x (target >= 1.0), CPU/req {q[3]/n[3]:.2f}x")
PY
