#!/usr/bin/env bash
# Overload benchmark, run by scripts/bench.sh --case overload (or alone): a slow backend
# (scripts/bench/overload_load.py: at most 4 requests at once, 20 ms each, so 200 a
# second; the rest queue inside it) behind four proxies, each alone on core 0 in
# interleaved rounds, with the backend and an open-loop load generator on core 1:
#
#   quickway        services.b.concurrency: {max: 4} (the backend's capacity, 1 worker)
#   quickway-nolim  the same without the section (the behaviour before it)
#   nginx           plain proxy_pass with upstream keepalive
#   nginx-maxconns  the same with `server ... max_conns=4` (nginx OSS has no queue:
#                   past it, 502 "no live upstreams")
#
# Each round: the unloaded p99 (an eighth of capacity, 2 s), then 2x capacity for
# DURATION s (open-loop: requests start on schedule whatever the answers do). Prints per
# proxy the medians over rounds of the unloaded p99, the admitted (200) p50/p99, calls
# refused (non-200) and the admitted p99 over the unloaded p99.
# Usage: scripts/bench/bench-overload.sh [--rounds N] [--duration S]
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=3; DURATION=5; CONNS=0; CASE=overload
. scripts/bench/bench-common.sh
parse_bench_options "$@"
need_tools nginx:nginx-light
scripts/setup.sh >/dev/null
QW=${QW_BIN:-$PWD/.build/release/quickway}
bench_workdir overload

BACKEND_PORT=18881; P_QW=18880; P_QW_ADMIN=18890; P_QW2=18882; P_QW2_ADMIN=18892; P_NGINX=18884; P_NGINX2=18886
taskset -c 1 python3 scripts/bench/overload_load.py backend --host 127.0.0.2 --port "$BACKEND_PORT" --workers 4 --service-ms 20 \
  >/dev/null & PIDS+=($!)
for variant in limited plain; do
  mkdir -p "$WORK/nginx-$variant"
  if [ $variant = limited ]; then server="server 127.0.0.2:$BACKEND_PORT max_conns=4;"; port=$P_NGINX2
  else server="server 127.0.0.2:$BACKEND_PORT;"; port=$P_NGINX; fi
  cat > "$WORK/nginx-$variant/nginx.conf" <<CONF
daemon off; worker_processes 1; error_log $WORK/nginx-$variant/error.log; pid $WORK/nginx-$variant/nginx.pid;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 1000000;
  upstream backend { $server keepalive 128; }
  server { listen 127.0.0.1:$port;
    location / { proxy_pass http://backend; proxy_http_version 1.1; proxy_set_header Connection ""; } } }
CONF
  taskset -c 0 nginx -p "$WORK/nginx-$variant" -c "$WORK/nginx-$variant/nginx.conf" & PIDS+=($!)
done
for variant in limited plain; do
  { if [ $variant = limited ]; then quickway_one_worker_conf "$P_QW" "$P_QW_ADMIN" "$BACKEND_PORT"; else quickway_one_worker_conf "$P_QW2" "$P_QW2_ADMIN" "$BACKEND_PORT"; fi
    [ $variant = limited ] && echo "    concurrency: { max: 4 }" || true
    echo "routes: [ { name: all, match: { path_prefix: / }, service: b } ]"
  } > "$WORK/q-$variant.yaml"
  # The service's one-line map becomes a block, so concurrency can go under it.
  sed -i -e 's/log: { level: warn }/log: { level: warn, access_log: off }/' \
         -e "s/^services: { b: { host: backend.local, port: $BACKEND_PORT, ips: \[127.0.0.2\] } }/services:\n  b:\n    host: backend.local\n    port: $BACKEND_PORT\n    ips: [127.0.0.2]/" \
         "$WORK/q-$variant.yaml"
  taskset -c 0 "$QW" serve --config "$WORK/q-$variant.yaml" 2>"$WORK/q-$variant.log" & PIDS+=($!)
done
wait_up "http://127.0.0.1:$P_QW_ADMIN/health"; wait_up "http://127.0.0.1:$P_QW2_ADMIN/health"
wait_up "http://127.0.0.1:$P_NGINX/"; wait_up "http://127.0.0.1:$P_NGINX2/"
echo "overload: backend 4 at once x 20 ms (200/s) on 127.0.0.2; load 400/s for ${DURATION}s, $ROUNDS rounds"
taskset -c 1 python3 scripts/bench/bench_overload.py --rounds "$ROUNDS" --seconds "$DURATION" --capacity 200 \
  quickway=127.0.0.1:$P_QW quickway-nolim=127.0.0.1:$P_QW2 nginx=127.0.0.1:$P_NGINX nginx-maxconns=127.0.0.1:$P_NGINX2
