#!/usr/bin/env bash
# Per-request instruction profile of the proxy path with valgrind's callgrind
# (counts instructions, so it is repeatable on a noisy machine).
# Starts a local nginx backend, runs Quickway (1 worker) under callgrind, sends a
# bounded load with wrk, and prints instructions per request by library and the top
# functions. Usage: scripts/profile.sh [--seconds N]
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_RUN=8
[ "${1:-}" = "--seconds" ] && SECONDS_RUN=$2
for tool in valgrind nginx wrk; do
  command -v "$tool" >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind nginx-light wrk >/dev/null; break; }
done
scripts/setup.sh >/dev/null
WORK=$(mktemp -d /tmp/qw-profile.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT
BPORT=18181; QPORT=18180; APORT=18190
cat > "$WORK/backend.conf" <<CONF
daemon off; worker_processes 1; error_log $WORK/backend-error.log; pid $WORK/backend.pid;
events { worker_connections 1024; }
http { access_log off; server { listen 127.0.0.2:$BPORT; location / { default_type application/json; return 200 '{"ok":true}'; } } }
CONF
cat > "$WORK/q.yaml" <<CONF
listen: 127.0.0.1:$QPORT
workers: 1
admin: { listen: 127.0.0.1:$APORT }
log: { level: warn }
services: { b: { host: backend.local, port: $BPORT, ips: [127.0.0.2] } }
routes: [ { name: all, match: { path_prefix: / }, service: b } ]
CONF
# valgrind 3.19 cannot read the DWARF of Swift 6 binaries: profile a copy without it.
objcopy --strip-debug .build/release/quickway "$WORK/quickway"
nginx -p "$WORK" -c "$WORK/backend.conf" & PIDS+=($!)
valgrind --tool=callgrind --callgrind-out-file="$WORK/cg.out" "$WORK/quickway" serve --config "$WORK/q.yaml" 2>"$WORK/valgrind.log" & QW=$!; PIDS+=($QW)
for _ in $(seq 100); do curl -sf -o /dev/null "http://127.0.0.1:$QPORT/" && break; sleep 0.2; done
wrk -t1 -c8 -d"${SECONDS_RUN}s" "http://127.0.0.1:$QPORT/" >/dev/null
REQUESTS=$(curl -s "http://127.0.0.1:$APORT/stats" | python3 -c 'import json,sys; print(json.load(sys.stdin)["requests"]["total"])')
kill -INT "$QW"; wait "$QW" 2>/dev/null || true
callgrind_annotate "$WORK/cg.out" > "$WORK/annotate.txt" 2>/dev/null
python3 - "$WORK/annotate.txt" "$REQUESTS" <<'PY'
import re, sys, collections
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
print(f"{n} requests; {total/n:,.0f} instructions per request (start-up included, amortised)")
print(f"{'library':<34}{'instr/request':>14}{'share':>8}")
for lib, ir in by_lib.most_common(10):
    print(f"{lib:<34}{ir/n:>14,.0f}{ir/total:>8.1%}")
print("\ntop functions (instr/request):")
for ir, f, lib in sorted(funcs, reverse=True)[:15]:
    print(f"{ir/n:>10,.0f}  {f}  [{lib}]")
PY
