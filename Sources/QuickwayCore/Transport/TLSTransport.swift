import Glibc
import CLibevent
import COpenSSL
import CQuickwayShims

/// TLS on one accepted client socket (OpenSSL on the non-blocking descriptor), with the
/// same surface as `TCPTransport`: the codec above reads plaintext from `input` and
/// writes plaintext to `output`.
///
/// The handshake runs first, driven by read and write readiness; then reads decrypt into
/// `input` (a bounded amount ahead) and `flush` encrypts `output`. OpenSSL may want to
/// read in order to write (or the reverse): both events stay armed as OpenSSL asks, and
/// what OpenSSL already holds (`SSL_has_pending`: decrypted, or read ahead) is picked up when reading
/// resumes, since no socket event would announce it.
///
/// Ownership: libevent's callbacks get the transport through an unretained pointer; the
/// codec that owns it keeps it alive until `close()`. The transport holds its
/// `TLSContext`, so a reload that replaces the context never frees one a handshake
/// still uses. Thread rule: the owning worker's loop only.
final class TLSTransport: ByteTransport {
    let fd: Int32
    let peer: Peer
    /// As `TCPTransport`'s: storage given back while idle, objects dropped between requests.
    @exclusivity(unchecked) private(set) var input: ByteBuffer
    @exclusivity(unchecked) private(set) var output: ByteBuffer
    var readAheadLimit: Int
    unowned(unsafe) var user: TransportUser? {
        didSet {
            user?.inbound = input
            user?.outbound = output
        }
    }
    private let context: TLSContext
    private let stats: WorkerStats
    private var ssl: OpaquePointer?
    @exclusivity(unchecked) private var events = SocketEvents()
    var writeStalledSince: Int64 { events.writeStalledSince }
    /// The codec wants reads (it may pause them while a response is pending).
    private var readingWanted = true
    private var handshakeDone = false
    /// OpenSSL asked the read to wait for the socket to be writable (and the reverse).
    private var readWantsWrite = false
    private var writeWantsRead = false
    private var shutdownSent = false
    /// Closed after a TLS error (the session is not kept).
    private var failed = false
    private var discarding = false
    private(set) var closed = false

    init(fd: Int32, peer: Peer, base: OpaquePointer, context: TLSContext, stats: WorkerStats, readAheadLimit: Int, pool: BufferPool? = nil) {
        // With a pool, no buffer objects until bytes arrive (`takeOwnBuffers` in `readNow`).
        input = pool?.idleStandIn ?? ByteBuffer(capacity: 4096, lazy: true)
        output = pool?.idleStandIn ?? ByteBuffer(capacity: 4096, lazy: true)
        self.fd = fd
        self.peer = peer
        self.context = context
        self.stats = stats
        self.readAheadLimit = readAheadLimit
        ssl = SSL_new(context.defaultContext)
        if let ssl {
            SSL_set_fd(ssl, fd)
            SSL_set_accept_state(ssl)
        }
        events.create(base: base, fd: fd, owner: Unmanaged.passUnretained(self).toOpaque(), callback: tlsEventCallback)
        // The client speaks first (ClientHello).
        events.setReading(true)
    }

    var inputIsFull: Bool { input.readableBytes > readAheadLimit }

    var isTLS: Bool { true }

    /// Read on the first request after the handshake, then kept (nil: none, or the
    /// listener asks for none).
    private var peerCertificate: ClientCertificate??
    var clientCertificate: ClientCertificate? {
        if let known = peerCertificate { return known }
        guard handshakeDone, let ssl, context.verifiesClients else { return nil }
        let cert = ClientCertificate.read(ssl)
        peerCertificate = .some(cert)
        return cert
    }

    /// ALPN chose `h2`.
    var negotiatedH2: Bool {
        guard let ssl else { return false }
        var p: UnsafePointer<UInt8>?
        var n: UInt32 = 0
        SSL_get0_alpn_selected(ssl, &p, &n)
        return n == 2 && p![0] == UInt8(ascii: "h") && p![1] == UInt8(ascii: "2")
    }

    // MARK: events

    fileprivate func onReadable() {
        if !handshakeDone { handshake(); return }
        if writeWantsRead {
            // A write was waiting for this read (renegotiation, key update): retry it.
            writeWantsRead = false
            if !readingWanted && !discarding { armRead(false) }
            flush()
            if closed { return }
        }
        if readingWanted || discarding { readNow() }
    }

