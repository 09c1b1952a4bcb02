#!/usr/bin/env bash
# Quickway against nginx, measured the same way on both sides (issue 17's targets):
#
#   instructions per request  callgrind (user space), one worker, 8 keep-alive client
#                             connections (wrk), counted after a 1 s warm-up; requests
#                             counted by the server itself (Quickway /stats, nginx
#                             stub_status) over the same span
#   system calls per request  perf stat on syscalls:sys_enter_* over a wrk run of the
#                             server running natively (not under valgrind)
#
# Cases: "proxy" (a GET proxied to a backend answering 1 KB JSON, upstream keep-alive:
# Quickway's proxy route against nginx proxy_pass with `keepalive`), "cache" (a cache hit
# against nginx `return 200` with the same 1 KB body: the floor for an answer from
# memory), "h2" (the proxied GET over HTTP/2 and TLS, 8 h2load connections of 1 stream
# each: Quickway's tls_listen with ALPN h2 against nginx `listen ... ssl http2`, the same
# ECDSA P-256 certificate), "limits" (the proxied GET with and without a rate limit by
# client IP that never refuses: Quickway's `rate_limit: [{ by: ip }]` against nginx
# `limit_req` on `$binary_remote_addr`; prints each server's increment, issue 32's
# peer). nginx runs with `master_process off` (one process, as
# Quickway's one worker). The backend is a separate nginx on 127.0.0.2 (not profiled).
#
# Usage: scripts/profile/profile-vs-nginx.sh [--case proxy|cache|h2|limits|both|all] [--seconds N]
#   both: proxy and cache; all: proxy, cache and h2
#   QW_BIN=path  profile another build of quickway
set -euo pipefail
cd "$(dirname "$0")/../.."
CASE=both; SECONDS_RUN=6
while [ $# -gt 0 ]; do
  case "$1" in
    --case) CASE=$2; shift 2 ;;
    --seconds) SECONDS_RUN=$2; shift 2 ;;
    -h|--help) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "usage: scripts/profile/profile-vs-nginx.sh [--case proxy|cache|h2|limits|both|all] [--seconds N]" >&2; exit 2 ;;
  esac
