# Shared by scripts/bench.sh and scripts/bench/bench-cache.sh (sourced, not run).
# Expects ROUNDS, DURATION, CONNS, CASE set to defaults before parse_bench_options.

parse_bench_options() {
  while [ $# -gt 0 ]; do
    case "$1" in
      --rounds) ROUNDS=$2; shift 2 ;;
      --duration) DURATION=$2; shift 2 ;;
      --connections) CONNS=$2; shift 2 ;;
      --case) CASE=$2; shift 2 ;;
      -h|--help) sed -n '2,25p' "$0" | grep '^#' ; exit 0 ;;
      *) echo "unknown option $1" >&2; exit 2 ;;
    esac
  done
}

# Installs the named Debian packages when a command is missing ("cmd:package ...").
need_tools() {
  local missing=()
  for pair in "$@"; do command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}"); done
  if [ ${#missing[@]} -gt 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
}

# A work folder (/tmp/qw-bench-NAME.*) and PIDS, the processes started for the run:
# on exit every one is stopped by its PID and the folder removed.
bench_workdir() {
  WORK=$(mktemp -d "/tmp/qw-bench-$1.XXXXXX"); PIDS=()
  trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$WORK"' EXIT
}

# The benchmark backend: nginx answering every request with BODY (1 KB JSON) at ADDR,
# its files under DIR (DIR/nginx.conf). Usage: write_backend_conf DIR ADDR BODY
write_backend_conf() {
  mkdir -p "$1"
  cat > "$1/nginx.conf" <<CONF
daemon off; worker_processes 1; error_log $1/error.log; pid $1/nginx.pid;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 1000000;
  server { listen $2; location / { default_type application/json; return 200 '$3'; } } }
CONF
}

# The head of a one-worker Quickway config proxying to service `b` on 127.0.0.2:BPORT
# (listen, admin, log level, service); the caller appends its routes (and auth).
# Usage: quickway_one_worker_conf QPORT APORT BPORT
quickway_one_worker_conf() {
  cat <<CONF
listen: 127.0.0.1:$1
workers: 1
admin: { listen: 127.0.0.1:$2 }
log: { level: warn }
services: { b: { host: backend.local, port: $3, ips: [127.0.0.2] } }
CONF
}

