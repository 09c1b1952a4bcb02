#!/usr/bin/env bash
# Sets up, then runs the gateway on config.yaml together with the local demo backends
# (127.0.0.2-4:9001). Try: curl -i http://127.0.0.1:8080/demo/hello
#                          curl -s http://127.0.0.1:9901/stats
# Ctrl-C stops both. Usage: scripts/run.sh [--config FILE]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
QW=.build/release/quickway
CONFIG=config.yaml
if [ "${1:-}" = "--config" ] && [ -n "${2:-}" ]; then CONFIG=$2; fi

"$QW" check --config "$CONFIG"
"$QW" demo-backends &
DEMO_PID=$!
trap 'kill "$DEMO_PID" 2>/dev/null || true; wait "$DEMO_PID" 2>/dev/null || true' EXIT
echo "run: demo backends pid $DEMO_PID; gateway on $(grep -m1 '^listen:' "$CONFIG" | awk '{print $2}')"
echo "run: try  curl -i http://127.0.0.1:8080/demo/hello   and   curl -s http://127.0.0.1:9901/stats"
"$QW" serve --config "$CONFIG"
