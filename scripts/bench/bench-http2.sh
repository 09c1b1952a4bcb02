#!/usr/bin/env bash
# HTTP/2 benchmark, run by scripts/bench.sh --case http2 (or alone): Quickway's
# tls_listen with ALPN h2 against nginx `listen ... ssl http2` doing the same job (HTTP/2
# over TLS, proxying a 1 KB JSON to the same backend over kept-alive HTTP/1.1
# connections), same certificate (ECDSA P-256), each alone on core 0 in interleaved
# rounds; the load tools and the backend on core 1.
#
#   *-1stream     h2load, 64 connections, 1 stream each at a time: req/s
#   *-100streams  h2load, 4 connections, 100 concurrent streams each: req/s
#   *-handshake   h2load, 256 new connections of one request each, repeated: full TLS
#                 handshakes (new connections) per second
#   *-resumed     openssl s_time -reuse: resumed handshakes per second (TLS only)
#
# Prints medians and Quickway/nginx ratios (target >= 1.0 on each).
# Usage: scripts/bench/bench-http2.sh [--rounds N] [--duration S]
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=5; DURATION=8; CONNS=64; CASE=http2
. scripts/bench/bench-common.sh
parse_bench_options "$@"
need_tools nginx:nginx-light h2load:nghttp2-client openssl:openssl
scripts/setup.sh >/dev/null
QW=${QW_BIN:-$PWD/.build/release/quickway}
bench_workdir http2

BACKEND=127.0.0.2:18781; P_QW=18780; P_QW_ADMIN=18790; P_QW_TLS=18783; P_NGINX=18784
BODY=$(python3 -c 'import json; print(json.dumps({"items": [{"id": i, "name": "item-%04d" % i} for i in range(40)]})[:1024])')
mkdir -p "$WORK/backend" "$WORK/nginx"
write_bench_cert "$WORK"
write_backend_conf "$WORK/backend" "$BACKEND" "$BODY"
cat > "$WORK/nginx/nginx.conf" <<CONF
daemon off; worker_processes 1; error_log $WORK/nginx/error.log; pid $WORK/nginx/nginx.pid;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 1000000; http2_max_concurrent_streams 128;
  upstream backend { server $BACKEND; keepalive 128; }
  server { listen 127.0.0.1:$P_NGINX ssl http2;
    ssl_certificate $WORK/cert.pem; ssl_certificate_key $WORK/key.pem;
    ssl_protocols TLSv1.2 TLSv1.3; ssl_session_tickets on;
    location / { proxy_pass http://backend; proxy_http_version 1.1; proxy_set_header Connection ""; } } }
CONF
write_h2_quickway_conf "$WORK" "$P_QW" "$P_QW_ADMIN" "$P_QW_TLS" "$BACKEND"
taskset -c 1 nginx -p "$WORK/backend" -c "$WORK/backend/nginx.conf" & PIDS+=($!)
taskset -c 0 nginx -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" & PIDS+=($!); NGINX_MASTER=$!
taskset -c 0 "$QW" serve --config "$WORK/q.yaml" 2>"$WORK/q.log" & PIDS+=($!); QW_PID=$!
wait_up "http://$BACKEND/"
for u in "https://127.0.0.1:$P_NGINX/" "https://127.0.0.1:$P_QW_TLS/"; do
  for _ in $(seq 150); do curl -skf --http2 -o /dev/null "$u" && break; sleep 0.1; done
done
NGINX_WORKER=$(pgrep -P "$NGINX_MASTER" | head -1)
echo "bench http2: $ROUNDS interleaved rounds; servers on core 0, h2load/s_time + backend on core 1; ECDSA P-256, $(openssl version | cut -d' ' -f1-2)"

# One h2load run on core 1 charging PID's CPU: "req_per_s p50_ms p99_ms cpu_us_per_req failed".
h2_one() {
  local url=$1 pid=$2; shift 2
  local out t0 t1
  t0=$(cpu_ticks "$pid")
  out=$(taskset -c 1 h2load "$@" "$url" 2>&1)
  t1=$(cpu_ticks "$pid")
  python3 - "$out" "$t0" "$t1" "$(getconf CLK_TCK)" <<'PY'
import re, sys
out, t0, t1, hz = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
fin = re.search(r"finished in ([\d.]+)(ms|s), ([\d.]+) req/s", out)
done = re.search(r"requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded, (\d+) failed", out)
def ms(v, unit): return float(v) * {"us": 0.001, "ms": 1, "s": 1000}[unit]
lat = re.search(r"time for request:\s+([\d.]+)(us|ms|s)\s+([\d.]+)(us|ms|s)\s+([\d.]+)(us|ms|s)", out)
# h2load reports min/max/mean; the mean stands in for p50 and the max for p99.
mean = ms(lat.group(5), lat.group(6)) if lat else 0
mx = ms(lat.group(3), lat.group(4)) if lat else 0
total = int(done.group(1)) if done else 1
print(f"{float(fin.group(3)):.0f} {mean:.3f} {mx:.3f} {(t1 - t0) / hz * 1e6 / max(total, 1):.2f} {done.group(3) if done else 0}")
PY
}

# Resumed (-reuse) or full (-new) TLS handshakes per second with openssl s_time.
stime_one() {
  local port=$1 mode=$2 out
  out=$(taskset -c 1 openssl s_time -connect "127.0.0.1:$port" "$mode" -time "$DURATION" 2>&1 || true)
  python3 - "$out" <<'PY'
import re, sys
m = re.search(r"([\d.]+) connections/user sec", sys.argv[1])
n = re.search(r"(\d+) connections in ([\d.]+)s", sys.argv[1])
rate = int(n.group(1)) / float(n.group(2)) if n else 0
print(f"{rate:.0f} 0 0 0 0")
PY
}

for u in "https://127.0.0.1:$P_QW_TLS/" "https://127.0.0.1:$P_NGINX/"; do
  taskset -c 1 h2load -c 16 -m 10 -D 2 "$u" >/dev/null 2>&1 || true
done
: > "$WORK/results"
for r in $(seq "$ROUNDS"); do
  for side in qw ng; do
    if [ $side = qw ]; then url="https://127.0.0.1:$P_QW_TLS/"; pid=$QW_PID; port=$P_QW_TLS; else url="https://127.0.0.1:$P_NGINX/"; pid=$NGINX_WORKER; port=$P_NGINX; fi
    echo "$side-1stream $(h2_one "$url" "$pid" -c 64 -m 1 -t 1 -D "$DURATION")" >> "$WORK/results"
    echo "$side-100streams $(h2_one "$url" "$pid" -c 4 -m 100 -t 1 -D "$DURATION")" >> "$WORK/results"
    echo "$side-handshake $(h2_one "$url" "$pid" -c 256 -n 256 -m 1 -t 1)" >> "$WORK/results"
    echo "$side-resumed $(stime_one "$port" -reuse)" >> "$WORK/results"
  done
  echo "round $r: $(tail -8 "$WORK/results" | awk '{printf "%s %s; ", $1, $2}')"
done
print_medians "$WORK/results" "http2"
python3 - "$WORK/results" <<'PY'
import sys
sys.path.insert(0, "scripts/bench")
from bench_medians import medians
m = medians(sys.argv[1])
print()
for kind in ("1stream", "100streams", "handshake", "resumed"):
    q, n = m[f"qw-{kind}"], m[f"ng-{kind}"]
    cpu = f", CPU/req {q[3]/n[3]:.2f}x" if n[3] else ""
    print(f"ratio quickway/nginx {kind}: {q[0]/n[0]:.2f}x (target >= 1.0){cpu}")
PY
