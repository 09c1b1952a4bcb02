#!/usr/bin/env bash
# Per-request instruction profile of the proxy path with valgrind's callgrind
# (counts instructions, so it is repeatable on a noisy machine).
# Starts a local nginx backend, runs Quickway (1 worker) under callgrind, sends a
# bounded load with wrk, and prints instructions per request by library and the top
# functions. With --signed every request goes to a QW1-signed route (pre-signed by
# examples/qw1_client.py, each nonce once), to compare against the plain profile.
# Instrumentation is switched on once the gateway answers, so start-up is not counted; requests
# are counted from /stats over the same span. QW_BIN=path profiles another build of
# quickway (to compare builds: the checked -O one against -Ounchecked, before/after).
# QW_CALLGRIND_ARGS adds valgrind options (--dump-instr=yes, for scripts/profile/cg-lines.py).
# With --cache every request is a cache hit (one 1 KB entry on a route with a ttl).
# With --policy the plain route has header rules (a request and a response rule each)
# and a rewrite that does not match (the cost of the policy on every request).
# With --limits the routes carry rate limits that never refuse (issue 32's cost): the
# signed route one by key and one by IP, the plain route one by IP.
# With --jwt every request goes to an auth: jwt route with one reused RS256 token (minted
# by PyJWT; a token-cache hit after the first), to compare against the plain profile.
# With --tracing RATIO the config has a tracing section (sample_ratio RATIO) whose spans go
# to the nginx backend as collector (it answers every POST 200): the cost of tracing per
# request, the export on the admin loop included (issue 36's budget).
# With --redis plain|tls the config has a redis section (nonces shared, cache not) on a
# redis-server started here, reached over TCP or over TLS (rediss://, a CA made here):
# with --signed, each request's nonce claim is a Redis round trip (the cost of TLS to Redis).
# Usage: scripts/profile.sh [--seconds N] [--signed | --cache | --policy | --jwt] [--limits] [--tracing RATIO] [--redis plain|tls]
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_RUN=8; SIGNED=0; CACHE=0; POLICY=0; LIMITS=0; JWT=0; TRACING=; REDIS=
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) SECONDS_RUN=$2; shift 2 ;;
    --signed) SIGNED=1; shift ;;
    --cache) CACHE=1; shift ;;
    --policy) POLICY=1; shift ;;
    --limits) LIMITS=1; shift ;;
    --jwt) JWT=1; shift ;;
    --tracing) TRACING=$2; shift 2 ;;
    --redis) REDIS=$2; shift 2 ;;
    *) echo "usage: scripts/profile.sh [--seconds N] [--signed | --cache | --policy | --jwt] [--limits] [--tracing RATIO] [--redis plain|tls]" >&2; exit 2 ;;
  esac
done
for tool in valgrind nginx wrk; do
  command -v "$tool" >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind nginx-light wrk >/dev/null; break; }
done
scripts/setup.sh >/dev/null
. scripts/bench/bench-common.sh
WORK=$(mktemp -d /tmp/qw-profile.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; [ -n "${QW_PROFILE_KEEP:-}" ] || rm -rf "$WORK"; }
trap cleanup EXIT
# QW_PROFILE_PORT moves the three ports (two profiles at once on one machine).
QPORT=${QW_PROFILE_PORT:-18180}; BPORT=$((QPORT + 1)); APORT=$((QPORT + 10))
cat > "$WORK/backend.conf" <<CONF
daemon off; worker_processes 1; error_log $WORK/backend-error.log; pid $WORK/backend.pid;
events { worker_connections 1024; }
http { access_log off; server { listen 127.0.0.2:$BPORT; location / { default_type application/json; return 200 '{"ok":true}'; } } }
CONF
{ quickway_one_worker_conf "$QPORT" "$APORT" "$BPORT"; cat <<CONF
auth: { salt: prof-salt, keys: [ { id: prof-app, secret: prof-secret } ] }
routes:
  - { name: signed, match: { path_prefix: /signed/ }, service: b, auth: required }
  - { name: cached, match: { path_prefix: /cached/ }, service: b, auth: off, cache: { ttl: 1h } }
CONF
if [ "$POLICY" = 1 ]; then cat <<'CONF'
  - name: all
    match: { path_prefix: / }
    service: b
    auth: off
    rewrite: { path_regex: "^/orders/v1/(.*)$", to: "/v1/orders/$1" }
    headers:
      request: { remove: [X-Debug], set: { X-Api-Version: "2" } }
      response: { remove: [Server], set: { Strict-Transport-Security: "max-age=31536000" } }
CONF
else echo "  - { name: all, match: { path_prefix: / }, service: b, auth: off }"; fi
} > "$WORK/q.yaml"
if [ "$JWT" = 1 ]; then
  TOKEN=$(python3 - "$WORK" <<'PY'
import json, sys, time
import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm
key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
d = RSAAlgorithm.to_jwk(key.public_key(), as_dict=True)
d["kid"] = "prof"
json.dump({"keys": [d]}, open(f"{sys.argv[1]}/jwks.json", "w"))
print(jwt.encode({"iss": "https://idp.prof/", "aud": "api", "sub": "user-1", "exp": int(time.time()) + 7200},
                 key, algorithm="RS256", headers={"kid": "prof"}))
PY
)
  sed -i "s|^routes:|routes:\n  - { name: jwt, match: { path_prefix: /jwt/ }, service: b, auth: jwt }|" "$WORK/q.yaml"
  cat >> "$WORK/q.yaml" <<CONF
