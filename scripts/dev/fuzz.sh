#!/usr/bin/env bash
# Bounded libFuzzer runs of seven harnesses (FUZZING.md has the table): the HTTP parser
# (fuzz-http), the QW1 canonicaliser and header parser (fuzz-qw1), the upstream response
# head parser (fuzz-upstream), the HTTP/2 request field checks (fuzz-h2fields), the
# WebSocket frame parser and UTF-8 validator (fuzz-websocket) and hiredis's reader into
# RedisReply (fuzz-redis), each built with swiftc -sanitize=fuzzer,address from its own
# source files; and the config loader (fuzz-config: Yams and the whole schema), built by
# SwiftPM with -D FUZZING into .build-fuzzpkg.
# Usage: scripts/dev/fuzz.sh [--seconds N per target] [--jobs J] [--update-corpus] [--only T]...
# --only T (repeatable): build and run only target T (http, qw1, upstream, h2fields,
# websocket, redis, config).
# Seeds: Fuzz/corpus/<target>/ (read only); new inputs go to .build-fuzz/corpus-<target>/;
# --update-corpus merges a minimised set of both back into Fuzz/corpus/. Crashes: .build-fuzz/.
set -euo pipefail
cd "$(dirname "$0")/../.."
SECONDS_PER=60; JOBS=1; UPDATE=0
ALL=(http qw1 upstream h2fields websocket redis config)
TARGETS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) SECONDS_PER=$2; shift 2 ;;
    --jobs) JOBS=$2; shift 2 ;;
    --update-corpus) UPDATE=1; shift ;;
    --only) TARGETS+=("$2"); shift 2 ;;
    *) echo "usage: scripts/dev/fuzz.sh [--seconds N] [--jobs J] [--update-corpus] [--only T]..." >&2; exit 2 ;;
  esac
done
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=("${ALL[@]}")
for t in "${TARGETS[@]}"; do
  [[ " ${ALL[*]} " == *" $t "* ]] || { echo "fuzz: unknown target $t (${ALL[*]})" >&2; exit 2; }
done
OUT=.build-fuzz
mkdir -p "$OUT"
# A failing check reports through libFuzzer's deadly-signal handler; Swift's own crash
# handler would run first and trip AddressSanitizer reading the stack.
export SWIFT_BACKTRACE=enable=no
SRC=Sources/QuickwayCore
HTTP_SOURCES=("$SRC/HTTP/HTTPSyntax.swift" "$SRC/HTTP/HTTPRequestHead.swift" "$SRC/HTTP/HTTPRequestParser.swift" "$SRC/HTTP/HTTPBodyDecoder.swift"
              "$SRC/HTTP/RequestTargetNormalizer.swift" "$SRC/Support/ByteArrays.swift")
# UpstreamResponseHead asks UpstreamRequestHeaders which headers the gateway manages; that
# file brings the request writer's own types with it (header rules, the client address).
UPSTREAM_SOURCES=("$SRC/Upstream/UpstreamResponseHead.swift" "$SRC/Upstream/UpstreamRequestHeaders.swift" "$SRC/Upstream/UpstreamHeaders.swift"
                  "$SRC/HTTP/HeaderRules.swift" "$SRC/Policy/ClientAddress.swift" "$SRC/Pipeline/RequestId.swift" "$SRC/Support/BufferWriter.swift"
                  "$SRC/Support/ByteBuffer.swift" "$SRC/Support/BufferPool.swift" "$SRC/Support/DecimalText.swift"
                  "$SRC/Support/TrustedProxies.swift" "$SRC/Tracing/RequestTrace.swift" "$SRC/Tracing/TraceParent.swift"
                  "$SRC/Tracing/SpanEventLog.swift" "$SRC/Tracing/TraceHeaders.swift" "$SRC/HTTP/GatewayError.swift"
                  "$SRC/Support/Clock.swift")
