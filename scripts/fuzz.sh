#!/usr/bin/env bash
# Bounded libFuzzer runs of three harnesses: the HTTP parser (fuzz-http) and the QW1
# canonicaliser and header parser (fuzz-qw1), built with swiftc -sanitize=fuzzer,address
# from their own source files; and the config loader (fuzz-config: Yams and the whole
# schema), built by SwiftPM with -D FUZZING into .build-fuzzpkg.
# Usage: scripts/fuzz.sh [--seconds N per target] [--jobs J] [--update-corpus]
# Seeds: Fuzz/corpus/<target>/ (read only); new inputs go to .build-fuzz/corpus-<target>/;
# --update-corpus merges a minimised set of both back into Fuzz/corpus/. Crashes: .build-fuzz/.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER=60; JOBS=1; UPDATE=0
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) SECONDS_PER=$2; shift 2 ;;
    --jobs) JOBS=$2; shift 2 ;;
    --update-corpus) UPDATE=1; shift ;;
    *) echo "usage: scripts/fuzz.sh [--seconds N] [--jobs J]" >&2; exit 2 ;;
  esac
done
OUT=.build-fuzz
mkdir -p "$OUT"
SRC=Sources/QuickwayCore
HTTP_SOURCES=("$SRC/HTTP/HTTPSyntax.swift" "$SRC/HTTP/HTTPRequestHead.swift" "$SRC/HTTP/HTTPRequestParser.swift" "$SRC/HTTP/HTTPBodyDecoder.swift"
              "$SRC/HTTP/RequestTargetNormalizer.swift" "$SRC/Support/ByteArrays.swift")
build() {
  local name=$1; shift
  swiftc -sanitize=fuzzer,address -parse-as-library -Onone -g "$@" -o "$OUT/fuzz-$name" 2>&1 | grep -v "warning:" || true
  test -x "$OUT/fuzz-$name" || { echo "fuzz: build of $name failed" >&2; exit 1; }
}
build http "${HTTP_SOURCES[@]}" Fuzz/FuzzHTTP.swift
build qw1 "${HTTP_SOURCES[@]}" "$SRC/Auth/CanonicalQuery.swift" "$SRC/Auth/QW1Header.swift" Fuzz/FuzzQW1.swift
swift build --product quickway-fuzz-config --scratch-path .build-fuzzpkg -Xswiftc -sanitize=fuzzer,address -Xswiftc -DFUZZING 2>&1 \
  | grep -E "error:" || true
cp .build-fuzzpkg/debug/quickway-fuzz-config "$OUT/fuzz-config" || { echo "fuzz: build of config failed" >&2; exit 1; }
status=0
for t in http qw1 config; do
  echo "== fuzz-$t for ${SECONDS_PER}s"
  mkdir -p "Fuzz/corpus/$t" "$OUT/corpus-$t"
  if ! "$OUT/fuzz-$t" -max_total_time="$SECONDS_PER" -max_len=4096 -jobs="$JOBS" -workers="$JOBS" \
       -artifact_prefix="$OUT/$t-" "$OUT/corpus-$t" "Fuzz/corpus/$t" 2>"$OUT/fuzz-$t.log"; then
    echo "fuzz-$t FOUND A FAILURE:"; grep -E "ERROR|Fatal|SUMMARY|precondition" "$OUT/fuzz-$t.log" | head -20; status=1
  fi
  grep -E "^#[0-9]+.*DONE|Done [0-9]+ runs" "$OUT/fuzz-$t.log" | tail -1 || tail -2 "$OUT/fuzz-$t.log"
  if [ "$UPDATE" = 1 ]; then
    mkdir -p "$OUT/merged-$t"
    "$OUT/fuzz-$t" -merge=1 "$OUT/merged-$t" "Fuzz/corpus/$t" "$OUT/corpus-$t" 2>/dev/null
    rm -rf "Fuzz/corpus/$t" && mv "$OUT/merged-$t" "Fuzz/corpus/$t"
    echo "corpus $t: $(ls "Fuzz/corpus/$t" | wc -l) inputs"
  fi
done
exit $status
