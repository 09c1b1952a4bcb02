#!/usr/bin/env bash
# Scaling table, run by scripts/bench.sh --case scaling (or alone): proxied GETs (1 KB
# JSON from an nginx backend, upstream keep-alive) through Quickway and through nginx
# `proxy_pass`, with 1 and 2 workers each and 1, 64 and 1,024 client connections.
#
# Placement: with 1 worker, the proxy alone on core 0 and the backend and wrk on core 1
# (as in the proxy case); with 2 workers, everything shares both cores (this machine has
# two), so the 2-worker rows measure how each proxy shares a loaded machine, not a
# clean doubling. nginx keeps up to 1,024 idle upstream connections per worker
# (`keepalive 1024`), and so does Quickway (`services.backend.keepalive: 1024`). Rounds are
# interleaved (Quickway, nginx) per cell; the table gives median req/s and p99 and the
# Quickway/nginx ratio of each.
#
# Usage: scripts/bench/bench-scaling.sh [--rounds N] [--duration S]
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=3; DURATION=4; CONNS=64; CASE=scaling
. scripts/bench/bench-common.sh
parse_bench_options "$@"
need_tools nginx:nginx-light wrk:wrk
QW=${QW_BIN:-$PWD/.build/release/quickway}
bench_workdir scaling
BACKEND_PORT=18981; QW_PORT=18980; QW_ADMIN=18990; NGINX_PORT=18982
BODY=$(python3 -c 'import json; print(json.dumps({"items": [{"id": i, "name": "item-%04d" % i} for i in range(40)]})[:1024])')
write_backend_conf "$WORK/backend" "127.0.0.2:$BACKEND_PORT" "$BODY"
taskset -c 1 nginx -p "$WORK/backend" -c "$WORK/backend/nginx.conf" & PIDS+=($!)

# Starts both proxies with W workers on CPUS; sets QW_PID and NGINX_MASTER.
start_proxies() {
  local w=$1 cpus=$2
  mkdir -p "$WORK/nginx-$w"
  cat > "$WORK/nginx-$w/nginx.conf" <<CONF
daemon off; worker_processes $w; error_log $WORK/nginx-$w/error.log; pid $WORK/nginx-$w/nginx.pid;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 1000000;
  upstream backend { server 127.0.0.2:$BACKEND_PORT; keepalive 1024; }
  server { listen 127.0.0.1:$NGINX_PORT reuseport;
    location / { proxy_pass http://backend; proxy_http_version 1.1; proxy_set_header Connection "";
                 proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for; } } }
CONF
  cat > "$WORK/q-$w.yaml" <<CONF
listen: 127.0.0.1:$QW_PORT
workers: $w
admin: { listen: 127.0.0.1:$QW_ADMIN }
log: { level: warn, access_log: off }
limits: { max_connections: 4096 }
services: { backend: { host: backend.local, port: $BACKEND_PORT, ips: [127.0.0.2], keepalive: 1024 } }
routes: [ { name: all, match: { path_prefix: / }, service: backend, auth: off } ]
CONF
  taskset -c "$cpus" "$QW" serve --config "$WORK/q-$w.yaml" 2>"$WORK/q-$w.log" & PIDS+=($!); QW_PID=$!
  taskset -c "$cpus" nginx -p "$WORK/nginx-$w" -c "$WORK/nginx-$w/nginx.conf" & PIDS+=($!); NGINX_MASTER=$!
  wait_up "http://127.0.0.1:$QW_ADMIN/health"
  wait_up "http://127.0.0.1:$NGINX_PORT/"
}

stop_proxies() {
  kill "$QW_PID" "$NGINX_MASTER" 2>/dev/null || true
  wait "$QW_PID" "$NGINX_MASTER" 2>/dev/null || true
}

# One wrk run: "req_per_s p99_ms" (wrk on WRK_CPUS).
one() {
  local url=$1 conns=$2 threads=1 out
  [ "$conns" -ge 64 ] && threads=2
  [ "$conns" -lt "$threads" ] && threads=$conns
  out=$(taskset -c "$WRK_CPUS" wrk -t"$threads" -c"$conns" -d"${DURATION}s" --latency "$url" 2>&1)
  python3 - "$out" <<'PY'
import re, sys
out = sys.argv[1]
def ms(s):
    v, unit = re.match(r"([\d.]+)(us|ms|s)", s).groups()
    return float(v) * {"us": 0.001, "ms": 1, "s": 1000}[unit]
rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
p99 = ms(re.search(r"^\s*99%\s+(\S+)", out, re.M).group(1))
bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
print(f"{rps:.0f} {p99:.3f} {bad.group(1) if bad else 0}")
PY
}

echo "bench scaling: $ROUNDS interleaved rounds of ${DURATION}s per cell; $(nginx -v 2>&1)"
: > "$WORK/results"
for w in 1 2; do
  if [ "$w" = 1 ]; then cpus=0; WRK_CPUS=1; else cpus=0,1; WRK_CPUS=0,1; fi
  start_proxies "$w" "$cpus"
  for c in 1 64 1024; do
    taskset -c "$WRK_CPUS" wrk -t1 -c"$c" -d1s "http://127.0.0.1:$QW_PORT/" >/dev/null 2>&1 || true
    taskset -c "$WRK_CPUS" wrk -t1 -c"$c" -d1s "http://127.0.0.1:$NGINX_PORT/" >/dev/null 2>&1 || true
    for r in $(seq "$ROUNDS"); do
      q=$(one "http://127.0.0.1:$QW_PORT/" "$c"); n=$(one "http://127.0.0.1:$NGINX_PORT/" "$c")
      echo "$w $c quickway $q" >> "$WORK/results"; echo "$w $c nginx $n" >> "$WORK/results"
      echo "workers $w, $c connections, round $r: quickway $q | nginx $n   (req/s p99ms non2xx)"
    done
  done
  stop_proxies
done
python3 - "$WORK/results" <<'PY'
import statistics, sys
cells = {}
for line in open(sys.argv[1]):
    w, c, name, rps, p99, bad = line.split()
    cells.setdefault((int(w), int(c)), {}).setdefault(name, []).append((float(rps), float(p99), int(bad)))
print("\nworkers  connections   quickway req/s   nginx req/s   ratio   quickway p99 ms   nginx p99 ms   ratio")
for (w, c), d in sorted(cells.items()):
    q = [statistics.median(x) for x in zip(*d["quickway"])]
    n = [statistics.median(x) for x in zip(*d["nginx"])]
    print(f"{w:>7}  {c:>11}   {q[0]:>14.0f}   {n[0]:>11.0f}   {q[0]/n[0]:>4.2f}x   {q[1]:>15.3f}   {n[1]:>12.3f}   {q[1]/n[1]:>4.2f}x"
          + ("   (non-2xx answers!)" if q[2] or n[2] else ""))
PY