jwt:
  providers:
    prof: { issuer: "https://idp.prof/", audiences: [api], jwks_file: $WORK/jwks.json, forward_claims: { sub: X-User-Id } }
CONF
fi
if [ "$LIMITS" = 1 ]; then
  NEVER="rate: 1000000/s, burst: 1000000"
  sed -i "s|auth: required }|auth: required, rate_limit: [{ by: key, $NEVER }, { by: ip, $NEVER }] }|; s|service: b, auth: off }|service: b, auth: off, rate_limit: [{ by: ip, $NEVER }] }|" "$WORK/q.yaml"
fi
if [ -n "$TRACING" ]; then
  printf 'tracing: { otlp_endpoint: "http://127.0.0.2:%s/v1/traces", sample_ratio: %s, service_name: profile }\n' "$BPORT" "$TRACING" >> "$WORK/q.yaml"
fi
if [ -n "$REDIS" ]; then
  # Under callgrind the gateway runs many times slower: a long timeout, so no claim fails.
  RPORT=$((QPORT + 20))
  if [ "$REDIS" = tls ]; then
    write_redis_tls_files "$WORK"
    redis-server --port 0 --tls-port "$RPORT" --tls-cert-file "$WORK/redis.pem" --tls-key-file "$WORK/redis.key" \
      --tls-ca-cert-file "$WORK/ca.pem" --tls-auth-clients no --bind 127.0.0.1 --save "" --appendonly no --dir "$WORK" >"$WORK/redis.log" 2>&1 & PIDS+=($!)
    printf 'redis: { url: "rediss://127.0.0.1:%s/0", ca_file: %s, timeout: 2s, cache: false }\n' "$RPORT" "$WORK/ca.pem" >> "$WORK/q.yaml"
  else
    redis-server --port "$RPORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$WORK" >"$WORK/redis.log" 2>&1 & PIDS+=($!)
    printf 'redis: { url: "redis://127.0.0.1:%s/0", timeout: 2s, cache: false }\n' "$RPORT" >> "$WORK/q.yaml"
  fi
  for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$RPORT") 2>/dev/null && break; sleep 0.1; done
