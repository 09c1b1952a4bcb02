/// A request body an upstream client reads as it sends it, when the body is not one
/// array in memory: spooled to a file (`RequestBodySpool`, complete) or still arriving
/// from the client (`RequestBodyPipe`, `request_buffering: false`). Both upstream
/// clients read it the same way (`UpstreamConnection`'s pump, `UpstreamTransfer`'s read
/// callback). Loop thread only.
protocol RequestBodySource: AnyObject {
    /// The body's length when known (a `Content-Length`, a spooled body); nil: it goes
    /// upstream chunked.
    var length: Int? { get }
    /// Copies the next bytes into `buffer` (not empty).
    func read(into buffer: UnsafeMutableRawBufferPointer) -> BodyRead
    /// After `.wait`: calls `resume` once bytes, the end or a failure can be read. One
    /// waiter; a later call replaces it.
    func whenReadable(_ resume: @escaping () -> Void)
    /// Back to the first byte, for a second send (a retry on another IP); false when
    /// that cannot be (bytes already read from a pipe are gone).
    func rewind() -> Bool
}

/// What a read of a request body found.
enum BodyRead: Equatable {
    /// This many bytes were copied.
    case bytes(Int)
    /// Nothing now: more is coming (`whenReadable`).
    case wait
    /// The body is over.
    case end
    /// The body cannot be completed (the client stalled, left, or broke its framing):
    /// the call ends, and the client's answer is this error.
    case failed(GatewayErrorCode, String)
}
