#!/usr/bin/env bash
# Installs the Debian packages Quickway needs (if missing) and builds the release binary.
# Usage: scripts/setup.sh            (set QW_SKIP_BUILD=1 to only install packages)
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
for pkg in libevent-dev libcurl4-openssl-dev libssl-dev libhiredis-dev libnghttp2-dev libpcre2-dev zlib1g-dev libbrotli-dev libzstd-dev pkg-config curl; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

if ! command -v swift >/dev/null 2>&1; then
  echo "setup: swift is not on PATH (Swift 6.x is expected, e.g. /opt/swift/usr/bin)" >&2
  exit 1
fi

if [ "${QW_SKIP_BUILD:-0}" != "1" ]; then
  echo "setup: building release binary (swift build -c release)"
  # The build's own exit status decides (PIPESTATUS[0]), not grep's and not whether an
  # older .build/release/quickway is still there: a failed build must not pass with a
  # stale binary. (grep exits 1 when it prints nothing, hence the `|| true` inside.)
  set +e
  swift build -c release 2>&1 | { grep -vE '^\[[0-9]+/[0-9]+\]' || true; }
  build_rc=${PIPESTATUS[0]}
  set -e
  if [ "$build_rc" -ne 0 ]; then
    echo "setup: swift build failed (exit $build_rc); any existing .build/release/quickway is stale and was not used" >&2
    exit 1
  fi
  test -x .build/release/quickway || { echo "setup: swift build succeeded but .build/release/quickway is missing" >&2; exit 1; }
  echo "setup: built .build/release/quickway"
fi
