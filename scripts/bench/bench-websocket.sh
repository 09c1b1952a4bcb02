#!/usr/bin/env bash
# WebSocket benchmark, run by scripts/bench.sh --case websocket (or alone): Quickway on a
# route with a `websocket` section against nginx proxying the same WebSocket backend
# (proxy_pass with Upgrade/Connection set), each alone on core 0 in interleaved rounds;
# the echo backend and the load generator (scripts/bench/bench_ws_load.c, C with epoll,
# compiled here) on core 1.
#
# The load: CONNECTIONS (default 100) WebSocket connections, each in a closed loop
# sending a 64-byte binary message and waiting for its echo. Reported per proxy:
# round trips (messages) per second, round-trip p50 and p99, and the proxy's CPU per
# message (each message crosses it twice), from /proc/PID/stat.
#
# Usage: scripts/bench/bench-websocket.sh [--rounds N] [--duration S] [--connections C]
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=3; DURATION=8; CONNS=100; CASE=websocket
. scripts/bench/bench-common.sh
parse_bench_options "$@"
need_tools nginx:nginx-light cc:gcc
QW=${QW_BIN:-$PWD/.build/release/quickway}
bench_workdir websocket
cc -O2 -o "$WORK/load" scripts/bench/bench_ws_load.c -lcrypto

BACKEND_HOST=127.0.0.2; BACKEND_PORT=18781; P_QW=18780; P_QW_ADMIN=18790; P_NGINX=18784; SIZE=64
mkdir -p "$WORK/nginx"
cat > "$WORK/nginx/nginx.conf" <<CONF
daemon off; worker_processes 1; error_log $WORK/nginx/error.log; pid $WORK/nginx/nginx.pid;
events { worker_connections 4096; }
http { access_log off;
  upstream ws { server $BACKEND_HOST:$BACKEND_PORT; }
  server { listen 127.0.0.1:$P_NGINX;
    location / { proxy_pass http://ws; proxy_http_version 1.1; proxy_buffering off;
      proxy_set_header Upgrade \$http_upgrade; proxy_set_header Connection "upgrade";
      proxy_read_timeout 1h; proxy_send_timeout 1h; } } }
CONF
cat > "$WORK/q.yaml" <<CONF
listen: 127.0.0.1:$P_QW
workers: 1
admin: { listen: 127.0.0.1:$P_QW_ADMIN }
log: { level: warn, access_log: off }
services:
  ws: { host: ws.local, port: $BACKEND_PORT, ips: [$BACKEND_HOST], probe: { kind: tcp, interval: 2s } }
routes:
  - { name: ws, match: { path_prefix: / }, service: ws, websocket: { heartbeat: 30s, idle_timeout: 10m } }
CONF
taskset -c 1 "$WORK/load" backend "$BACKEND_HOST" "$BACKEND_PORT" > "$WORK/backend.out" & PIDS+=($!)
taskset -c 0 nginx -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" & PIDS+=($!); NGINX_MASTER=$!
taskset -c 0 "$QW" serve --config "$WORK/q.yaml" 2>"$WORK/q.log" & PIDS+=($!); QW_PID=$!
for _ in $(seq 100); do grep -q ready "$WORK/backend.out" 2>/dev/null && break; sleep 0.1; done
wait_up "http://127.0.0.1:$P_QW_ADMIN/health"
for _ in $(seq 100); do [ -n "$(pgrep -P "$NGINX_MASTER" | head -1)" ] && break; sleep 0.1; done
NGINX_WORKER=$(pgrep -P "$NGINX_MASTER" | head -1)

# One client run on core 1 against PORT, charging the CPU of PID:
# "msg_per_s p50_ms p99_ms cpu_us_per_msg".
ws_run() {
  local port=$1 pid=$2 out t0 t1
  t0=$(cpu_ticks "$pid")
  out=$(taskset -c 1 "$WORK/load" client 127.0.0.1 "$port" /echo "$CONNS" "$DURATION" "$SIZE")
  t1=$(cpu_ticks "$pid")
  python3 -c "import sys; r, p50, p99 = sys.argv[1].split(); t = (int(sys.argv[3]) - int(sys.argv[2])) / int(sys.argv[4]); n = float(r) * (float(sys.argv[5]) + 1); print(f'{r} {p50} {p99} {t * 1e6 / max(n, 1):.2f}')" \
    "$out" "$t0" "$t1" "$(getconf CLK_TCK)" "$DURATION"
}

echo "bench websocket: $ROUNDS interleaved rounds of ${DURATION}s, $CONNS connections, ${SIZE}-byte echo; proxies on core 0, backend+client on core 1; $(nginx -v 2>&1)"
: > "$WORK/results"
for r in $(seq "$ROUNDS"); do
  q=$(ws_run "$P_QW" "$QW_PID"); echo "quickway $q" >> "$WORK/results"
  n=$(ws_run "$P_NGINX" "$NGINX_WORKER"); echo "nginx $n" >> "$WORK/results"
  echo "round $r: quickway $q | nginx $n   (msg/s p50ms p99ms cpu_us/msg)"
done
python3 - "$WORK/results" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, *v = line.split()
    rows.setdefault(name, []).append([float(x) for x in v])
med = {k: [statistics.median(c) for c in zip(*v)] for k, v in rows.items()}
print("\nmedians            msg/s   p50 ms   p99 ms   cpu us/msg")
for k, (r, p50, p99, cpu) in med.items():
    print(f"{k:<12} {r:>11.0f} {p50:>8.3f} {p99:>8.3f} {cpu:>12.2f}")
q, n = med["quickway"], med["nginx"]
print(f"ratio quickway/nginx: msg/s {q[0]/n[0]:.2f}x, p50 {q[1]/n[1]:.2f}x, p99 {q[2]/n[2]:.2f}x, CPU/msg {q[3]/n[3]:.2f}x")
PY
