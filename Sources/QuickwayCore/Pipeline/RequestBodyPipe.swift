/// A request body on its way upstream while it still arrives (`request_buffering:
/// false`): the codec writes what it decodes (`write`), the upstream client reads it
/// (`read`). At most about `highWater` bytes wait here, so the body costs no more memory
/// whatever its size, and backpressure runs both ways:
/// - a slow upstream: the codec stops taking the client's bytes while `hasRoom` is false
///   (HTTP/1.1 stops reading the socket, HTTP/2 holds the stream's window) and goes on
///   when the reader makes room (`whenRoom`);
/// - a slow client: the reader gets `.wait` and is called back when bytes come.
///
/// The codec ends it with `finish`, or `fail` (the client stalled past
/// `client_body_timeout`, broke its framing or passed `max_body_bytes`): the upstream
/// call then ends and the client gets that error. Loop thread only.
final class RequestBodyPipe: RequestBodySource {
    static let highWater = 64 * 1024

    let length: Int?
    private var bytes: [UInt8] = []
    private var readAt = 0
    private(set) var ended = false
    private var failure: (GatewayErrorCode, String)?
    /// Bytes the reader has taken, in all (a pipe that gave any cannot be rewound).
    private(set) var taken = 0
    /// Bytes written, in all.
    private(set) var received = 0
    private var reader: (() -> Void)?
    private var room: (() -> Void)?
    /// Called after every read that took bytes (an HTTP/2 stream gives their window back).
    var onTaken: (() -> Void)?

    /// `length`: the client's `Content-Length`, nil for a chunked (HTTP/1.1) or unsized
    /// (HTTP/2) body.
    init(length: Int?) { self.length = length }

    /// Bytes waiting for the reader.
    var buffered: Int { bytes.count - readAt }
    /// Whether the codec may write more now.
    var hasRoom: Bool { buffered < Self.highWater }
    /// The body ended or failed: nothing more is written.
    var isClosed: Bool { ended || failure != nil }

    /// Appends through `fill` (a decoder, or a plain append) and wakes a waiting reader.
    func write<R, E: Error>(_ fill: (inout [UInt8]) throws(E) -> R) throws(E) -> R {
        // What was read goes before the array grows: it stays within about two high
        // waters whatever the reader's and the writer's piece sizes.
        if readAt > 0 && (readAt == bytes.count || readAt >= Self.highWater) {
            bytes.removeFirst(readAt)
            readAt = 0
        }
        let before = bytes.count
        let r = try fill(&bytes)
        if bytes.count > before {
            received += bytes.count - before
            wakeReader()
        }
        return r
    }

    /// The whole body is written.
    func finish() {
        guard !isClosed else { return }
        ended = true
        wakeReader()
    }

    /// The body cannot be completed: the reader hears `.failed` with this answer.
    func fail(_ code: GatewayErrorCode, _ message: String) {
        guard !isClosed else { return }
        failure = (code, message)
        bytes = []
        readAt = 0
        wakeReader()
    }

    /// Calls `resume` once the reader has made room (at once if there is room).
    func whenRoom(_ resume: @escaping () -> Void) {
        if hasRoom { resume() } else { room = resume }
    }

    /// The codec no longer writes (its client's answer is out): forget its callback.
    func writerLeft() {
        room = nil
        onTaken = nil
    }

    private func wakeReader() {
        if let r = reader {
            reader = nil
            r()
        }
    }

    // MARK: RequestBodySource

    func read(into buffer: UnsafeMutableRawBufferPointer) -> BodyRead {
        if let (code, message) = failure { return .failed(code, message) }
        let n = min(buffer.count, buffered)
        guard n > 0 else { return ended ? .end : .wait }
        bytes.withUnsafeBytes { buffer.baseAddress!.copyMemory(from: $0.baseAddress! + readAt, byteCount: n) }
        readAt += n
        taken += n
        if readAt == bytes.count {
            bytes.removeAll(keepingCapacity: true)
            readAt = 0
        }
        // Told after every change above: the codec may write again from inside.
        if let r = room, hasRoom {
            room = nil
            r()
        }
        onTaken?()
        return .bytes(n)
    }

    func whenReadable(_ resume: @escaping () -> Void) {
        if buffered > 0 || isClosed { resume() } else { reader = resume }
    }

    func rewind() -> Bool { taken == 0 }
}
