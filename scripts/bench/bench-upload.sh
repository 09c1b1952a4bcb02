#!/usr/bin/env bash
# Request bodies (issue 34), run by scripts/bench.sh --case upload (or alone):
#
#   big    one 1 GiB upload at a time through Quickway's streaming route
#          (`request_buffering: false`) and through nginx with `proxy_request_buffering
#          off` (its default 16 KiB buffer, and 64 KiB as Quickway's pieces), to the same
#          sink backend, in interleaved rounds: MB/s and each
#          server's RSS before and at peak (sampled every 20 ms); then the same chunked.
#   many   100 concurrent 10 MiB QW1-signed uploads through a buffered route (bodies past
#          client_body_buffer_size go to unnamed temporary files): RSS before, at peak,
#          after, and the wall time.
#
# The servers on core 0, the client and the sink (Python, its own process) on core 1.
# Usage: scripts/bench/bench-upload.sh [--rounds N]   (QW_UPLOAD_BYTES: the big size)
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=3; DURATION=0; CONNS=0; CASE=upload
. scripts/bench/bench-common.sh
parse_bench_options "$@"
need_tools nginx:nginx-light
scripts/setup.sh >/dev/null
QW=${QW_BIN:-$PWD/.build/release/quickway}
bench_workdir upload
BYTES=${QW_UPLOAD_BYTES:-$((1 << 30))}
P_QW=18980; P_QW_ADMIN=18990; P_NG=18984; P_SINK=18981

taskset -c 1 python3 scripts/bench/bench_upload.py sink "$P_SINK" & PIDS+=($!)
cat > "$WORK/q.yaml" <<CONF
listen: 127.0.0.1:$P_QW
workers: 1
admin: { listen: 127.0.0.1:$P_QW_ADMIN }
log: { level: warn, access_log: off }
limits: { max_body_bytes: 2GiB, client_body_temp_path: $WORK }
auth: { salt: bench-salt, keys: [{ id: bench, secret: bench-secret }] }
services: { b: { host: sink.local, port: $P_SINK, ips: [127.0.0.2], timeouts: { response: 60s } } }
routes:
  - { name: stream, match: { path_prefix: /stream/ }, service: b, auth: off, request_buffering: false }
  - { name: signed, match: { path_prefix: /signed/ }, service: b }
CONF
cat > "$WORK/nginx.conf" <<CONF
daemon off; worker_processes 1; error_log $WORK/error.log; pid $WORK/nginx.pid;
events { worker_connections 1024; }
http { access_log off; client_max_body_size 0;
  upstream b { server 127.0.0.2:$P_SINK; keepalive 16; }
  server { listen 127.0.0.1:$P_NG;
    location / { proxy_pass http://b; proxy_http_version 1.1; proxy_set_header Connection "";
                 proxy_request_buffering off; proxy_read_timeout 60s; }
    # The same with Quickway's 64 KiB pieces (nginx's default buffer is 16 KiB).
    location /b64/ { client_body_buffer_size 64k; proxy_pass http://b; proxy_http_version 1.1; proxy_set_header Connection "";
                 proxy_request_buffering off; proxy_read_timeout 60s; } } }
CONF
taskset -c 0 "$QW" serve --config "$WORK/q.yaml" 2>"$WORK/q.log" & PIDS+=($!); QW_PID=$!
taskset -c 0 nginx -p "$WORK" -c "$WORK/nginx.conf" & PIDS+=($!); NG_PID=$!
for _ in $(seq 100); do curl -sf -o /dev/null "http://127.0.0.1:$P_QW_ADMIN/health" && break; sleep 0.1; done
for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$P_NG/" && break; sleep 0.1; done
sleep 0.5
# nginx's worker, not its master, holds the connections.
NG_WORKER=$(pgrep -P "$NG_PID" | head -1)
echo "upload: $((BYTES >> 20)) MiB bodies; Quickway request_buffering: false vs nginx proxy_request_buffering off"
for mode in "" --chunked; do
  taskset -c 1 python3 scripts/bench/bench_upload.py big quickway="http://127.0.0.1:$P_QW/stream/up" nginx="http://127.0.0.1:$P_NG/up" \
    nginx-64k="http://127.0.0.1:$P_NG/b64/up" --pid quickway="$QW_PID" --pid nginx="$NG_WORKER" --pid nginx-64k="$NG_WORKER" \
    --bytes "$BYTES" --rounds "$ROUNDS" $mode
done
echo
taskset -c 1 python3 scripts/bench/bench_upload.py many "http://127.0.0.1:$P_QW/signed/up" --pid "$QW_PID" --count 100 --bytes $((10 << 20))
echo "spooled: $(curl -s "http://127.0.0.1:$P_QW_ADMIN/stats" | python3 -c 'import json,sys; print(json.load(sys.stdin)["requests"]["bodies_spooled"])') bodies"