done
case "$CASE" in proxy|cache|h2|limits|both|all) ;; *) echo "profile-vs-nginx: --case is proxy, cache, h2, limits, both or all" >&2; exit 2 ;; esac
. scripts/bench/bench-common.sh
need_tools valgrind:valgrind nginx:nginx-light wrk:wrk perf:linux-perf h2load:nghttp2-client openssl:openssl
BIN=${QW_BIN:-.build/release/quickway}
[ -x "$BIN" ] || scripts/setup.sh >/dev/null
WORK=$(mktemp -d /tmp/qw-profile-vs.XXXXXX); PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$WORK"' EXIT
BPORT=18281; QPORT=18280; APORT=18290; NPORT=18282; SPORT=18283; QTLS=18284; NTLS=18285
BODY=$(python3 -c 'import json; print(json.dumps({"items": [{"id": i, "name": "item-%04d" % i} for i in range(40)]})[:1024])')
write_backend_conf "$WORK/backend" "127.0.0.2:$BPORT" "$BODY"
nginx -p "$WORK/backend" -c "$WORK/backend/nginx.conf" & PIDS+=($!)
write_bench_cert "$WORK"
{ quickway_one_worker_conf "$QPORT" "$APORT" "$BPORT"; cat <<CONF
tls_listen:
  listen: 127.0.0.1:$QTLS
  certificates: [ { cert_file: $WORK/cert.pem, key_file: $WORK/key.pem } ]
  alpn: [h2, http/1.1]
http2: { max_concurrent_streams: 128 }
routes:
  - { name: cached, match: { path_prefix: /cached/ }, service: b, cache: { ttl: 1h } }
  - { name: limited, match: { path_prefix: /limited/ }, service: b, rate_limit: [{ by: ip, rate: 1000000/s, burst: 1000000 }] }
  - { name: all, match: { path_prefix: / }, service: b }
CONF
} > "$WORK/q.yaml"
# nginx: proxy on /, the same body from memory on /cached/, counters on its own port.
mkdir -p "$WORK/nginx"
cat > "$WORK/nginx/nginx.conf" <<CONF
daemon off; master_process off; worker_processes 1; error_log $WORK/nginx/error.log; pid $WORK/nginx/nginx.pid;
events { worker_connections 1024; }
http { access_log off; keepalive_requests 1000000;
  upstream backend { server 127.0.0.2:$BPORT; keepalive 64; }
  limit_req_zone \$binary_remote_addr zone=perip:10m rate=1000000r/s;
  server { listen 127.0.0.1:$NPORT;
    location / { proxy_pass http://backend; proxy_http_version 1.1; proxy_set_header Connection ""; }
    location /limited/ { limit_req zone=perip burst=1000000 nodelay;
      proxy_pass http://backend; proxy_http_version 1.1; proxy_set_header Connection ""; }
    location /cached/ { default_type application/json; return 200 '$BODY'; } }
  server { listen 127.0.0.1:$NTLS ssl http2;
    ssl_certificate $WORK/cert.pem; ssl_certificate_key $WORK/key.pem;
    ssl_protocols TLSv1.2 TLSv1.3; ssl_session_tickets on; http2_max_concurrent_streams 128;
    location / { proxy_pass http://backend; proxy_http_version 1.1; proxy_set_header Connection ""; } }
  server { listen 127.0.0.1:$SPORT; location / { stub_status; } } }
CONF
# valgrind 3.19 cannot read the DWARF of Swift 6 binaries: profile a copy without it.
objcopy --strip-debug "$BIN" "$WORK/quickway"

qw_count() { curl -s "http://127.0.0.1:$APORT/stats" | python3 -c 'import json,sys; print(json.load(sys.stdin)["requests"]["total"])'; }
# stub_status counts its own request too: one per call, taken off.
nginx_count() { curl -s "http://127.0.0.1:$SPORT/" | awk 'NR==3 {print $3 - 1}'; }

start_server() {   # start_server quickway|nginx [valgrind args...]: sets SRV (PID), URL base, COUNT
  local who=$1; shift
  if [ "$who" = quickway ]; then
    "$@" "$WORK/quickway" serve --config "$WORK/q.yaml" 2>>"$WORK/server.log" & SRV=$!
    BASE="http://127.0.0.1:$QPORT"; COUNT=qw_count
  else
    "$@" nginx -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" 2>>"$WORK/server.log" & SRV=$!
    BASE="http://127.0.0.1:$NPORT"; COUNT=nginx_count
  fi
  PIDS+=("$SRV")
  TLSBASE="https://127.0.0.1:$QTLS"; [ "$who" = nginx ] && TLSBASE="https://127.0.0.1:$NTLS"
}
# stop_server: SIGINT, then (a server under valgrind may not act on it) SIGTERM after
# 20 s and SIGKILL after 30 s, so a run never hangs here.
stop_server() {
  kill -INT "$SRV" 2>/dev/null || true
  for i in $(seq 300); do kill -0 "$SRV" 2>/dev/null || break; sleep 0.1
    [ "$i" = 200 ] && kill -TERM "$SRV" 2>/dev/null; done
  kill -KILL "$SRV" 2>/dev/null || true
  wait "$SRV" 2>/dev/null || true
}
url_for() {   # url_for CASE: the URL the case loads on the started server
  case "$1" in cache) echo "$BASE/cached/item" ;; h2) echo "$TLSBASE/item" ;; limited) echo "$BASE/limited/item" ;; *) echo "$BASE/item" ;; esac
}
# load CASE URL SECONDS [OUT]: wrk with 8 connections, or for h2 h2load with 8
# connections of 1 stream each; the report goes to OUT (default: discarded).
load() {
  if [ "$1" = h2 ]; then h2load -c8 -m1 -D "$3" "$2" > "${4:-/dev/null}" 2>&1
  else wrk -t1 -c8 -d"$3s" "$2" > "${4:-/dev/null}"; fi
}
# ready URL: the server answers on URL (curl; -k for the bench certificate).
ready() { curl -skf -o /dev/null "$1"; }

