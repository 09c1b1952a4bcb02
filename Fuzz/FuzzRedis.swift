// libFuzzer harness: Redis replies as the gateway reads them, hiredis's reader
// (`redisReaderCreate`, `redisReaderFeed`, `redisReaderGetReply`, as its async context
// uses it) turning RESP bytes into `redisReply` trees and `RedisReply.init` copying them
// out. Built by scripts/dev/fuzz.sh with `swiftc -sanitize=fuzzer,address` from RedisReply.swift
// against a module map of qw_redis.h alone, linked with -lhiredis (hiredis itself is not
// instrumented: the system library).
//
// The input is what a Redis server sends. Checks besides crashes: fed in one piece and a
// byte at a time, the reader gives the same replies and the same error; every reply,
// written back as RESP and read again, is the same reply (the copy lost or invented
// nothing). hiredis is not instrumented, so libFuzzer steers by RedisReply's coverage
// alone: the seeds carry most of the variety.

import CQuickwayShims

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzRedis(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let input = Array(UnsafeBufferPointer(start: data, count: size))
    if declaresLargeArray(input) { return 0 }
    let whole = readReplies(input, step: max(1, input.count))
    let stepped = readReplies(input, step: 1)
    if whole.replies.map(describe) != stepped.replies.map(describe) || whole.error != stepped.error {
        fatalError("whole and byte by byte disagree:\n  whole   \(whole.replies.map(describe)) \(whole.error ?? "")\n  stepped \(stepped.replies.map(describe)) \(stepped.error ?? "")")
    }
    for r in whole.replies {
        let again = readReplies(encode(r), step: Int.max)
        precondition(again.error == nil && again.replies.count == 1 && describe(again.replies[0]) == describe(r),
                     "\(describe(r)) reads back as \(again.replies.map(describe)) \(again.error ?? "")")
    }
    return 0
}

/// Whether `input` may declare an array of more than 65536 elements (`*` then digits,
/// wherever they are). Such inputs are skipped: hiredis callocs a pointer per declared
/// element before any arrives (`*2147483647` is 16 GiB), which costs nothing but address
/// space in the gateway (glibc maps it, untouched; measured), but which AddressSanitizer
/// and libFuzzer's malloc limit report as out of memory, or take seconds over.
func declaresLargeArray(_ input: [UInt8]) -> Bool {
    var i = 0
    while i < input.count {
        if input[i] == UInt8(ascii: "*") {
            var j = i + 1
            if j < input.count && (input[j] == UInt8(ascii: "+") || input[j] == UInt8(ascii: "-")) { j += 1 }
            var digits = 0
            var n = 0
            while j < input.count, input[j] >= 0x30 && input[j] <= 0x39 {
                digits += 1
                if digits > 6 { return true }
                n = n * 10 + Int(input[j] - 0x30)
                j += 1
            }
            if n > 65536 { return true }
        }
        i += 1
    }
    return false
}

/// The replies in `input`, fed `step` bytes at a time, and the reader's error if any.
func readReplies(_ input: [UInt8], step: Int) -> (replies: [RedisReply], error: String?) {
    guard let reader = redisReaderCreate() else { fatalError("redisReaderCreate") }
    defer { redisReaderFree(reader) }
    var out: [RedisReply] = []
    var at = 0
    repeat {
        let e = min(input.count, at + (input.count - at < step ? input.count - at : step))
        if e > at {
            let rc = input[at..<e].withUnsafeBytes { redisReaderFeed(reader, $0.baseAddress!.assumingMemoryBound(to: CChar.self), $0.count) }
            precondition(rc == REDIS_OK, "redisReaderFeed")
        }
        at = e
        while true {
            var reply: UnsafeMutableRawPointer?
            if redisReaderGetReply(reader, &reply) != REDIS_OK {
                return (out, String(cString: withUnsafeBytes(of: reader.pointee.errstr) { $0.baseAddress!.assumingMemoryBound(to: CChar.self) }))
            }
            guard let r = reply else { break }
            out.append(RedisReply(r.assumingMemoryBound(to: redisReply.self)))
            freeReplyObject(r)
        }
    } while at < input.count
    return (out, nil)
}

func describe(_ r: RedisReply) -> String {
    switch r {
    case .status(let b): return "status \(b)"
    case .string(let b): return "string \(b)"
    case .integer(let n): return "integer \(n)"
    case .null: return "null"
    case .array(let items): return "array [\(items.map(describe).joined(separator: ", "))]"
    case .error(let m): return "error \(Array(m.utf8))"
    case .unavailable(let m): return "unavailable \(m)"
    }
}

/// `r` as RESP. Simple strings and errors cannot hold CR or LF (hiredis ends them at the
/// first CRLF), so they read back as they were.
func encode(_ r: RedisReply) -> [UInt8] {
    func line(_ prefix: String, _ b: [UInt8]) -> [UInt8] { Array(prefix.utf8) + b + [0x0D, 0x0A] }
    switch r {
    case .status(let b): return line("+", b)
    case .string(let b): return line("$", Array(String(b.count).utf8)) + b + [0x0D, 0x0A]
    case .integer(let n): return line(":", Array(String(n).utf8))
    case .null: return line("$", Array("-1".utf8))
    case .array(let items): return line("*", Array(String(items.count).utf8)) + items.flatMap(encode)
    case .error(let m): return line("-", Array(m.utf8))
    case .unavailable: fatalError("hiredis gave no reply, yet one was made")
    }
}
