#!/usr/bin/env bash
# User-space instructions per WebSocket echo round trip, with valgrind's callgrind
# (repeatable on a noisy machine, unlike msg/s). Quickway (1 worker) relays between the
# C load generator's clients and its echo backend (scripts/bench/bench_ws_load.c); after a
# 3 s warm-up, instrumentation is on for a 10 s run of 10 connections sending 64-byte
# messages. Prints instructions per round trip (each message crosses the relay twice)
# and the top functions. QW_BIN=path profiles another build; KEEP_CALLGRIND=file keeps
# callgrind's output (for callgrind_annotate --tree=caller).
# Usage: scripts/profile/profile-websocket.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/bench/bench-common.sh   # callgrind_top
command -v valgrind >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null; }
scripts/setup.sh >/dev/null
WORK=$(mktemp -d /tmp/qw-profile-ws.XXXXXX); PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$WORK"' EXIT
cc -O2 -o "$WORK/load" scripts/bench/bench_ws_load.c -lcrypto
BACKEND_PORT=18881; QPORT=18880; APORT=18890
cat > "$WORK/q.yaml" <<CONF
listen: 127.0.0.1:$QPORT
workers: 1
admin: { listen: 127.0.0.1:$APORT }
log: { level: warn, access_log: off }
services:
  ws: { host: ws.local, port: $BACKEND_PORT, ips: [127.0.0.2], probe: { kind: tcp, interval: 2s } }
routes:
  - { name: ws, match: { path_prefix: / }, service: ws, websocket: { heartbeat: 30s, idle_timeout: 10m } }
CONF
"$WORK/load" backend 127.0.0.2 "$BACKEND_PORT" > "$WORK/backend.out" & PIDS+=($!)
# valgrind cannot read the release binary's DWARF 5 debug info: profile a copy without it.
strip --strip-debug -o "$WORK/quickway" "${QW_BIN:-.build/release/quickway}"
valgrind --tool=callgrind --callgrind-out-file="$WORK/cg.out" --instr-atstart=no "$WORK/quickway" serve --config "$WORK/q.yaml" 2>"$WORK/vg.log" & PIDS+=($!); VG=$!
for _ in $(seq 300); do curl -sf -o /dev/null "http://127.0.0.1:$APORT/health" && break; sleep 0.2; done
"$WORK/load" client 127.0.0.1 "$QPORT" /echo 10 3 64 > /dev/null
callgrind_control -i on "$VG" >/dev/null
out=$("$WORK/load" client 127.0.0.1 "$QPORT" /echo 10 10 64)
callgrind_control -i off "$VG" >/dev/null
callgrind_control -d "$VG" >/dev/null
for _ in $(seq 50); do ls "$WORK"/cg.out* >/dev/null 2>&1 && break; sleep 0.2; done
sleep 1
f=$(ls -t "$WORK"/cg.out* | head -1)
if [ -n "${KEEP_CALLGRIND:-}" ]; then cp "$f" "$KEEP_CALLGRIND"; fi
callgrind_annotate "$f" > "$WORK/annotated.txt" 2>/dev/null   # whole (a pipe cut short fails under pipefail)
total=$(grep -m1 "PROGRAM TOTALS" "$WORK/annotated.txt" | awk '{gsub(",","",$1); print $1}')
msgs=$(python3 -c "import sys; print(int(float(sys.argv[1].split()[0]) * 10))" "$out")
echo "$msgs round trips; $((total / msgs)) user-space instructions per round trip"
echo "top functions (instr/round trip):"
callgrind_top "$f" "$msgs"
