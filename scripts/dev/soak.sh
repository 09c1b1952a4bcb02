#!/usr/bin/env bash
# Soak: 10 minutes (by default) of steady mixed traffic against the release build, or
# with --asan against an AddressSanitizer build (LeakSanitizer included), then a report
# of unexpected errors, the memory curve after warm-up, descriptors and access-log lines.
# Usage: scripts/dev/soak.sh [--seconds N] [--rate R] [--asan] [--redis]
set -euo pipefail
cd "$(dirname "$0")/../.."
ARGS=(); ASAN=0
while [ $# -gt 0 ]; do
  case "$1" in
    --asan) ASAN=1; shift ;;
    --redis) ARGS+=("$1"); shift ;;
    --seconds|--rate) ARGS+=("$1" "$2"); shift 2 ;;
    *) echo "usage: scripts/dev/soak.sh [--seconds N] [--rate R] [--asan] [--redis]" >&2; exit 2 ;;
  esac
done
QW_SKIP_BUILD=1 scripts/setup.sh >/dev/null
if [ "$ASAN" = 1 ]; then
  swift build -c debug -Xswiftc -sanitize=address --scratch-path .build-asan 2>&1 | grep -E "error" || true
  BIN="$PWD/.build-asan/debug/quickway"
  rm -f /tmp/quickway-asan.*
  export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:log_path=/tmp/quickway-asan"
  ARGS+=(--sanitizer-build)
else
  swift build -c release 2>&1 | grep -E "error" || true
  BIN="$PWD/.build/release/quickway"
fi
status=0
python3 scripts/dev/soak.py --binary "$BIN" "${ARGS[@]}" || status=$?
if [ "$ASAN" = 1 ]; then
  if ls /tmp/quickway-asan.* >/dev/null 2>&1; then
    echo "AddressSanitizer/LeakSanitizer reports:"; cat /tmp/quickway-asan.*; status=1
  else
    echo "AddressSanitizer/LeakSanitizer: no reports"
  fi
fi
exit $status