WEBSOCKET_SOURCES=("$SRC/WebSocket/WebSocketFrameParser.swift" "$SRC/WebSocket/WebSocketFrame.swift" "$SRC/WebSocket/UTF8Validator.swift"
                   "$SRC/WebSocket/MessageInflater.swift")
build() {
  local name=$1; shift
  rm -f "$OUT/fuzz-$name"
  swiftc -sanitize=fuzzer,address -parse-as-library -Onone -g "$@" -o "$OUT/fuzz-$name" 2>&1 | grep -v "warning:" || true
  test -x "$OUT/fuzz-$name" || { echo "fuzz: build of $name failed" >&2; exit 1; }
}
for t in "${TARGETS[@]}"; do
  case "$t" in
    http) build http "${HTTP_SOURCES[@]}" Fuzz/FuzzHTTP.swift ;;
    qw1) build qw1 "${HTTP_SOURCES[@]}" "$SRC/Auth/CanonicalQuery.swift" "$SRC/Auth/QW1Header.swift" Fuzz/FuzzQW1.swift ;;
    upstream) build upstream "${HTTP_SOURCES[@]}" "${UPSTREAM_SOURCES[@]}" Fuzz/FuzzUpstreamHead.swift ;;
    h2fields) build h2fields "${HTTP_SOURCES[@]}" "$SRC/HTTP2/HTTP2RequestFields.swift" Fuzz/FuzzHTTP2Fields.swift ;;
    websocket)
      # MessageInflater imports CQuickwayShims: here a module of qw_inflate.h (zlib) alone,
      # with its C file built beside the harness.
      mkdir -p "$OUT/inflate-module"
      printf 'module CQuickwayShims [system] {\n  header "%s/Sources/CQuickwayShims/include/qw_inflate.h"\n  link "z"\n  export *\n}\n' \
        "$PWD" > "$OUT/inflate-module/module.modulemap"
      cc -c -O1 -g -fsanitize=address -I Sources/CQuickwayShims/include Sources/CQuickwayShims/qw_inflate.c -o "$OUT/qw_inflate.o"
      build websocket -I "$OUT/inflate-module" "${WEBSOCKET_SOURCES[@]}" Fuzz/FuzzWebSocket.swift "$OUT/qw_inflate.o" -lz ;;
    redis)
      # RedisReply.swift imports CQuickwayShims: here a module of qw_redis.h (hiredis) alone.
      mkdir -p "$OUT/redis-module"
      printf 'module CQuickwayShims [system] {\n  header "%s/Sources/CQuickwayShims/include/qw_redis.h"\n  link "hiredis"\n  export *\n}\n' \
        "$PWD" > "$OUT/redis-module/module.modulemap"
      build redis -I "$OUT/redis-module" "$SRC/Redis/RedisReply.swift" Fuzz/FuzzRedis.swift -lhiredis ;;
    config)
      swift build --product quickway-fuzz-config --scratch-path .build-fuzzpkg -Xswiftc -sanitize=fuzzer,address -Xswiftc -DFUZZING 2>&1 \
        | grep -E "error:" || true
      cp .build-fuzzpkg/debug/quickway-fuzz-config "$OUT/fuzz-config" || { echo "fuzz: build of config failed" >&2; exit 1; } ;;
  esac
done
status=0
for t in "${TARGETS[@]}"; do
  echo "== fuzz-$t for ${SECONDS_PER}s"
  mkdir -p "Fuzz/corpus/$t" "$OUT/corpus-$t"
  if ! "$OUT/fuzz-$t" -max_total_time="$SECONDS_PER" -max_len=4096 -jobs="$JOBS" -workers="$JOBS" \
       -artifact_prefix="$OUT/$t-" "$OUT/corpus-$t" "Fuzz/corpus/$t" 2>"$OUT/fuzz-$t.log"; then
    echo "fuzz-$t FOUND A FAILURE:"; grep -iE "ERROR|Fatal|SUMMARY|precondition|disagree" "$OUT/fuzz-$t.log" | head -20; status=1
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
