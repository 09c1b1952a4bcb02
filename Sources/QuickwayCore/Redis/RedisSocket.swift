import CLibevent
import COpenSSL
import CQuickwayShims
import Glibc

/// One connection to a Redis server on one event loop: a non-blocking socket, TLS on it
/// for `rediss://` (the certificate verified, `RedisTLS`), and hiredis's reply parser.
/// Debian's hiredis (0.14) has no TLS, so the connection is ours and hiredis only parses.
///
/// - `write` queues command bytes; they go out once the connection (and the handshake)
///   is up, and then as the socket takes them.
/// - Each complete reply goes to `onReply` (valid for that call only), in order.
/// - `onClose` says why the connection ended (refused, a TLS or certificate failure, an
///   EOF, a protocol error) and whether it had opened. `close()` ends it silently.
///
/// Ownership: libevent's callbacks get the socket through an uncounted pointer (see
/// `RedisTrampolines.swift`); the owning `RedisLink` keeps it until `close()`, which frees
/// the events first. Loop thread only.
final class RedisSocket {
    enum Phase { case connecting, handshaking, open, closed }

    private(set) var phase = Phase.connecting
    let fd: Int32
    private let host: String
    private let tls: RedisTLS?
    private var ssl: OpaquePointer?
    private let reader: UnsafeMutablePointer<redisReader>
    private var readEvent: OpaquePointer?
    private var writeEvent: OpaquePointer?
    private var writeArmed = false
    /// OpenSSL asked a write to wait for a read (or a read to wait for a write).
    private var writeWantsRead = false
    private var readWantsWrite = false
    private var out: [UInt8] = []
    private var outHead = 0
    /// Kept for the connection's life: a fresh zeroed 16 KiB array per read event cost
    /// more than the read (with TLS there was an event per reply, one record each).
    private var inBuffer = [UInt8](repeating: 0, count: 16384)

    var onOpen: (() -> Void)?
    var onReply: ((UnsafeMutablePointer<redisReply>) -> Void)?
    var onClose: ((_ why: String, _ hadOpened: Bool) -> Void)?

