#!/usr/bin/env bash
# ThreadSanitizer run of the concurrency unit tests: the flight table from several
# threads with real worker loops (FlightTableTests), the counters and flags shared
# between threads through the C atomic helpers (SharedCounterTests), and the pipeline and
# the HTTP/1.1 codec driven from a test thread onto a worker loop (PipelineTests,
# HTTP1ConnectionTests: merged waiters delivered across threads), and the nonce store's
# sharded tables claimed from four threads at once (testNonceStoreUnderConcurrentUse). Builds the tests
# with -sanitize=thread (Swift and the C shims) into its own scratch path, .build-tsan.
# Fails on a failed test or on any ThreadSanitizer report.
# Usage: scripts/dev/tsan.sh [--filter REGEX]    (default: the suites above)
set -euo pipefail
cd "$(dirname "$0")/../.."
FILTER="FlightTableTests|SharedCounterTests|PipelineTests|HTTP1ConnectionTests|testNonceStoreUnderConcurrentUse"
while [ $# -gt 0 ]; do
  case "$1" in
    --filter) FILTER="$2"; shift 2 ;;
    *) echo "usage: scripts/dev/tsan.sh [--filter REGEX]" >&2; exit 2 ;;
  esac
done
QW_SKIP_BUILD=1 scripts/setup.sh >/dev/null
SCRATCH=.build-tsan
echo "== building the tests with ThreadSanitizer ($SCRATCH)"
BUILD_LOG=$(mktemp)
if ! nice -n 10 swift build --build-tests --sanitize=thread --scratch-path "$SCRATCH" >"$BUILD_LOG" 2>&1; then
  grep -E "error:" "$BUILD_LOG" | head -40
  echo "tsan: build failed (log: $BUILD_LOG)" >&2
  exit 1
fi

LOG_DIR=$(mktemp -d)
echo "== running: $FILTER (reports in $LOG_DIR)"
status=0
# halt_on_error=0: see every report; exitcode 66 when there was any.
TSAN_OPTIONS="halt_on_error=0:second_deadlock_stack=1:history_size=4:log_path=$LOG_DIR/tsan ${TSAN_OPTIONS:-}" \
  swift test --skip-build --sanitize=thread --scratch-path "$SCRATCH" --disable-swift-testing --filter "$FILTER" 2>&1 \
  | grep -E "Test Case .*(passed|failed)|error|Executed|FlightTableTests:" || true
test "${PIPESTATUS[0]}" -eq 0 || status=1
if ls "$LOG_DIR"/tsan* >/dev/null 2>&1; then
  echo "ThreadSanitizer reports:"
  cat "$LOG_DIR"/tsan*
  echo "tsan: $(grep -h -c 'WARNING: ThreadSanitizer' "$LOG_DIR"/tsan* | awk '{s+=$1} END {print s+0}') report(s)"
  status=1
else
  echo "ThreadSanitizer: no reports"
fi
exit $status
