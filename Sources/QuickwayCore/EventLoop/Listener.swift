import Glibc
import CLibevent
import CQuickwayShims

/// Builds the connection for each accepted socket: given by `Gateway`, the one place that
/// names the codecs, so the loop and the listener know connections only as
/// `ClientConnection`. One entry per transport type, so each codec is built for its
/// concrete transport.
protocol ConnectionFactory: AnyObject {
    func connection(over transport: TCPTransport) -> ClientConnection
    func connection(over transport: TLSTransport) -> ClientConnection
}

/// A worker's listening sockets (`listen`, and `tls_listen` with its TLS context): accepts
/// up to 64 connections a turn while the worker has slots, pauses while it has none, and
/// hands each socket, wrapped in its transport, to the factory. Loop thread only, except
/// `installTLSContext`.
final class Listener {
    private unowned let worker: Worker
    private let factory: ConnectionFactory
    private var plainFD: Int32
    private var plainEvent: OpaquePointer?
    private var tlsFD: Int32 = -1
    private var tlsEvent: OpaquePointer?
    /// What new TLS connections get (a reload's certificates replace it).
    private var tlsContext: TLSContext?
    private var paused = false
    private var closed = false

    /// `shared`: other workers of this process listen on the same port (the proxy's).
    init(worker: Worker, listen: ListenAddress, tlsListen: ListenAddress? = nil, tlsContext: TLSContext? = nil,
         shared: Bool = true, factory: ConnectionFactory) throws {
        self.worker = worker
        self.factory = factory
        plainFD = try ListeningSocket.open(listen, shared: shared)
        if let tlsListen, let tlsContext {
            do { tlsFD = try ListeningSocket.open(tlsListen, shared: shared) } catch { Glibc.close(plainFD); throw error }
            self.tlsContext = tlsContext
        }
    }

    /// The listening descriptors (for a loop that takes a descriptor table of its own).
    var descriptors: [Int32] { [plainFD, tlsFD].filter { $0 >= 0 } }

    /// Hands the loop the TLS context new connections get, from any thread. Connections
    /// already open keep theirs.
    func installTLSContext(_ c: TLSContext) {
        let me = LoopBound(self)
        worker.post { me.value.tlsContext = c }
    }

    /// Arms the accept events (the worker's `start`, before its loop runs).
    func start() {
        let me = Uncounted(self).toOpaque()
        plainEvent = event_new(worker.base, plainFD, Int16(EV_READ | EV_PERSIST), listenerAcceptCallback, me)
        event_add(plainEvent, nil)
        if tlsFD >= 0 {
            tlsEvent = event_new(worker.base, tlsFD, Int16(EV_READ | EV_PERSIST), listenerTLSAcceptCallback, me)
            event_add(tlsEvent, nil)
        }
    }

    /// Takes what waits in the kernel's accept queues (a drain serves connections the
    /// kernel already completed instead of resetting them).
    func acceptQueued() {
        for _ in 0..<64 {
            let before = worker.connectionCount
            accept(tls: false)
            accept(tls: true)
            if worker.connectionCount == before { break }
        }
    }

    /// Takes the connections waiting on a listener, up to 64 a turn.
    fileprivate func accept(tls: Bool) {
        let listener = tls ? tlsFD : plainFD
        guard listener >= 0 else { return }
        for _ in 0..<64 {
            // No slot: further connections wait in the kernel's queue until one closes.
            guard worker.takeSlot() else { return pause() }
            var storage = sockaddr_storage()
            var len = socklen_t(MemoryLayout<sockaddr_storage>.size)
            let fd = withUnsafeMutablePointer(to: &storage) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { qw_accept_nonblocking(listener, $0, &len) }
            }
            if fd < 0 {
                worker.releaseSlot()
                if errno == EINTR || errno == ECONNABORTED { continue }
                if errno == EMFILE || errno == ENFILE {
                    Log.warn("\(worker.name): out of file descriptors; pausing accept")
                    pause()
                }
                return
            }
            var one: Int32 = 1
            setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            let peer = Peer(ListeningSocket.peerAddress(&storage))
            worker.stats.connectionAccepted()
            let readAhead = HTTPReadAhead.limit(worker.limits)
            let c: ClientConnection
            if tls, let context = tlsContext {
                c = factory.connection(over: TLSTransport(fd: fd, peer: peer, base: worker.base, context: context, stats: worker.stats,
                                                          readAheadLimit: readAhead, pool: worker.bufferPool))
            } else {
                c = factory.connection(over: TCPTransport(fd: fd, peer: peer, base: worker.base, readAheadLimit: readAhead,
                                                          pool: worker.bufferPool))
            }
            worker.add(c)
        }
    }

    /// Accepts again once the worker and the gateway have room.
    func resumeIfRoom() {
        guard paused, !closed, !worker.isDraining, let ev = plainEvent, worker.hasRoom else { return }
        paused = false
        event_add(ev, nil)
        if let t = tlsEvent { event_add(t, nil) }
    }

    private func pause() {
        guard !paused, let ev = plainEvent else { return }
        event_del(ev)
        if let t = tlsEvent { event_del(t) }
        paused = true
    }

    /// Stops listening: the events and the sockets (drain, or the loop's end).
    func close() {
        guard !closed else { return }
        closed = true
        for e in [plainEvent, tlsEvent] { if let e { event_free(e) } }
        plainEvent = nil; tlsEvent = nil
        if plainFD >= 0 { Glibc.close(plainFD); plainFD = -1 }
        if tlsFD >= 0 { Glibc.close(tlsFD); tlsFD = -1 }
    }
}

/// How far ahead a client transport reads: one head plus a 64 KiB read (HTTP/1.1 parses
/// from the transport's input; the HTTP/2 codec takes what it reads in 16 KiB pieces).
enum HTTPReadAhead {
    static func limit(_ limits: LimitsConfig) -> Int { limits.maxHeaderBytes + 65536 }
}

// libevent's callbacks: the listener, unretained (its worker holds it while its events exist).
private let listenerAcceptCallback: @convention(c) (Int32, Int16, UnsafeMutableRawPointer?) -> Void = { _, _, arg in
    Uncounted<Listener>.fromOpaque(arg!).with { $0.accept(tls: false) }
}
private let listenerTLSAcceptCallback: @convention(c) (Int32, Int16, UnsafeMutableRawPointer?) -> Void = { _, _, arg in
    Uncounted<Listener>.fromOpaque(arg!).with { $0.accept(tls: true) }
}