    /// Starts connecting to `ip:port`; `host` is the name the certificate must carry.
    /// Throws when no connect could even start (the reason in the `RedisFailure`).
    init(base: OpaquePointer, ip: String, port: Int, host: String, tls: RedisTLS?) throws {
        var sa = sockaddr_in()
        sa.sin_family = sa_family_t(AF_INET)
        sa.sin_port = in_port_t(UInt16(port).bigEndian)
        guard inet_pton(AF_INET, ip, &sa.sin_addr) == 1 else { throw RedisFailure(message: "not an IPv4 address: \(ip)") }
        let s = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard s >= 0 else { throw RedisFailure(message: "socket: \(String(cString: strerror(errno)))") }
        var one: Int32 = 1
        setsockopt(s, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        let rc = withUnsafePointer(to: &sa) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(s, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        if rc != 0 && errno != EINPROGRESS {
            let why = String(cString: strerror(errno))
            Glibc.close(s)
            throw RedisFailure(message: "connect: \(why)")
        }
        guard let r = redisReaderCreate() else {
            Glibc.close(s)
            throw RedisFailure(message: "out of memory")
        }
        fd = s
        self.host = host
        self.tls = tls
        reader = r
        let me = Uncounted(self).toOpaque()
        readEvent = event_new(base, s, Int16(EV_READ | EV_PERSIST), redisSocketCallback, me)
        writeEvent = event_new(base, s, Int16(EV_WRITE | EV_PERSIST), redisSocketCallback, me)
        setWriting(true)   // writable = connected (or failed: SO_ERROR says which)
    }

    deinit {
        close()
        redisReaderFree(reader)
    }

    /// Queues `bytes` and sends what the socket takes now (once open).
    func write(_ bytes: UnsafeRawBufferPointer) {
        guard phase != .closed else { return }
        out.append(contentsOf: bytes)
        if phase == .open { flush() }
    }

    /// Ends the connection without telling `onClose`. Idempotent.
    func close() {
        guard phase != .closed else { return }
        phase = .closed
        if let e = readEvent { event_free(e) }
        if let e = writeEvent { event_free(e) }
        readEvent = nil; writeEvent = nil
        if let ssl { SSL_free(ssl) }
        ssl = nil
        Glibc.close(fd)
        out = []; outHead = 0
    }

    // MARK: events

    func onEvent(_ what: Int16) {
        let writable = what & Int16(EV_WRITE) != 0
        switch phase {
        case .closed: return
        case .connecting:
            if writable { tcpConnected() }
        case .handshaking:
            handshake()
        case .open:
            if writable {
                if readWantsWrite { readWantsWrite = false; readAll() }
                if phase == .open { flush() }
            } else {
                if writeWantsRead { writeWantsRead = false; flush() }
                if phase == .open { readAll() }
            }
        }
    }

    private func tcpConnected() {
        var err: Int32 = 0
        var len = socklen_t(MemoryLayout<Int32>.size)
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len)
        guard err == 0 else { return fail("connect: \(String(cString: strerror(err)))") }
        guard let tls else { return opened() }
        guard let s = tls.session(fd: fd, host: host) else { return fail("TLS: cannot start a session: \(RedisTLS.failure(nil))") }
        ssl = s
        phase = .handshaking
        handshake()
    }

    private func handshake() {
        guard let ssl else { return }
        qw_tls_clear_error()
        let rc = SSL_do_handshake(ssl)
        if rc == 1 { return opened() }
        switch SSL_get_error(ssl, rc) {
        case SSL_ERROR_WANT_READ:
            setWriting(false)
            setReading(true)
        case SSL_ERROR_WANT_WRITE:
            setReading(false)
            setWriting(true)
        default:
            fail("TLS handshake with \(host) failed: \(RedisTLS.failure(ssl))")
        }
    }

    private func opened() {
        phase = .open
        setReading(true)
        setWriting(false)
        onOpen?()
        if phase == .open { flush() }
    }

    // MARK: writing

    private func flush() {
        while outHead < out.count {
            let n: Int = out.withUnsafeBytes { all in
                let p = all.baseAddress! + outHead
                let len = all.count - outHead
                if let ssl {
                    qw_tls_clear_error()
                    let r = SSL_write(ssl, p, Int32(min(len, 1 << 20)))
                    if r > 0 { return Int(r) }
                    switch SSL_get_error(ssl, r) {
                    case SSL_ERROR_WANT_WRITE: return 0
                    case SSL_ERROR_WANT_READ: writeWantsRead = true; return 0
                    default: return -1
                    }
                }
                let r = qw_send(fd, p, len, Int32(MSG_NOSIGNAL))
                if r >= 0 { return r }
                return r == -Int(EAGAIN) || r == -Int(EINTR) ? 0 : -1
            }
            if n < 0 { return fail(ssl != nil ? "TLS write failed: \(RedisTLS.failure(ssl))" : "write: \(String(cString: strerror(errno)))") }
            if n == 0 {
                if !writeWantsRead { setWriting(true) }
                return
            }
            outHead += n
        }
        out.removeAll(keepingCapacity: out.capacity <= 65536)
        outHead = 0
        if !readWantsWrite { setWriting(false) }
    }

    // MARK: reading

    /// Reads what is there, then hands every complete reply on. With TLS it reads until
    /// OpenSSL wants more bytes: `SSL_read` returns one record at a time, and Redis sends
    /// a record per reply. At most 64 reads an event, leaving the rest to the next one
    /// (the event is level-triggered; OpenSSL holds no decrypted bytes back then).
    private func readAll() {
        var closedBy: String?
        var reads = 0
        readLoop: while true {
            reads += 1
            let n: Int = inBuffer.withUnsafeMutableBytes { b in
                if let ssl {
                    qw_tls_clear_error()
                    let r = SSL_read(ssl, b.baseAddress, Int32(b.count))
                    if r > 0 { return Int(r) }
                    switch SSL_get_error(ssl, r) {
                    case SSL_ERROR_WANT_READ: return -1
                    case SSL_ERROR_WANT_WRITE: readWantsWrite = true; setWriting(true); return -1
                    case SSL_ERROR_ZERO_RETURN: return 0
                    default:
                        closedBy = "TLS read failed: \(RedisTLS.failure(ssl))"
                        return 0
                    }
                }
                let r = qw_recv(fd, b.baseAddress, b.count)
                if r > 0 { return r }
                if r == 0 { return 0 }
                if r == -Int(EAGAIN) || r == -Int(EINTR) { return -1 }
                closedBy = "read: \(String(cString: strerror(Int32(-r))))"
                return 0
            }
            if n < 0 { break readLoop }
            if n == 0 {
                closedBy = closedBy ?? "Redis closed the connection"
                break readLoop
            }
            let fed = inBuffer.withUnsafeBytes { redisReaderFeed(reader, $0.baseAddress!.assumingMemoryBound(to: CChar.self), n) }
            if fed != REDIS_OK { return fail("bad reply from Redis") }
            if ssl == nil ? n < inBuffer.count : reads >= 64 && SSL_pending(ssl!) == 0 { break readLoop }
        }
        // Replies already complete are handed on even when the connection then ended.
        while phase == .open {
            var reply: UnsafeMutableRawPointer?
            guard redisReaderGetReply(reader, &reply) == REDIS_OK else { return fail("bad reply from Redis (protocol error)") }
            guard let r = reply else { break }
            onReply?(r.assumingMemoryBound(to: redisReply.self))
            freeReplyObject(r)
        }
        if let why = closedBy, phase == .open { fail(why) }
    }

    // MARK: helpers

    private func fail(_ why: String) {
        let hadOpened = phase == .open
        close()
        onClose?(why, hadOpened)
    }

    private func setReading(_ on: Bool) {
        guard let e = readEvent else { return }
        if on { event_add(e, nil) } else { event_del(e) }
    }

    private func setWriting(_ on: Bool) {
        guard let e = writeEvent, on != writeArmed else { return }
        writeArmed = on
        if on { event_add(e, nil) } else { event_del(e) }
    }
}
