#!/usr/bin/env bash
# JWT benchmark, run by scripts/bench.sh --case jwt (or alone): one Quickway worker on
# core 0, nginx as the backend, wrk on core 1, in interleaved rounds of four cases on the
# same gateway:
#   open        a route with auth off, sent the same request and token (the baseline);
#   jwt-reused  the same backend behind auth: jwt, every request with one RS256 token
#               (after the first, a SHA-256 and a lookup in the worker's token cache);
#   rs256-fresh / es256-fresh  a different token on each request (20,000 tokens cycled,
#               more than the 10,000-entry token cache holds): a signature check each.
# Prints medians (req/s, p50, p99, gateway CPU per request) and the ratios; the CPU per
# request of a fresh token minus the open route's is the cost of one verification,
# to set against `openssl speed -seconds 3 rsa2048 ecdsap256` (its verify rate is the floor).
# Tokens are minted by PyJWT (pip install PyJWT cryptography).
# Usage: scripts/bench/bench-jwt.sh [--rounds N] [--duration S] [--connections C]
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=5; DURATION=8; CONNS=64; CASE=jwt
. scripts/bench/bench-common.sh
parse_bench_options "$@"
need_tools nginx:nginx-light wrk:wrk
scripts/setup.sh >/dev/null
QW=${QW_BIN:-$PWD/.build/release/quickway}
bench_workdir jwt

P_QW=18880; P_QW_ADMIN=18890; BACKEND_PORT=18881
BODY=$(python3 -c 'import json; print(json.dumps({"items": [{"id": i, "name": "item-%04d" % i} for i in range(40)]})[:1024])')
write_backend_conf "$WORK/backend" "127.0.0.2:$BACKEND_PORT" "$BODY"
echo "bench jwt: minting tokens (PyJWT)"
python3 - "$WORK" <<'PY'
import json, sys, time
import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm
work = sys.argv[1]
rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
ec_key = ec.generate_private_key(ec.SECP256R1())
keys = []
for key, kid, algo in ((rsa_key, "rsa", RSAAlgorithm), (ec_key, "ec", ECAlgorithm)):
    d = algo.to_jwk(key.public_key(), as_dict=True)
    d["kid"] = kid
    keys.append(d)
json.dump({"keys": keys}, open(f"{work}/jwks.json", "w"))
exp = int(time.time()) + 7200
def mint(key, alg, kid, i):
    return jwt.encode({"iss": "https://idp.bench/", "aud": "api", "sub": f"user-{i % 100}", "exp": exp, "n": i},
                      key, algorithm=alg, headers={"kid": kid})
open(f"{work}/reused.txt", "w").write(mint(rsa_key, "RS256", "rsa", 0) + "\n")
with open(f"{work}/rs256.txt", "w") as f:
    for i in range(20000): f.write(mint(rsa_key, "RS256", "rsa", i) + "\n")
with open(f"{work}/es256.txt", "w") as f:
    for i in range(20000): f.write(mint(ec_key, "ES256", "ec", i) + "\n")
PY
{ quickway_one_worker_conf "$P_QW" "$P_QW_ADMIN" "$BACKEND_PORT"
  cat <<CONF
jwt:
  providers:
    bench:
      issuer: "https://idp.bench/"
      audiences: [api]
      jwks_file: $WORK/jwks.json
      algorithms: [RS256, ES256]
      forward_claims: { sub: X-User-Id }
routes:
  - { name: jwt, match: { path_prefix: /jwt/ }, service: b, auth: jwt }
  - { name: open, match: { path_prefix: / }, service: b }
CONF
} > "$WORK/q.yaml"
for name in reused rs256 es256; do
  cat > "$WORK/$name.lua" <<LUA
local tokens = {}
for line in io.lines("$WORK/$name.txt") do tokens[#tokens + 1] = line end
local i = 0
request = function()
  i = i % #tokens + 1
  return wrk.format("GET", "/jwt/items", { ["Authorization"] = "Bearer " .. tokens[i] })
end
LUA
done
# The open route gets the same request (the token too, unread), so both sides parse the
# same bytes and the difference is what auth: jwt adds.
sed 's|/jwt/items|/open/items|; s|reused.txt|reused.txt|' "$WORK/reused.lua" > "$WORK/open.lua"
taskset -c 1 nginx -p "$WORK/backend" -c "$WORK/backend/nginx.conf" & PIDS+=($!)
taskset -c 0 "$QW" serve --config "$WORK/q.yaml" 2>"$WORK/q.log" & PIDS+=($!); QW_PID=$!
wait_up "http://127.0.0.1:$P_QW/open"
code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $(cat "$WORK/reused.txt")" "http://127.0.0.1:$P_QW/jwt/items")
[ "$code" = 200 ] || { echo "bench jwt: the token is refused ($code)" >&2; cat "$WORK/q.log" >&2; exit 1; }
echo "bench jwt: $ROUNDS interleaved rounds of ${DURATION}s, $CONNS connections; gateway on core 0, wrk and nginx on core 1"
taskset -c 1 wrk -t1 -c"$CONNS" -d2s "http://127.0.0.1:$P_QW/open/items" >/dev/null
: > "$WORK/results"
for r in $(seq "$ROUNDS"); do
  o=$(run_one "http://127.0.0.1:$P_QW/" "$QW_PID" "$WORK/open.lua"); echo "open $o" >> "$WORK/results"
  j=$(run_one "http://127.0.0.1:$P_QW/" "$QW_PID" "$WORK/reused.lua"); echo "jwt-reused $j" >> "$WORK/results"
  rs=$(run_one "http://127.0.0.1:$P_QW/" "$QW_PID" "$WORK/rs256.lua"); echo "rs256-fresh $rs" >> "$WORK/results"
  es=$(run_one "http://127.0.0.1:$P_QW/" "$QW_PID" "$WORK/es256.lua"); echo "es256-fresh $es" >> "$WORK/results"
  echo "round $r: open $o | reused $j | rs256 $rs | es256 $es   (req/s p50ms p99ms cpu_us/req non2xx)"
done
print_medians "$WORK/results" "jwt"
python3 - "$WORK/results" <<'PY'
import sys
sys.path.insert(0, "scripts/bench")
from bench_medians import medians
m = medians(sys.argv[1])
o, j = m["open"], m["jwt-reused"]
print(f"\nratio jwt-reused/open: req/s {j[0]/o[0]:.3f}x, CPU/req {j[3]/o[3]:.3f}x")
for k in ("rs256-fresh", "es256-fresh"):
    f = m[k]
    extra = f[3] - o[3]
    print(f"{k}: {extra:.1f} us of gateway CPU per request over the open route (about {1e6/extra:.0f} verifications/s)")
PY