# callgrind: prints "instructions_per_request requests"
instructions() {
  local who=$1 case=$2 url before n
  start_server "$who" valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$WORK/cg-$who-$case.out"
  url=$(url_for "$case")
  for _ in $(seq 150); do ready "$url" && break; sleep 0.2; done
  ready "$url" || { echo "profile-vs-nginx: $who did not answer on $url:" >&2; tail -5 "$WORK/server.log" >&2; exit 1; }
  load "$case" "$url" 1
  before=$($COUNT)
  callgrind_control -i on "$SRV" >/dev/null 2>&1
  load "$case" "$url" "$SECONDS_RUN" "$WORK/load.txt"
  callgrind_control -i off "$SRV" >/dev/null 2>&1
  n=$(( $($COUNT) - before ))
  grep -q "Non-2xx\|[1-9][0-9]* failed\|[1-9][0-9]* errored" "$WORK/load.txt" && { echo "profile-vs-nginx: $who answered non-2xx or failed:" >&2; cat "$WORK/load.txt" >&2; }
  stop_server
  local total
  total=$(callgrind_annotate "$WORK/cg-$who-$case.out" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
  echo "$(( total / n )) $n"
}

# perf: prints "syscalls_per_request requests top-calls"
syscalls() {
  local who=$1 case=$2 url before n
  start_server "$who"
  url=$(url_for "$case")
  for _ in $(seq 150); do ready "$url" && break; sleep 0.1; done
  ready "$url" || { echo "profile-vs-nginx: $who did not answer on $url" >&2; exit 1; }
  load "$case" "$url" 1
  before=$($COUNT)
  perf stat -x, -e 'syscalls:sys_enter_*' -p "$SRV" -o "$WORK/perf.txt" -- sleep "$SECONDS_RUN" &
  local perf_pid=$!
  load "$case" "$url" "$SECONDS_RUN"
  wait "$perf_pid" || true
  n=$(( $($COUNT) - before ))
  stop_server
  python3 - "$WORK/perf.txt" "$n" <<'PY'
import sys
calls = {}
for line in open(sys.argv[1]):
    parts = line.strip().split(",")
    if len(parts) > 2 and parts[0].isdigit() and int(parts[0]) > 0:
        calls[parts[2].split("sys_enter_")[-1]] = int(parts[0])
n = int(sys.argv[2])
top = " ".join(f"{k}={v / n:.2f}" for k, v in sorted(calls.items(), key=lambda kv: -kv[1])[:6])
print(f"{sum(calls.values()) / n:.2f} {n} {top}")
PY
}

if [ "$CASE" = limits ]; then
  # Interleaved (proxy, limited) per server, instructions only: the increment each
  # server pays for its per-IP limit on the same load.
  printf '%-9s %18s %18s %18s\n' server proxy limited increment
  for who in quickway nginx; do
    read -r plain _ <<<"$(instructions "$who" proxy)"
    read -r limited _ <<<"$(instructions "$who" limited)"
    awk -v w="$who" -v p="$plain" -v l="$limited" 'BEGIN { printf "%-9s %18d %18d %+10d (%+.1f%%)\n", w, p, l, l - p, (l - p) * 100 / p }'
  done
  exit 0
fi
case "$CASE" in both) cases=(proxy cache) ;; all) cases=(proxy cache h2) ;; *) cases=("$CASE") ;; esac
printf '%-7s %-9s %16s %12s   %s\n' case server instr/request syscalls/req "syscalls by name (per request)"
for c in "${cases[@]}"; do
  declare -A INSTR SYS
  for who in quickway nginx; do
    read -r ir _ <<<"$(instructions "$who" "$c")"
    read -r sc _ top <<<"$(syscalls "$who" "$c")"
    INSTR[$who]=$ir; SYS[$who]=$sc
    printf '%-7s %-9s %16s %12s   %s\n' "$c" "$who" "$(printf "%'d" "$ir")" "$sc" "$top"
  done
  awk -v c="$c" -v q="${INSTR[quickway]}" -v n="${INSTR[nginx]}" -v qs="${SYS[quickway]}" -v ns="${SYS[nginx]}" \
    'BEGIN { printf "%-7s ratio quickway/nginx: instructions %.2fx, syscalls %.2fx\n", c, q / n, qs / ns }'
  unset INSTR SYS
done