    fileprivate func onWritable() {
        if !handshakeDone { handshake(); return }
        if readWantsWrite {
            // A read was waiting for this write: reading may go on.
            readWantsWrite = false
            if readingWanted || discarding { armRead(true) }
            readNow()
            if closed { return }
        }
        flush()
    }

    private func handshake() {
        guard let ssl, !closed else { close(); return }
        ERR_clear_error()
        let rc = SSL_do_handshake(ssl)
        if rc == 1 {
            handshakeDone = true
            stats.tlsHandshakeDone(resumed: SSL_session_reused(ssl) == 1)
            setWriteInterest(false)
            armRead(readingWanted)
            readNow()
            return
        }
        switch SSL_get_error(ssl, rc) {
        case SSL_ERROR_WANT_READ:
            armRead(true)
            setWriteInterest(false)
        case SSL_ERROR_WANT_WRITE:
            // Wait for the socket to take more; reading meanwhile would spin on a
            // readable socket that OpenSSL will not read from.
            armRead(false)
            setWriteInterest(true)
        default:
            // Not TLS, no shared version or cipher, no protocol ALPN can agree on, a bad
            // record: counted, and the connection is dropped (there is nothing to answer in).
            stats.tlsHandshakeFailed(Self.failureReason())
            let why = TLSContext.lastError()
            Log.debug("TLS handshake with \(peer) failed: \(why)")
            fail()
        }
    }

    /// The failure counter for the error OpenSSL left in the queue.
    private static func failureReason() -> WorkerStats.ConnectionCounter {
        switch qw_tls_failure_reason() {
        case Int32(QW_TLS_FAIL_NOT_TLS): return .tlsFailedNotTLS
        case Int32(QW_TLS_FAIL_VERSION): return .tlsFailedVersion
        case Int32(QW_TLS_FAIL_CIPHER): return .tlsFailedCipher
        case Int32(QW_TLS_FAIL_ALPN): return .tlsFailedALPN
        case Int32(QW_TLS_FAIL_CLOSED): return .tlsFailedClosed
        default: return .tlsFailedOther
        }
    }

    // MARK: reading

    /// Reads and decrypts what is available. Tells the codec only when bytes arrived or
    /// the peer closed, so a socket that stays readable without giving bytes (OpenSSL
    /// waiting to write) cannot spin the codec.
    func readNow() {
        guard handshakeDone, !readWantsWrite, let ssl else { return }
        let tookBuffers = input.isStandIn
        if tookBuffers { takeOwnBuffers() }
        var peerClosed = false
        var got = 0
        var stoppedAtBound = false
        while !closed {
            if !discarding && inputIsFull { stoppedAtBound = true; break }
            let space = input.writableSpace(atLeast: 4096)
            // OpenSSL keeps one error queue per thread, which SSL_get_error reads first:
            // it must be empty before each call, or another connection's error reads as ours.
            qw_tls_clear_error()
            let n = SSL_read(ssl, space.baseAddress, Int32(min(space.count, Int(Int32.max))))
            if n > 0 {
                if discarding { continue }
                input.didWrite(Int(n))
                got += Int(n)
                // Nothing more inside OpenSSL: stop here rather than read the socket again
                // only to be told `EAGAIN` (a system call per request). The event is
                // level-triggered, so whatever the socket still holds reports itself.
                if SSL_has_pending(ssl) == 0 { break }
                continue
            }
            let err = SSL_get_error(ssl, n)
            if err == SSL_ERROR_WANT_READ { break }
            if err == SSL_ERROR_WANT_WRITE {
                readWantsWrite = true
                armRead(false)
                setWriteInterest(true)
                break
            }
            if err == SSL_ERROR_ZERO_RETURN {
                // close_notify, or (SSL_OP_IGNORE_UNEXPECTED_EOF) the socket closed without one.
                if discarding { close(); return }
                peerClosed = true
                break
            }
            let why = TLSContext.lastError()
            Log.debug("TLS read from \(peer) failed: \(why)")
            fail()
            return
        }
        if !closed && !discarding && (got > 0 || peerClosed) { user?.transportReadable(peerClosed: peerClosed) }
        // Taken for a read that brought no plaintext (the handshake's end, a key update, a
        // record cut in two): the user never heard of them, so they go back at once.
        if tookBuffers && got == 0 && !peerClosed && !closed {
            releaseIdleBuffers()
            dropIdleBuffers()
        }
        // Stopped at the bound with records already read from the socket (read-ahead):
        // no socket event will announce them, so once the codec has made room, come back
        // on the next loop turn (a codec that paused reading resumes it with
        // `enableReading`, which looks again).
        if stoppedAtBound && !closed && readingWanted && !readWantsWrite && !inputIsFull && SSL_has_pending(ssl) == 1 {
            events.activateRead()
        } else if stoppedAtBound && got == 0 && !closed && inputIsFull {
            // Nothing new for the codec and no room: the level-triggered event would report
            // the socket again at once, every loop turn. Stop listening until the codec
            // makes room and asks again (`enableReading`).
            armRead(false)
        }
    }

