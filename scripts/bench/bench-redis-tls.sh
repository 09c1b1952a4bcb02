#!/usr/bin/env bash
# The cost of TLS to Redis on the signed path, run by scripts/bench.sh --case redis-tls
# (or alone).
#
# Two gateways, alone on core 0 in turn (interleaved rounds), each with one worker and a
# QW1-signed route whose nonces are claimed in Redis (`SET NX PX`, one round trip a call,
# pipelined over the worker's link): one reaches Redis over plain TCP (`redis://`), the
# other over TLS (`rediss://` with `ca_file`, the certificate verified). One redis-server
# serves both, on a plain port and a `tls-port` (a CA and certificate made here with the
# openssl command line), so only the transport differs; it shares core 1 with wrk and the
# backend. wrk replays pre-signed requests (examples/qw1_client.py), each nonce once; each
# gateway uses its own Redis database, so one file of requests serves both, and Redis is
# emptied after every run. Prints req/s, p50, p99, gateway CPU per request and Redis's CPU
# per request, the medians and the TLS/plain ratios, and warns about any non-2xx answer (a
# refused call: a replay or `503 redis_unavailable`).
#
# Usage: scripts/bench/bench-redis-tls.sh [--rounds N] [--duration S] [--connections C]
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=5; DURATION=8; CONNS=64; CASE=redis-tls
. scripts/bench/bench-common.sh
parse_bench_options "$@"
need_tools nginx:nginx-light wrk:wrk redis-server:redis-server redis-cli:redis-tools openssl:openssl
scripts/setup.sh >/dev/null
QW=${QW_BIN:-$PWD/.build/release/quickway}
bench_workdir redis-tls

BACKEND=127.0.0.2:18581; REDIS_PORT=18589; REDIS_TLS_PORT=18588
P_PLAIN=18580; P_PLAIN_ADMIN=18590; P_TLS=18582; P_TLS_ADMIN=18592
BODY=$(python3 -c 'import json; print(json.dumps({"items": [{"id": i, "name": "item-%04d" % i} for i in range(40)]})[:1024])')
write_backend_conf "$WORK/backend" "$BACKEND" "$BODY"

write_redis_tls_files "$WORK"

