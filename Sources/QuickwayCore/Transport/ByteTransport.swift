/// What a codec needs of the connection under it: bytes in (`input`, read a bounded
/// amount ahead), bytes out (`output`, written with backpressure), and closing. Plain TCP
/// (`TCPTransport`) and TLS (`TLSTransport`) offer the same surface, so the HTTP/1.1
/// codec runs unchanged on either. Loop thread only.
protocol ByteTransport: AnyObject {
    var input: ByteBuffer { get }
    var output: ByteBuffer { get }
    var peer: Peer { get }
    var closed: Bool { get }
    /// Whether `input` is at its read-ahead limit (reading would stop).
    var inputIsFull: Bool { get }
    /// Past any set-up (a TLS handshake): bytes can flow. Until then the connection is
    /// neither idle (a drain lets it finish) nor under the idle timeout (the header
    /// timeout bounds a handshake).
    var isReady: Bool { get }
    /// Coarse milliseconds since the client last took any of the pending output (the
    /// write event armed, or progress made while it was); 0 when nothing waits. A client
    /// that reads nothing for too long is cut off (`HTTP1Connection.checkDeadline`).
    var writeStalledSince: Int64 { get }
    /// ALPN chose `h2` in the TLS handshake (always false on plain TCP).
    var negotiatedH2: Bool { get }
    /// The client came over TLS (`X-Forwarded-Proto: https`; part of the cache key).
    var isTLS: Bool { get }
    /// The client's verified certificate (mutual TLS), read once after the handshake.
    var clientCertificate: ClientCertificate? { get }
    /// Who is told of reads, drains and the close. Not retained (the user owns the transport).
    var user: TransportUser? { get set }
    /// Reads what is available now and tells the user.
    func readNow()
    func enableReading()
    func disableReading()
    /// Sends `output` until empty (then `transportDrained`) or the kernel is full.
    func flush()
    /// Sends what is written, ends the stream (half-close), drops what still arrives.
    func closeAfterWriting()
    /// Closes at once (then `transportClosed`). Idempotent.
    func close()
    /// Idle (both buffers empty and holding no memory): drops the two buffer objects
    /// too, the worker's stand-in taking their place, so an idle connection holds no
    /// buffer at all. New objects are made when bytes arrive, before the user hears of
    /// them; a codec that keeps references to the buffers takes them again then.
    func dropIdleBuffers()
    /// Buffers of its own (not the stand-in) from here on, for a user that keeps
    /// references to them from the start (the HTTP/2 codec, a WebSocket relay).
    func takeOwnBuffers()
}

extension ByteTransport {
    /// The TLS client's verified certificate (mutual TLS); nil on plain TCP and in memory.
    var clientCertificate: ClientCertificate? { nil }

    /// Gives back the buffers' memory while the connection is idle (empty buffers only).
    func releaseIdleBuffers() {
        input.releaseStorage()
        output.releaseStorage()
    }

    /// Drops whatever the buffers hold and gives their memory back: at close, since the
    /// worker keeps a closed connection until its next sweep.
    func discardBuffers() {
        input.clear()
        input.releaseStorage()
        output.clear()
        output.releaseStorage()
    }
}

extension TCPTransport: ByteTransport {
    var isReady: Bool { true }
    var negotiatedH2: Bool { false }
    var isTLS: Bool { false }
}

/// Dropping and taking back a transport's two buffer objects (`dropIdleBuffers`,
/// `takeOwnBuffers`), shared by the TCP and TLS transports, which hold the buffers.
enum IdleBuffers {
    /// Both empty and holding no memory: the pool's stand-in takes their place, and the
    /// objects become spares if nothing else refers to them (the codec let go first).
    @inline(__always)
    static func drop(_ input: inout ByteBuffer, _ output: inout ByteBuffer, user: TransportUser?) {
        guard !input.isStandIn, let pool = input.poolObject, input.isEmpty, output.isEmpty,
              input.heldBytes == 0, output.heldBytes == 0 else { return }
        var i = input, o = output
        input = pool.idleStandIn
        output = pool.idleStandIn
        user?.inbound = pool.idleStandIn
        user?.outbound = pool.idleStandIn
        pool.giveBufferObject(&i)
        pool.giveBufferObject(&o)
    }

    /// Buffers of their own again in place of the stand-in (spares from the pool;
    /// storage is taken on the first write, as ever).
    @inline(__always)
    static func takeBack(_ input: inout ByteBuffer, _ output: inout ByteBuffer, user: TransportUser?) {
        guard input.isStandIn, let pool = input.poolObject else { return }
        input = pool.takeBufferObject()
        output = pool.takeBufferObject()
        user?.inbound = input
        user?.outbound = output
    }
}
