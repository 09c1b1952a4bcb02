import CQuickwayShims

/// A Redis reply, copied out of hiredis's `redisReply` before hiredis frees it.
enum RedisReply {
    /// `+OK` and other simple strings.
    case status([UInt8])
    case string([UInt8])
    case integer(Int64)
    /// A nil bulk string (`GET` of a missing key, `SET ... NX` that did not set).
    case null
    case array([RedisReply])
    /// `-ERR ...` from Redis.
    case error(String)
    /// No reply at all: the link is down, the command timed out, or the connection
    /// dropped before the answer came. The text says which.
    case unavailable(String)

    init(_ r: UnsafeMutablePointer<redisReply>) {
        let p = r.pointee
        func bytes() -> [UInt8] {
            guard let s = p.str, p.len > 0 else { return [] }
            return Array(UnsafeRawBufferPointer(start: s, count: Int(p.len)))
        }
        switch p.type {
        case REDIS_REPLY_STATUS: self = .status(bytes())
        case REDIS_REPLY_STRING: self = .string(bytes())
        case REDIS_REPLY_INTEGER: self = .integer(Int64(p.integer))
        case REDIS_REPLY_NIL: self = .null
        case REDIS_REPLY_ERROR: self = .error(String(decoding: bytes(), as: UTF8.self))
        case REDIS_REPLY_ARRAY:
            var items: [RedisReply] = []
            for i in 0..<Int(p.elements) {
                if let e = p.element[i] { items.append(RedisReply(e)) } else { items.append(.null) }
            }
            self = .array(items)
        default: self = .error("unexpected reply type \(p.type)")
        }
    }

    /// Why there was no usable answer, for `error` and `unavailable`.
    var failure: String? {
        switch self {
        case .error(let m), .unavailable(let m): return m
        default: return nil
        }
    }
}

/// Redis commands in RESP form, built as bytes (`*N` then `$len` + argument for each).
/// hiredis takes them ready-made through `redisAsyncFormattedCommand`.
///
/// The buffer ends with a NUL that is not part of the command: hiredis scans a
/// formatted command with `strchr` to find its arguments (all of them for SUBSCRIBE),
/// as it would its own NUL-terminated sds strings; without it that scan runs past the
/// end (AddressSanitizer caught it in the soak).
struct RedisCommand {
    private var storage: [UInt8] = []

    /// The command's bytes (without the terminating NUL).
    var bytes: [UInt8] { Array(storage.dropLast()) }

    /// Calls `body` with the command (NUL-terminated in memory, `length` without it).
    func withCString<R>(_ body: (UnsafePointer<CChar>, Int) -> R) -> R {
        storage.withUnsafeBytes { body($0.baseAddress!.assumingMemoryBound(to: CChar.self), $0.count - 1) }
    }

    init(_ args: [[UInt8]]) {
        storage.reserveCapacity(args.reduce(16) { $0 + $1.count + 16 })
        storage.append(UInt8(ascii: "*"))
        appendDecimal(args.count)
        for a in args { append(argument: a) }
        storage.append(0)
    }

    init(_ args: String...) { self.init(args.map { Array($0.utf8) }) }

    private mutating func append(argument a: [UInt8]) {
        storage.append(UInt8(ascii: "$"))
        appendDecimal(a.count)
        storage.append(contentsOf: a)
        storage.append(0x0D); storage.append(0x0A)
    }

    private mutating func appendDecimal(_ n: Int) {
        var digits: [UInt8] = []
        var v = n
        repeat { digits.append(UInt8(ascii: "0") + UInt8(v % 10)); v /= 10 } while v > 0
        storage.append(contentsOf: digits.reversed())
        storage.append(0x0D); storage.append(0x0A)
    }
}