# $1 port, $2 admin port, $3 the redis section's url (and ca_file) lines
qw_config() {
  cat <<CONF
listen: 127.0.0.1:$1
workers: 1
admin: { listen: 127.0.0.1:$2 }
log: { level: warn, access_log: off }
services:
  backend: { host: backend.local, port: ${BACKEND#*:}, ips: ["${BACKEND%:*}"] }
auth:
  salt: bench-salt
  nonce_capacity: 10000000
  keys: [ { id: bench-app, secret: bench-secret } ]
redis:
$3
  timeout: 100ms
  cache: false
routes:
  - { name: signed, match: { path_prefix: /signed/ }, service: backend, auth: required }
CONF
}
qw_config $P_PLAIN $P_PLAIN_ADMIN "  url: \"redis://127.0.0.1:$REDIS_PORT/1\"" > "$WORK/plain.yaml"
qw_config $P_TLS $P_TLS_ADMIN "  url: \"rediss://127.0.0.1:$REDIS_TLS_PORT/2\"
  ca_file: $WORK/ca.pem" > "$WORK/tls.yaml"
write_replay_lua "$WORK/replay.lua"

taskset -c 1 redis-server --port $REDIS_PORT --tls-port $REDIS_TLS_PORT --bind 127.0.0.1 --save "" --appendonly no \
  --tls-cert-file "$WORK/redis.pem" --tls-key-file "$WORK/redis.key" --tls-ca-cert-file "$WORK/ca.pem" \
  --tls-auth-clients no --dir "$WORK" >"$WORK/redis.log" 2>&1 & PIDS+=($!); REDIS_PID=$!
taskset -c 1 nginx -p "$WORK/backend" -c "$WORK/backend/nginx.conf" & PIDS+=($!)
for _ in $(seq 100); do redis-cli -p $REDIS_PORT ping >/dev/null 2>&1 && break; sleep 0.1; done
taskset -c 0 "$QW" serve --config "$WORK/plain.yaml" 2>"$WORK/plain.log" & PIDS+=($!); PLAIN_PID=$!
taskset -c 0 "$QW" serve --config "$WORK/tls.yaml" 2>"$WORK/tls.log" & PIDS+=($!); TLS_PID=$!
for url in "http://$BACKEND/" "http://127.0.0.1:$P_PLAIN_ADMIN/ready" "http://127.0.0.1:$P_TLS_ADMIN/ready"; do wait_up "$url"; done
links_up() { curl -s "http://127.0.0.1:$1/stats" | python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin)["redis"]["connected"] else 1)'; }
for a in $P_PLAIN_ADMIN $P_TLS_ADMIN; do
  for _ in $(seq 100); do links_up "$a" && break; sleep 0.1; done
  links_up "$a" || { echo "bench: the gateway on admin port $a has no Redis link up" >&2; exit 1; }
done

echo "redis-tls: $ROUNDS interleaved rounds of ${DURATION}s, $CONNS connections, QW1-signed GETs with nonces in Redis; gateways on core 0, wrk+backend+redis on core 1"
# Warm-up: connections, and one TLS handshake per link (made at start, not per request).
presign 20000 "$WORK/signed.txt"
for p in $P_PLAIN $P_TLS; do taskset -c 1 wrk -t1 -c"$CONNS" -d1s -s "$WORK/replay.lua" "http://127.0.0.1:$p/" -- "$WORK/signed.txt" /signed >/dev/null; done
redis-cli -p $REDIS_PORT flushall >/dev/null
: > "$WORK/results"
# Enough requests that none is sent twice in a run (a second use is a 401 replay).
SIGNED_N=$(( DURATION * 70000 ))
for r in $(seq "$ROUNDS"); do
  presign "$SIGNED_N" "$WORK/signed.txt"
  line="round $r:"
  for spec in "redis-plain:$P_PLAIN:$PLAIN_PID" "redis-tls:$P_TLS:$TLS_PID"; do
    IFS=: read -r name port pid <<<"$spec"
    rt0=$(cpu_ticks "$REDIS_PID")
    v=$(run_one "http://127.0.0.1:$port/" "$pid" "$WORK/replay.lua" "$WORK/signed.txt" "/signed")
    rt1=$(cpu_ticks "$REDIS_PID")
    total=$(grep -oE "[0-9]+ requests in" "$WORK/last-wrk.txt" | grep -oE "^[0-9]+")
    redis_us=$(python3 -c "print(f'{($rt1 - $rt0) / $(getconf CLK_TCK) * 1e6 / max($total, 1):.2f}')")
    redis-cli -p $REDIS_PORT flushall >/dev/null
    echo "$name $v $redis_us" >> "$WORK/results"
    line="$line $name $v redis:$redis_us |"
  done
  echo "$line   (req/s p50ms p99ms cpu_us/req non2xx)"
done
print_medians "$WORK/results" "signed, nonces"
for a in $P_PLAIN_ADMIN $P_TLS_ADMIN; do
  curl -s "http://127.0.0.1:$a/stats" | python3 -c 'import json,sys; r=json.load(sys.stdin)["redis"]; n=r["nonces"]; print("%s: nonces %s, timeouts %d, unavailable %d, connects %d, tls_failures %d" % (r["url"], json.dumps(n), r["timeouts"], r["unavailable"], r["connects"], r["tls_failures"]))'
done
python3 - "$WORK/results" <<'PY'
import sys
sys.path.insert(0, "scripts/bench")
from bench_medians import medians
med = medians(sys.argv[1])
p, t = med["redis-plain"], med["redis-tls"]
print(f"ratio tls/plain: req/s {t[0] / p[0]:.2f}x, p50 {t[1] / p[1]:.2f}x, p99 {t[2] / p[2]:.2f}x, "
      f"gateway CPU/req {t[3] / p[3]:.2f}x (+{t[3] - p[3]:.2f} us), Redis CPU/req {t[5] / p[5]:.2f}x (+{t[5] - p[5]:.2f} us)")
bad = {}
for line in open(sys.argv[1]):
    name, *vals = line.split()
    if float(vals[4]) > 0: bad[name] = bad.get(name, 0) + 1
for name, n in sorted(bad.items()):
    print(f"WARNING: {n} round(s) of {name} had non-2xx answers; their figures are not comparable")
PY