fi
WRK_ARGS=("http://127.0.0.1:$QPORT/")
[ "$CACHE" = 1 ] && WRK_ARGS=("http://127.0.0.1:$QPORT/cached/item")
[ "$JWT" = 1 ] && WRK_ARGS=(-H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$QPORT/jwt/item")
if [ "$SIGNED" = 1 ]; then
  python3 - "$WORK/signed.txt" <<'PY'
import os, sys, time, secrets
sys.path.insert(0, os.path.join(os.getcwd(), "examples"))
import qw1_client
now, prefix = int(time.time()), secrets.token_hex(4)
with open(sys.argv[1], "w") as f:
    for i in range(100000):
        path = f"/signed/items?id={i % 1000}"
        f.write(path + "\t" + qw1_client.authorization("prof-app", "prof-secret", "prof-salt", "GET", path,
                                                       timestamp=now, nonce=f"{prefix}-{i:08d}") + "\n")
PY
  cat > "$WORK/replay.lua" <<'LUA'
local reqs, i = {}, 0
function init(args)
  for line in io.lines(args[1]) do
    local path, auth = line:match("([^\t]+)\t(.*)")
    reqs[#reqs + 1] = wrk.format("GET", path, { ["Authorization"] = auth })
  end
end
function request() i = i + 1; if i > #reqs then i = 1 end; return reqs[i] end
LUA
  WRK_ARGS=(-s "$WORK/replay.lua" "http://127.0.0.1:$QPORT/" -- "$WORK/signed.txt")
fi
# valgrind 3.19 cannot read the DWARF of Swift 6 binaries: profile a copy without it.
objcopy --strip-debug "${QW_BIN:-.build/release/quickway}" "$WORK/quickway"
# Kept with the profile, the build it counted, for scripts/profile/cg-lines.py (source lines).
[ -z "${QW_PROFILE_KEEP:-}" ] || cp "${QW_BIN:-.build/release/quickway}" "$WORK/quickway.debug"
nginx -p "$WORK" -c "$WORK/backend.conf" & PIDS+=($!)
valgrind --tool=callgrind --instr-atstart=no ${QW_CALLGRIND_ARGS:-} --callgrind-out-file="$WORK/cg.out" "$WORK/quickway" serve --config "$WORK/q.yaml" 2>"$WORK/valgrind.log" & QW=$!; PIDS+=($QW)
READY_URL="http://127.0.0.1:$QPORT/"; [ "$CACHE" = 1 ] && READY_URL="http://127.0.0.1:$QPORT/cached/item"
for _ in $(seq 100); do curl -sf -o /dev/null "$READY_URL" && break; sleep 0.2; done
count() { curl -s "http://127.0.0.1:$APORT/stats" | python3 -c 'import json,sys; print(json.load(sys.stdin)["requests"]["total"])'; }
# With --tracing: before counting, waits (at most 15 s) until every span recorded so far
# (the warm-up's) has been exported, so no backlog is counted. The counted span then holds
# the exports of the steady state (a batch every 512 spans or 5 s); no wait after the
# load, whose idle seconds would be counted against the requests.
spans_settled() {
  [ -n "$TRACING" ] || return 0
  for _ in $(seq 75); do
    curl -s "http://127.0.0.1:$APORT/stats" | python3 -c 'import json,sys; t=json.load(sys.stdin)["tracing"]; sys.exit(0 if t["spans_exported"]+t["spans_dropped"]==t["spans_recorded"] else 1)' && return 0
    sleep 0.2
  done
  echo "profile: spans still waiting for export after 15 s" >&2
}
# Warm up (first connections, lazy initialisation) on a plain or cached route (a signed
# replay must use each nonce once), then count from zero.
wrk -t1 -c8 -d1s "$READY_URL" >/dev/null
spans_settled
if [ -n "$REDIS" ]; then
  for _ in $(seq 100); do
    curl -s "http://127.0.0.1:$APORT/stats" | python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin)["redis"]["connected"] else 1)' && break
    sleep 0.2
  done
fi
BEFORE=$(count)
callgrind_control -i on "$QW" >/dev/null 2>&1
wrk -t1 -c8 -d"${SECONDS_RUN}s" "${WRK_ARGS[@]}" > "$WORK/wrk.txt"
grep -q "Non-2xx" "$WORK/wrk.txt" && { echo "profile: some answers were not 2xx:"; cat "$WORK/wrk.txt"; }
REQUESTS=$(( $(count) - BEFORE ))
[ -z "$REDIS" ] || curl -s "http://127.0.0.1:$APORT/stats" | python3 -c 'import json,sys; r=json.load(sys.stdin)["redis"]; print("redis:", r["url"], "nonces", json.dumps(r["nonces"]), "timeouts", r["timeouts"], "unavailable", r["unavailable"])'
[ -z "$TRACING" ] || curl -s "http://127.0.0.1:$APORT/stats" | python3 -c 'import json,sys; print("tracing:", json.dumps(json.load(sys.stdin)["tracing"]))'
kill -INT "$QW"; wait "$QW" 2>/dev/null || true
callgrind_annotate "$WORK/cg.out" > "$WORK/annotate.txt" 2>/dev/null
python3 - "$WORK/annotate.txt" "$REQUESTS" <<'PY'
import os, re, sys, collections
text = open(sys.argv[1]).read()
n = int(sys.argv[2])
by_lib = collections.Counter()
funcs = []
for line in text.splitlines():
    m = re.match(r"\s*([\d,]+) \(\s*[\d.]+%\)\s+(.*?)\s+\[(.*)\]$", line)
    if not m:
        continue
    ir = int(m.group(1).replace(",", ""))
    lib = m.group(3).split("/")[-1]
    lib = "quickway (Swift)" if lib == "quickway" else lib
    by_lib[lib] += ir
    funcs.append((ir, m.group(2).split(":")[-1][:70], lib))
total = sum(by_lib.values())
print(f"{n} requests; {total/n:,.0f} instructions per request (steady state: counted after start-up and a 1 s warm-up)")
print(f"{'library':<34}{'instr/request':>14}{'share':>8}")
for lib, ir in by_lib.most_common(10):
    print(f"{lib:<34}{ir/n:>14,.0f}{ir/total:>8.1%}")
print("\ntop functions (instr/request):")
for ir, f, lib in sorted(funcs, reverse=True)[:int(os.environ.get("QW_PROFILE_TOP", "15"))]:
    print(f"{ir/n:>10,.0f}  {f}  [{lib}]")
PY