wait_up() { for _ in $(seq 150); do curl -sf -o /dev/null "$1" && return 0; sleep 0.1; done; echo "bench: $1 did not come up" >&2; exit 1; }

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# One wrk run on core 1 against URL, charging the CPU of PID: prints
# "req_per_s p50_ms p99_ms cpu_us_per_req non2xx". Optional third argument: a wrk Lua
# script; further arguments are the script's.
run_one() {
  local url=$1 pid=$2 script=${3:-} out t0 t1
  local wrk_args=(-t1 -c"$CONNS" -d"${DURATION}s" --latency)
  [ -n "$script" ] && wrk_args+=(-s "$script")
  wrk_args+=("$url")
  [ $# -gt 3 ] && wrk_args+=(-- "${@:4}")
  t0=$(cpu_ticks "$pid")
  out=$(taskset -c 1 wrk "${wrk_args[@]}" 2>&1)
  t1=$(cpu_ticks "$pid")
  echo "$out" > "$WORK/last-wrk.txt"
  python3 - "$out" "$t0" "$t1" "$(getconf CLK_TCK)" <<'PY'
import re, sys
out, t0, t1, hz = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
def ms(s):
    v, unit = re.match(r"([\d.]+)(us|ms|s)", s).groups()
    return float(v) * {"us": 0.001, "ms": 1, "s": 1000}[unit]
rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
total = int(re.search(r"(\d+) requests in", out).group(1))
p50 = ms(re.search(r"^\s*50%\s+(\S+)", out, re.M).group(1))
p99 = ms(re.search(r"^\s*99%\s+(\S+)", out, re.M).group(1))
errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
print(f"{rps:.0f} {p50:.3f} {p99:.3f} {(t1 - t0) / hz * 1e6 / max(total, 1):.2f} {errors.group(1) if errors else 0}")
PY
}

# Medians of result lines "name v1 v2 ..." from a file, printed as a table.
print_medians() {
  python3 - "$1" "$2" <<'PY'
import sys
sys.path.insert(0, "scripts/bench")
from bench_medians import medians
print(f"\n{sys.argv[2]:<14}{'req/s':>10}{'p50 ms':>10}{'p99 ms':>10}{'CPU us/req':>12}{'non-2xx':>9}")
for k, m in medians(sys.argv[1]).items():
    print(f"{k:<14}{m[0]:>10.0f}{m[1]:>10.3f}{m[2]:>10.3f}{m[3]:>12.2f}{m[4]:>9.0f}")
PY
}

# One self-signed ECDSA P-256 certificate for bench.local, shared by the servers under
# test: DIR/cert.pem and DIR/key.pem. Usage: write_bench_cert DIR
write_bench_cert() {
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj "/CN=bench.local" \
    -addext "subjectAltName=DNS:bench.local" -keyout "$1/key.pem" -out "$1/cert.pem" 2>/dev/null
}

# The 15 functions of callgrind output FILE with the most instructions of their own, per
# unit of work (COUNT units): "instructions  name". Reads the whole annotation (a pipe cut
# short would fail under pipefail). Usage: callgrind_top FILE COUNT
callgrind_top() {
  callgrind_annotate --inclusive=no "$1" 2>/dev/null | python3 -c "
import re, sys
n = int(sys.argv[1])
rows = [m for m in (re.match(r'\s*([\d,]+) \(\s*[\d.]+%\)\s+(\S+)', l) for l in sys.stdin) if m]
for m in [m for m in rows if 'PROGRAM' not in m.group(2)][:15]:
    print(f'{int(m.group(1).replace(\",\", \"\")) // n:>8,}  {m.group(2).split(\":\", 1)[-1][:90]}')
" "$2"
}

# Quickway's config for the HTTP/2 runs: 1 worker, `tls_listen` with ALPN h2 and the
# bench certificate in DIR, every path proxied to BACKEND (host:port), into DIR/q.yaml.
# Usage: write_h2_quickway_conf DIR PLAIN_PORT ADMIN_PORT TLS_PORT BACKEND
write_h2_quickway_conf() {
  cat > "$1/q.yaml" <<CONF
listen: 127.0.0.1:$2
workers: 1
admin: { listen: 127.0.0.1:$3 }
tls_listen:
  listen: 127.0.0.1:$4
  certificates: [ { cert_file: $1/cert.pem, key_file: $1/key.pem } ]
  alpn: [h2, http/1.1]
http2: { max_concurrent_streams: 128 }
log: { level: warn, access_log: off }
services: { backend: { host: backend.local, port: ${5#*:}, ips: [${5%:*}] } }
routes: [ { name: all, match: { path_prefix: / }, service: backend } ]
CONF
}

# wrk's Lua script replaying pre-signed requests from a file (one "path<TAB>authorization"
# a line), each once, the path after the script's second argument (a path prefix).
# Usage: write_replay_lua FILE
write_replay_lua() {
  cat > "$1" <<'LUA'
-- Replays pre-signed requests from a file (one "path<TAB>authorization" a line), each once.
local reqs, i = {}, 0
function init(args)
  for line in io.lines(args[1]) do
    local path, auth = line:match("([^\t]+)\t(.*)")
    reqs[#reqs + 1] = wrk.format("GET", args[2] .. path, { ["Authorization"] = auth })
  end
end
function request()
  i = i + 1
  if i > #reqs then i = 1 end
  return reqs[i]
end
LUA
}

# Pre-signs N requests for key bench-app (secret bench-secret, salt bench-salt) with fresh
# nonces, signed for "/signed" + path (independent signer: examples/qw1_client.py).
# Usage: presign N OUT
presign() {
  python3 - "$1" "$2" <<'PY'
import os, sys, time, secrets
sys.path.insert(0, os.path.join(os.getcwd(), "examples"))
import qw1_client
n, out = int(sys.argv[1]), sys.argv[2]
now, prefix = int(time.time()), secrets.token_hex(4)
with open(out, "w") as f:
    for i in range(n):
        path = f"/items?id={i % 1000}"
        auth = qw1_client.authorization("bench-app", "bench-secret", "bench-salt", "GET", "/signed" + path,
                                        timestamp=now, nonce=f"{prefix}-{i:08d}")
        f.write(f"{path}\t{auth}\n")
PY
}

# A throw-away CA and a certificate for Redis at 127.0.0.1 signed by it (as the TLS tests
# make them): DIR/ca.pem, DIR/redis.pem, DIR/redis.key. Usage: write_redis_tls_files DIR
write_redis_tls_files() {
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj "/CN=bench CA" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign" \
    -keyout "$1/ca.key" -out "$1/ca.pem" 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=redis" \
    -keyout "$1/redis.key" -out "$1/redis.csr" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' > "$1/redis.ext"
  openssl x509 -req -in "$1/redis.csr" -CA "$1/ca.pem" -CAkey "$1/ca.key" -CAcreateserial -days 1 \
    -extfile "$1/redis.ext" -out "$1/redis.pem" 2>/dev/null
}
