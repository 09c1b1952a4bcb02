#!/usr/bin/env bash
# Runs every test: unit tests (swift test) and integration tests (pytest, which start
# the real release binary against real local backends). Prints a final
# "N passed, N failed" line. Usage: scripts/test.sh
set -uo pipefail
cd "$(dirname "$0")/.."
QW_SKIP_BUILD=1 scripts/setup.sh || exit 1

# The shared-tier tests start their own redis-server (Debian's) on loopback; the rediss://
# tests make their CA with the openssl command line; the partition test puts gateways in
# network namespaces with iproute2's `ip`.
if ! command -v redis-server >/dev/null 2>&1 || ! command -v openssl >/dev/null 2>&1 || ! command -v ip >/dev/null 2>&1; then
  echo "test: installing redis-server, openssl and iproute2 (the tests start their own Redis; the system service is not used)"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq redis-server openssl iproute2 >/dev/null; } \
    || { echo "test: cannot install redis-server, openssl and iproute2" >&2; exit 1; }
fi

# Python test dependencies (PyPI), as module:package: pytest; botocore (SigV4 signer),
# cryptography (test CA), prometheus_client (reference /metrics parser), PyYAML (deploy files),
# h2 (an independent HTTP/2 client that also writes raw frames for the attack tests),
# websockets (WebSocket client and backend), http_sf (an RFC 8941 Structured Fields parser,
# for the RateLimit fields), brotli and zstandard (independent decoders of compressed answers),
# PyJWT (mints the JWT tests' tokens, independently of the gateway), opentelemetry-proto
# (the OTLP protobuf messages: the tracing tests' collector decodes the gateway's exports).
for pair in pytest:pytest botocore:botocore cryptography:cryptography prometheus_client:prometheus_client yaml:PyYAML h2:h2 websockets:websockets http_sf:http-sf brotli:brotli zstandard:zstandard jwt:PyJWT opentelemetry.proto:opentelemetry-proto; do
  if ! python3 -c "import ${pair%%:*}" >/dev/null 2>&1; then
    echo "test: installing ${pair#*:}"
    python3 -m pip install -q "${pair#*:}" || { echo "test: cannot install ${pair#*:}" >&2; exit 1; }
  fi
done

echo "== unit tests (swift test)"
unit_log=$(mktemp)
swift test --disable-swift-testing 2>&1 | tee "$unit_log" | grep -E "error|failed|Executed .* tests" | tail -20
unit_rc=${PIPESTATUS[0]}
# The last "Executed" line is the total ("Executed N tests, with [K tests skipped and] F failures").
unit_line=$(grep -E "^\s*Executed [0-9]+ tests?, with ([0-9]+ tests? skipped and )?[0-9]+ failures?" "$unit_log" | tail -1)
unit_total=$(echo "$unit_line" | sed -E 's/.*Executed ([0-9]+) tests?.*/\1/')
unit_failed=$(echo "$unit_line" | sed -E 's/.* ([0-9]+) failures?.*/\1/')
unit_skipped=$(echo "$unit_line" | grep -oE "[0-9]+ tests? skipped" | grep -oE "^[0-9]+" || echo 0)
[ -n "$unit_total" ] || { unit_total=0; unit_failed=1; }
[ "$unit_skipped" -gt 0 ] && echo "test: $unit_skipped unit test(s) skipped (the SigV4 vectors need ../shared/testdata beside the checkout)"

echo "== building release binary for integration tests"
swift build -c release 2>&1 | grep -E "error|warning: unre" ; build_rc=${PIPESTATUS[0]}
if [ "$build_rc" -ne 0 ]; then echo "test: release build failed" >&2; exit 1; fi

echo "== integration tests (pytest)"
it_log=$(mktemp)
# --tb=short: a short traceback per failure. CPython 3.11 once crashed while formatting a
# long one (INTERNALERROR "AST constructor recursion depth mismatch"), ending the run
# there, so one failure hid every later test.
QUICKWAY_BIN="$PWD/.build/release/quickway" python3 -m pytest -q -p no:cacheprovider --tb=short Tests/integration 2>&1 | tee "$it_log"
it_rc=${PIPESTATUS[0]}
it_passed=$(grep -oE "[0-9]+ passed" "$it_log" | tail -1 | grep -oE "[0-9]+" || echo 0)
it_failed=$(grep -oE "[0-9]+ (failed|error)" "$it_log" | awk '{s+=$1} END {print s+0}')

it_skipped=$(grep -oE "[0-9]+ skipped" "$it_log" | tail -1 | grep -oE "[0-9]+" || echo 0)
passed=$(( unit_total - unit_skipped - unit_failed + it_passed ))
failed=$(( unit_failed + it_failed ))
if [ "$unit_rc" -ne 0 ] && [ "$unit_failed" -eq 0 ]; then failed=$((failed + 1)); fi
if [ "$it_rc" -ne 0 ] && [ "$it_failed" -eq 0 ]; then failed=$((failed + 1)); fi
skipped=$(( unit_skipped + it_skipped ))
if [ "$skipped" -gt 0 ]; then echo "$passed passed, $failed failed, $skipped skipped"; else echo "$passed passed, $failed failed"; fi
[ "$failed" -eq 0 ]
