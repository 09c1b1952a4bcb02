#!/usr/bin/env bash
# User-space instructions per HTTP/2 request over TLS, one stream per connection, with
# valgrind's callgrind (repeatable on a noisy machine, unlike req/s): Quickway (1 worker,
# `tls_listen` with ALPN h2) proxies to an nginx backend answering 1 KB of JSON, as in
# `bench.sh --case http2`; after a warm-up of 800 requests, instrumentation is on for
# 4,000 requests from h2load (8 connections, 1 stream each). Prints instructions per
# request and the top functions. QW_BIN=path profiles another build; KEEP_CALLGRIND=file
# keeps callgrind's output.
# Usage: scripts/profile/profile-http2.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=1; DURATION=1; CONNS=8; CASE=profile-http2
. scripts/bench/bench-common.sh
need_tools nginx:nginx-light h2load:nghttp2-client openssl:openssl valgrind:valgrind
scripts/setup.sh >/dev/null
bench_workdir profile-http2
BACKEND=127.0.0.2:18981; QPORT=18980; APORT=18990; TPORT=18983; N=4000
BODY=$(python3 -c 'import json; print(json.dumps({"items": [{"id": i, "name": "item-%04d" % i} for i in range(40)]})[:1024])')
mkdir -p "$WORK/backend"
write_bench_cert "$WORK"
write_backend_conf "$WORK/backend" "$BACKEND" "$BODY"
write_h2_quickway_conf "$WORK" "$QPORT" "$APORT" "$TPORT" "$BACKEND"
nginx -p "$WORK/backend" -c "$WORK/backend/nginx.conf" & PIDS+=($!)
wait_up "http://$BACKEND/"
# valgrind cannot read the release binary's DWARF 5 debug info: profile a copy without it.
strip --strip-debug -o "$WORK/quickway" "${QW_BIN:-.build/release/quickway}"
valgrind --tool=callgrind --callgrind-out-file="$WORK/cg.out" --instr-atstart=no "$WORK/quickway" serve --config "$WORK/q.yaml" 2>"$WORK/vg.log" & PIDS+=($!); VG=$!
for _ in $(seq 300); do curl -sf -o /dev/null "http://127.0.0.1:$APORT/health" && break; sleep 0.2; done
h2load -c 8 -m 1 -n 800 "https://127.0.0.1:$TPORT/" > /dev/null 2>&1
callgrind_control -i on "$VG" >/dev/null
out=$(h2load -c 8 -m 1 -n "$N" "https://127.0.0.1:$TPORT/" 2>&1)
callgrind_control -i off "$VG" >/dev/null
callgrind_control -d "$VG" >/dev/null
echo "$out" | grep -q "$N succeeded" || { echo "profile-http2: not all $N requests succeeded:"; echo "$out" | grep requests; exit 1; }
for _ in $(seq 50); do ls "$WORK"/cg.out.* >/dev/null 2>&1 && break; sleep 0.2; done
sleep 1
f=$(ls -S "$WORK"/cg.out* | head -1)
if [ -n "${KEEP_CALLGRIND:-}" ]; then cp "$f" "$KEEP_CALLGRIND"; fi
callgrind_annotate "$f" > "$WORK/annotated.txt" 2>/dev/null   # whole (a pipe cut short fails under pipefail)
total=$(grep -m1 "PROGRAM TOTALS" "$WORK/annotated.txt" | awk '{gsub(",","",$1); print $1}')
echo "$N requests; $((total / N)) user-space instructions per request (HTTP/2 over TLS, 1 stream per connection)"
echo "top functions (instr/request):"
callgrind_top "$f" "$N"
