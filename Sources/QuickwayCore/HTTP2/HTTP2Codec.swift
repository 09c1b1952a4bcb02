import Glibc


/// Settings and limits of the HTTP/2 codec shared by every transport it runs on.
enum HTTP2Codec {
    /// Output beyond this stops taking frames from nghttp2 (and stops reading, so a PING
    /// or SETTINGS flood from a client that reads nothing cannot grow it).
    static let outputHighWater = 256 * 1024
    /// A stream's response bytes waiting for its window; past this its producer pauses.
    static let streamHighWater = 64 * 1024
    /// Request bytes handed to nghttp2 per call, so outbound is checked between calls.
    static let receiveChunk = 16 * 1024
    /// Client RST_STREAMs allowed in a burst, then per second (rapid reset, CVE-2023-44487).
    static let resetBurst: UInt64 = 200
    static let resetRatePerSecond: UInt64 = 50
    /// Per connection: request bodies being received, and answers handed over but not yet
    /// taken by the client, are each held to this (with `max_concurrent_streams` streams,
    /// a client that reads nothing could otherwise pin that many whole answers).
    static let connectionBudget = 8 * 1024 * 1024
    /// Request body bytes one connection may keep in spool files at once (bodies past
    /// `client_body_buffer_size`): a client's many streams cannot fill the disk.
    static let connectionSpoolBudget = 64 * 1024 * 1024
    /// Per worker: answers held for every HTTP/2 client that has not taken them yet
    /// (`HTTP2AnswerBudget`).
    static let workerBudget = 8 * 1024 * 1024
    /// A stream whose answer makes no progress for this long is reset, whatever the budget
    /// (a client that opens a window of zero must not hold an answer for the idle timeout).
    static let stallMillis: Int64 = 10_000
    /// Over the connection's or the worker's budget, the stall allowed is this short.
    static let stallWhenOverBudgetMillis: Int64 = 2000
    /// A connection that sends this many header lists over `max_header_list_bytes` is ended
    /// (GOAWAY ENHANCE_YOUR_CALM); one list past twice the limit ends it at once.
    static let oversizeHeaderBlocksAllowed = 3
    /// After the WebSocket relay of a tunnel ends its side, the client has this long to end
    /// its own before the stream is reset.
    static let tunnelCloseGraceMillis: Int64 = 2000
    /// Progress means the client took at least this much (or all) of a stream's answer:
    /// opening the window a byte at a time does not keep a stream alive.
    static let progressBytes = 16 * 1024
    /// An idle connection's frame buffer goes back to the kernel once it has been idle
    /// this long (at the worker's next sweep), so a connection between two quick
    /// requests does not pay a page fault for it.
    static let releaseFramesAfterIdleMillis: Int64 = 250
    /// The client connection preface (RFC 9113 3.4).
    static let preface: StaticString = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

    enum PrefaceCheck { case http2, notHTTP2, needMore }

    /// Whether a connection's first bytes are the HTTP/2 preface (h2c with prior knowledge).
    static func checkPreface(_ bytes: UnsafeRawBufferPointer) -> PrefaceCheck {
        let p = UnsafeRawBufferPointer(start: preface.utf8Start, count: preface.utf8CodeUnitCount)
        let n = min(bytes.count, p.count)
        for i in 0..<n where bytes[i] != p[i] { return .notHTTP2 }
        return n == p.count ? .http2 : .needMore
    }
}

/// Client RST_STREAMs allowed (rapid reset, CVE-2023-44487): a token bucket of
/// `resetBurst`, refilled at `resetRatePerSecond`.
struct HTTP2ResetLimiter {
    private var tokens = Double(HTTP2Codec.resetBurst)
    private var refilledAt = Clock.coarseMillis()

    /// Counts one reset at `now` (coarse milliseconds); false once past the limit.
    mutating func take(now: Int64) -> Bool {
        tokens = min(Double(HTTP2Codec.resetBurst), tokens + Double(now - refilledAt) * Double(HTTP2Codec.resetRatePerSecond) / 1000)
        refilledAt = now
        tokens -= 1
        return tokens >= 0
    }
}