    func enableReading() {
        readingWanted = true
        guard handshakeDone, !closed, !readWantsWrite else { return }
        armRead(true)
        // Plaintext OpenSSL already decrypted announces itself with no socket event.
        // With read-ahead, records read from the socket but not yet decrypted count too.
        if let ssl, SSL_has_pending(ssl) == 1 { events.activateRead() }
    }

    func disableReading() {
        readingWanted = false
        if handshakeDone && !writeWantsRead { armRead(false) }
    }

    private func armRead(_ on: Bool) {
        if !closed { events.setReading(on) }
    }

    private func setWriteInterest(_ on: Bool) {
        if !closed { events.setWriting(on) }
    }

    // MARK: writing

    func flush() {
        guard !closed, handshakeDone, !writeWantsRead, let ssl else { return }
        while !output.isEmpty {
            let r = output.readable
            qw_tls_clear_error()
            let n = SSL_write(ssl, r.baseAddress, Int32(min(r.count, 1 << 20)))
            if n > 0 {
                output.consume(Int(n))
                events.wroteSome()
                continue
            }
            switch SSL_get_error(ssl, n) {
            case SSL_ERROR_WANT_WRITE:
                setWriteInterest(true)
                return
            case SSL_ERROR_WANT_READ:
                // Renegotiation or a key update: the next readable event retries the write.
                writeWantsRead = true
                armRead(true)
                return
            default:
                let why = TLSContext.lastError()
                Log.debug("TLS write to \(peer) failed: \(why)")
                fail()
                return
            }
        }
        if !readWantsWrite { setWriteInterest(false) }
        if discarding {
            if !shutdownSent {
                // close_notify; if the socket cannot take it now, the write event retries.
                ERR_clear_error()
                let rc = SSL_shutdown(ssl)
                if rc < 0 {
                    if SSL_get_error(ssl, rc) == SSL_ERROR_WANT_WRITE { setWriteInterest(true); return }
                    _ = TLSContext.lastError()
                }
                shutdownSent = true
            }
            shutdown(fd, Int32(SHUT_WR))
            return
        }
        user?.transportDrained()
    }

    // MARK: closing

    /// Whether the connection is past its handshake (a connection still shaking hands is
    /// not idle: a drain lets it finish).
    var isReady: Bool { handshakeDone }

    func closeAfterWriting() {
        discarding = true
        if handshakeDone {
            armRead(true)
            // What OpenSSL already read ahead (a close_notify, say) announces itself with
            // no socket event.
            if let ssl, SSL_has_pending(ssl) == 1 { events.activateRead() }
        }
        flush()
    }

    /// Closes after a TLS error: the session is not kept for resumption.
    private func fail() {
        failed = true
        close()
    }

    func close() {
        guard !closed else { return }
        closed = true
        events.free()
        if let ssl {
            // A clean end keeps the session resumable (SSL_free would otherwise drop it
            // from the cache as if the connection had failed).
            if handshakeDone && !failed { SSL_set_shutdown(ssl, SSL_SENT_SHUTDOWN) }
            SSL_free(ssl)
        }
        ssl = nil
        ERR_clear_error()
        Glibc.close(fd)
        discardBuffers()
        user?.transportClosed()
    }

}

private let tlsEventCallback: @convention(c) (Int32, Int16, UnsafeMutableRawPointer?) -> Void = { _, what, arg in
    let t = Unmanaged<TLSTransport>.fromOpaque(arg!).takeUnretainedValue()
    if Int32(what) & EV_WRITE != 0 { t.onWritable() } else { t.onReadable() }
}

extension TLSTransport {
    func dropIdleBuffers() { IdleBuffers.drop(&input, &output, user: user) }
    func takeOwnBuffers() { IdleBuffers.takeBack(&input, &output, user: user) }
}
