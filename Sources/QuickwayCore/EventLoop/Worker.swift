import Glibc
import CLibevent
import CQuickwayShims
import Foundation

/// One event-loop thread: its `event_base`, its own listening socket (on a port shared with
/// the other proxy workers by `SO_REUSEPORT`, or its own), its connections, and (for the proxy) its libcurl multi handle.
/// Nothing here is touched from another thread except through `post`, `install` and
/// `requestDrain()`, which wake the loop by writing to its eventfd (`wakeFD`). The base has
/// no lock (`EventLoopSupport.makeBase`): every libevent call on it is made on the loop
/// thread, or before the loop thread starts.
///
/// `@unchecked Sendable`: a worker is created on one thread and runs on its own. Its
/// loop-side state is touched only on the loop thread; the entry points other threads
/// call (`post`, `install`, `requestDrain`, `join`) go through `pendingLock`, the atomic
/// `drainFlag` or the `finished` semaphore.
final class Worker: @unchecked Sendable {
    let id: Int
    let name: String
    let base: OpaquePointer
    let limits: LimitsConfig
    let stats: WorkerStats
    /// The free 4 KiB blocks its connections' buffers take while they have bytes in flight.
    let bufferPool = BufferPool()
    /// Where its connections' parsers gather a head's fields (loop thread only).
    let headFieldScratch: HeadFieldScratch
    /// Spare body buffers for proxied answers (loop thread only).
    let spareArrays = ByteArrayPool()
    /// Answers its HTTP/2 clients have not taken yet, over all its connections.
    private(set) lazy var http2AnswerBudget = HTTP2AnswerBudget(stats: stats)
    /// Above this many open connections an HTTP/1.1 connection gives its buffer objects
    /// back as soon as it is idle, below it at the next sweep
    /// (`HTTP1Connection.dropBuffersSoon`): as many as the pool keeps spare objects for
    /// (two each). Loop thread; a test may lower it.
    var idleBuffersGoBackAtOnceAbove: Int { didSet { connectionsChanged() } }
    /// `connections.count > idleBuffersGoBackAtOnceAbove`, kept as connections come and
    /// go: read per request, where counting the table cost an access check and a retain.
    @exclusivity(unchecked) private(set) var idleBuffersGoBackAtOnce = false

    private func connectionsChanged() {
        idleBuffersGoBackAtOnce = connections.count > idleBuffersGoBackAtOnceAbove
    }
    private(set) var handler: RequestHandler!
    private let listenAddress: ListenAddress
    private let maxConnections: Int
    private var listenFD: Int32 = -1
    private var listenEvent: OpaquePointer?
    /// The TLS listener (`tls_listen`), if any, and the context new connections get.
    private var tlsListenFD: Int32 = -1
    private var tlsListenEvent: OpaquePointer?
    private var tlsContext: TLSContext?
    private var acceptPaused = false
    private var sweepEvent: OpaquePointer?
    private var controlEvent: OpaquePointer?
    /// Runs `flushDeferred` once the I/O callbacks of the current loop turn are done
    /// (activated on demand; libevent runs it after the events already active).
    private var flushEvent: OpaquePointer?
    /// Transports whose output waits for `flushDeferred` (`deferFlush`), each retained
    /// until it is flushed. Loop thread only.
    private let pendingFlush = DeferredFlushList()
    /// The eventfd other threads write to wake the loop (`wake()`); read by `control()`.
    /// Closed under `pendingLock` once the loop has ended.
    private var wakeFD: Int32 = -1
    private var drainDeadlineEvent: OpaquePointer?
    private var connections = ConnectionTable()
    /// Set by another thread to ask for a graceful stop (read on the loop). An allocated
    /// cell: the atomic helpers need a stable address, which `&storedProperty` is not.
    private let drainFlag: UnsafeMutablePointer<Int32> = {
        let p = UnsafeMutablePointer<Int32>.allocate(capacity: 1)
        p.initialize(to: 0)
        return p
    }()
    private(set) var isDraining = false
    private var finished = DispatchSemaphore(value: 0)
    /// Runs once the loop exits (frees the handler's resources on the loop thread).
    var onLoopExit: (() -> Void)?
    private var requestCounter: UInt64 = 0

    /// The gateway-wide connection limit (nil: only this worker's `maxConnections`).
    var budget: ConnectionBudget?
    /// HTTP/2 settings: set on the proxy's workers, where a connection that opens with the
    /// HTTP/2 preface (h2c) or picks `h2` by ALPN is handed to the HTTP/2 codec. Nil on the
    /// admin and demo listeners (HTTP/1.1 only). Set before `start()`.
    var http2: HTTP2Config?
    /// `cache.max_object_bytes`: answers up to this size are buffered whole (the HTTP/2
    /// codec bounds how many it has in flight per connection). Set before `start()`.
    var maxObjectBytes = 1 << 20
    /// The loop thread takes a descriptor table of its own (`DescriptorTables`): opt-in
    /// (`workers_private_fd_tables`), since `ss -p`, `lsof`, `/proc/PID/fd` and `ulimit -n`
    /// then no longer see the process as one. Set before `start()`.
    var ownDescriptorTable = false
    /// The loop thread's kernel id once it runs with a table of its own (else 0): the
    /// table is `/proc/self/task/TID/fd`, counted into the process's open descriptors.
    /// Written by `start()` before the gateway serves, read-only after.
    private(set) var ownTableThreadID: Int32 = 0

    /// `sharedPort`: other workers of this process listen on the same port (the proxy's);
    /// false for a listener only this loop serves.
    init(id: Int, name: String, listen: ListenAddress, limits: LimitsConfig, maxConnections: Int, routeCount: Int = WorkerStats.maxRoutes,
         tlsListen: ListenAddress? = nil, tlsContext: TLSContext? = nil, sharedPort: Bool = true) throws {
        self.id = id
        self.name = name
        idleBuffersGoBackAtOnceAbove = bufferPool.maxSpareObjects / 2
        self.listenAddress = listen
        self.limits = limits
        headFieldScratch = HeadFieldScratch(headBytes: limits.maxHeaderBytes)
        self.maxConnections = maxConnections
        self.stats = WorkerStats(routeCount: routeCount)
        base = EventLoopSupport.makeBase()
        wakeFD = qw_wake_fd()
        guard wakeFD >= 0 else { throw ListeningSocket.Failure(description: "eventfd() for \(name): \(String(cString: strerror(errno)))") }
        listenFD = try ListeningSocket.open(listen, shared: sharedPort)
        if let tlsListen, let tlsContext {
            tlsListenFD = try ListeningSocket.open(tlsListen, shared: sharedPort)
            self.tlsContext = tlsContext
        }
    }

    /// Hands the loop the TLS context new connections get (a reload's certificates), from
    /// any thread. Connections already open keep theirs.
    func installTLSContext(_ c: TLSContext) {
        post { [self] in tlsContext = c }
    }

    deinit { drainFlag.deallocate() }

    /// Installs the handler (it usually needs the worker, hence not in `init`).
    func setHandler(_ h: RequestHandler) { handler = h }

    private let pendingLock = NSLock()
    private var pendingHandler: RequestHandler?

    private var mailbox: [() -> Void] = []
    /// Set (under `pendingLock`) once the loop has ended and its base is freed: from then
    /// on nothing may wake it, so posts are dropped.
    private var loopClosed = false

    /// Runs `work` on this worker's loop, from any thread; wakes the loop at once.
    /// After the loop has ended, `work` is dropped (whatever it answered is gone too).
    func post(_ work: @escaping @Sendable () -> Void) {
        pendingLock.lock()
        defer { pendingLock.unlock() }
        guard !loopClosed else { return }
        mailbox.append(work)
        wake()
    }

    /// Makes the loop run `control()` soon. Any thread; the caller holds `pendingLock`
    /// (so the eventfd is still open). A write of 1 to an eventfd is atomic and cannot
    /// block short of 2^64 - 2 unread wake-ups.
    private func wake() {
        var one: UInt64 = 1
        _ = write(wakeFD, &one, 8)
    }

    /// Hands the loop a new handler (a reloaded config) from any thread; the loop
    /// switches to it between requests. Requests already started keep their own.
    func install(_ h: RequestHandler) {
        pendingLock.lock()
        defer { pendingLock.unlock() }
        guard !loopClosed else { return }
        pendingHandler = h
        wake()
    }

    /// Starts the loop on a new thread.
    func start() {
        let me = Unmanaged.passUnretained(self).toOpaque()
        listenEvent = event_new(base, listenFD, Int16(EV_READ | EV_PERSIST), workerAcceptCallback, me)
        event_add(listenEvent, nil)
        if tlsListenFD >= 0 {
            tlsListenEvent = event_new(base, tlsListenFD, Int16(EV_READ | EV_PERSIST), workerTLSAcceptCallback, me)
            event_add(tlsListenEvent, nil)
        }
        sweepEvent = event_new(base, -1, Int16(EV_PERSIST), workerSweepCallback, me)
        var tv = EventLoopSupport.timeval(millis: 250)
        event_add(sweepEvent, &tv)
        flushEvent = event_new(base, -1, 0, workerFlushCallback, me)
        controlEvent = event_new(base, wakeFD, Int16(EV_READ | EV_PERSIST), workerControlCallback, me)
        event_add(controlEvent, nil)
        // The loop thread takes a descriptor table of its own first (`DescriptorTables`);
        // then the process's copies of its listeners are closed here, and its eventfd's
        // copy at `join()`. The numbers are read now: the loop may change the fields.
        let ownFDs = [listenFD, tlsListenFD].filter { $0 >= 0 }
        let tableTaken = DispatchSemaphore(value: 0)
        let wantsOwnTable = ownDescriptorTable
        nonisolated(unsafe) var ownTable = false
        nonisolated(unsafe) var loopThreadID: Int32 = 0
        let thread = Thread { [self] in
            if wantsOwnTable {
                ownTable = DescriptorTables.takeOwnTable(keeping: ownFDs)
                if ownTable { loopThreadID = qw_gettid() }
            }
            tableTaken.signal()
            event_base_dispatch(base)
            accessLog?.flush()
            // Order matters: connections still open (cut at the drain deadline) cancel
            // their upstream calls while the upstream client exists; then the client, the
            // Redis links and the probes free their events (onLoopExit); then the base.
            for c in connections.snapshot() { c.closeNow() }
            retired.removeAll()
            onLoopExit?()
            closeLoop()
            finished.signal()
        }
        thread.name = name
        thread.stackSize = 4 << 20
        thread.start()
        tableTaken.wait()
        if ownTable {
            ownTableThreadID = loopThreadID
            DescriptorTables.releaseFromProcessTable(ownFDs)
            processWakeFD = wakeFD   // its copy here, closed once the loop is over
        }
    }

    /// The eventfd's number in the process's table when the loop thread has a table of its
    /// own (-1 otherwise): other threads write to this copy; `join()` closes it.
    private var processWakeFD: Int32 = -1

    /// Blocks until the loop has exited.
    func join() {
        finished.wait()
        if processWakeFD >= 0 { close(processWakeFD); processWakeFD = -1 }
    }

    /// Asks the loop (from any thread) to stop accepting and finish what is in flight.
    func requestDrain() {
        qw_flag_store(drainFlag, 1)
        pendingLock.lock()
        defer { pendingLock.unlock() }
        if !loopClosed { wake() }
    }

    /// Frees the worker's own events and its event base once the loop has ended (loop
    /// thread). Everything else on the base has freed its events by then.
    private func closeLoop() {
        pendingLock.lock()
        loopClosed = true
        mailbox.removeAll()
        if wakeFD >= 0 { close(wakeFD); wakeFD = -1 }
        pendingLock.unlock()
        for e in [listenEvent, tlsListenEvent, sweepEvent, controlEvent, drainDeadlineEvent, flushEvent] { if let e { event_free(e) } }
        listenEvent = nil; tlsListenEvent = nil; sweepEvent = nil; controlEvent = nil; drainDeadlineEvent = nil; flushEvent = nil
        pendingFlush.removeAll()   // not sent: the loop is over
        if listenFD >= 0 { close(listenFD); listenFD = -1 }
        if tlsListenFD >= 0 { close(tlsListenFD); tlsListenFD = -1 }
        event_base_free(base)
    }

    // MARK: loop-thread side

    /// Takes the connections waiting on a listener (`tls`: the TLS one), up to 64 a turn.
    fileprivate func acceptReady(tls: Bool = false) {
        let listener = tls ? tlsListenFD : listenFD
        guard listener >= 0 else { return }
        for _ in 0..<64 {
            if connections.count >= maxConnections {
                // Leave further connections in the kernel's queue until one closes.
                pauseAccepting()
                return
            }
            if let b = budget, !b.take() {
                pauseAccepting()
                return
            }
            var storage = sockaddr_storage()
            var len = socklen_t(MemoryLayout<sockaddr_storage>.size)
            let fd = withUnsafeMutablePointer(to: &storage) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    qw_accept_nonblocking(listener, $0, &len)
                }
            }
            if fd < 0 {
                budget?.release()
                if errno == EINTR || errno == ECONNABORTED { continue }
                if errno == EMFILE || errno == ENFILE {
                    Log.warn("\(name): out of file descriptors; pausing accept")
                    pauseAccepting()
                }
                return
            }
            var one: Int32 = 1
            setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            let peer = ListeningSocket.peerAddress(&storage)
            stats.connectionAccepted()
            let readAhead = HTTP1Codec.readAheadLimit(limits)
            let c: ClientConnection
            if tls, let context = tlsContext {
                c = HTTP1Connection(transport: TLSTransport(fd: fd, peer: peer, base: base, context: context, stats: stats,
                                                            readAheadLimit: readAhead, pool: bufferPool), worker: self)
            } else {
                c = HTTP1Connection(transport: TCPTransport(fd: fd, peer: peer, base: base, readAheadLimit: readAhead, pool: bufferPool), worker: self)
            }
            connections.add(c)
            connectionsChanged()
        }
    }

    /// Accepts again once this worker and the gateway have room.
    private func resumeAcceptingIfRoom() {
        guard acceptPaused, !isDraining, connections.count < maxConnections, budget?.hasRoom ?? true, let ev = listenEvent else { return }
        acceptPaused = false
        event_add(ev, nil)
        if let t = tlsListenEvent { event_add(t, nil) }
    }

    private func pauseAccepting() {
        guard !acceptPaused, let ev = listenEvent else { return }
        event_del(ev)
        if let t = tlsListenEvent { event_del(t) }
        acceptPaused = true
    }

    /// Connections closed since the last sweep, still referenced: a connection closes
    /// from inside its own methods (a read error, a hang-up seen mid-`process`), and the
    /// codec and transport frames still on the stack must not outlive their objects.
    private var retired: [ClientConnection] = []

    /// Hands a connection's transport from the HTTP/1.1 codec to the HTTP/2 codec (h2c
    /// preface or ALPN `h2`, seen before any request). The old codec is retired like a
    /// closed connection (it may be on the stack); the slot in the budget stays taken.
    func switchToHTTP2(from old: ClientConnection, transport: any ByteTransport, peerClosed: Bool) {
        // The table's reference moves to `retired`: `old` may be the only other one, and
        // its caller (a transport calling without a retain) holds none.
        guard let settings = http2, let removed = connections.remove(old) else { return }
        retired.append(removed)
        let c = HTTP2Connection(transport: transport, worker: self, settings: settings, maxObjectBytes: maxObjectBytes,
                                answerBudget: http2AnswerBudget)
        connections.add(c)
        connectionsChanged()
        c.start(peerClosed: peerClosed)
    }

    func connectionClosed(_ c: ClientConnection) {
        if let removed = connections.remove(c) {
            retired.append(removed)
            budget?.release()
            connectionsChanged()
        }
        resumeAcceptingIfRoom()
        if isDraining && connections.isEmpty { event_base_loopexit(base, nil) }
    }

    /// Puts `new` in `old`'s place in the connection table (a codec handing its
    /// connection to another: a WebSocket relay after a `101`). The connection keeps its
    /// place in the budget; `old` is kept until the next sweep (it is on the stack).
    /// Adds a connection that did not come from a listener (a WebSocket relay on an HTTP/2
    /// stream), taking a slot of the connection budget; false when there is none.
    func addConnection(_ c: ClientConnection) -> Bool {
        if connections.count >= maxConnections { return false }
        if let b = budget, !b.take() { return false }
        connections.add(c)
        connectionsChanged()
        return true
    }

    /// Whether `c` is in the connection table (it is from its start until it closes).
    func holds(_ c: ClientConnection) -> Bool { connections.contains(c) }

    /// False (and nothing changed) if `old` is not in the table: the caller must then not
    /// start `new`, which nothing would hold.
    func replaceConnection(_ old: ClientConnection, with new: ClientConnection) -> Bool {
        guard let removed = connections.replace(old, with: new) else { return false }
        retired.append(removed)
        return true
    }

    fileprivate func sweep() {
        retired.removeAll(keepingCapacity: true)   // no connection code is on the stack here
        accessLog?.flush(ifOlderThanMillis: 1000)
        resumeAcceptingIfRoom()
        let now = Clock.coarseMillis()
        // Last slot first, the table read afresh at each step (see `ConnectionTable`).
        var i = connections.count - 1
        while i >= 0 {
            if i < connections.count { connections[i].checkDeadline(now) }
            i -= 1
        }
    }

    /// Sends `t`'s output after the other I/O callbacks of this loop turn instead of now,
    /// so the sends of a turn go out back to back: a peer process woken by the first finds
    /// the others ready, instead of being woken once per send (the WebSocket relay, where
    /// a frame in means a frame out). Loop thread.
    func deferFlush(_ t: any ByteTransport) {
        if pendingFlush.append(t), let flushEvent { event_active(flushEvent, EV_TIMEOUT, 0) }
    }

    fileprivate func flushDeferred() {
        pendingFlush.flushAll()
    }

    fileprivate func control() {
        var count: UInt64 = 0
        _ = read(wakeFD, &count, 8)   // resets the eventfd (it is non-blocking)
        pendingLock.lock()
        if let h = pendingHandler { handler = h; pendingHandler = nil }
        let work = mailbox
        mailbox.removeAll()
        pendingLock.unlock()
        for w in work { w() }
        if qw_flag_load(drainFlag) == 1 && !isDraining { beginDrain() }
    }

    private func beginDrain() {
        isDraining = true
        // Connections the kernel already completed wait in the accept queue; closing the
        // listener would reset them. Take them first and serve what they already sent.
        let known = connections.count
        for _ in 0..<64 {
            let before = connections.count
            acceptReady()
            acceptReady(tls: true)
            if connections.count == before { break }
        }
        // Accepting removes nothing, so the new ones are the entries past `known`.
        for c in connections.snapshot(from: known) { c.readNow() }
        if let ev = listenEvent { event_free(ev); listenEvent = nil }
        if let ev = tlsListenEvent { event_free(ev); tlsListenEvent = nil }
        close(listenFD)
        listenFD = -1
        if tlsListenFD >= 0 { close(tlsListenFD); tlsListenFD = -1 }
        for c in connections.snapshot() { c.drain() }
        if connections.isEmpty {
            event_base_loopexit(base, nil)
            return
        }
        // Bounded: whatever is still running at the deadline is cut off.
        let me = Unmanaged.passUnretained(self).toOpaque()
        drainDeadlineEvent = event_new(base, -1, 0, workerDrainDeadlineCallback, me)
        var tv = EventLoopSupport.timeval(millis: limits.drainTimeoutMillis)
        event_add(drainDeadlineEvent, &tv)
    }

    fileprivate func drainDeadlineReached() {
        Log.warn("\(name): drain timeout reached with \(connections.count) connection(s) open; closing them")
        for c in connections.snapshot() { c.closeNow() }
        event_base_loopexit(base, nil)
    }

    /// `X-Request-Id`: the client's own if it sent a sane one, else a new one.
    func requestId(from head: HTTPRequestHead) -> RequestId {
        if let r = head.value(of: "x-request-id"), r.count >= 1, r.count <= RequestId.maxBytes {
            let usable = head.withBytes { raw -> RequestId? in
                let id = UnsafeRawBufferPointer(rebasing: raw[r])
                for b in id where !(HTTPSyntax.isAlnum(b) || b == UInt8(ascii: "-") || b == UInt8(ascii: "_") || b == UInt8(ascii: ".") || b == UInt8(ascii: ":")) {
                    return nil
                }
                return RequestId(id)
            }
            if let usable { return usable }
        }
        return newRequestId()
    }

    /// A new request id: the per-process prefix, this worker's id and its next counter
    /// value (`RequestId`).
    func newRequestId() -> RequestId {
        requestCounter &+= 1
        return RequestId(worker: id, counter: requestCounter)
    }

    var connectionCount: Int { connections.count }

    /// The access log's buffer for this worker, when the log is on.
    var accessLog: AccessLogBuffer?

    /// Counts a finished request once (status class, route, latency) and logs it.
    func requestDone(_ ex: Exchange?, status: Int, nanos: UInt64) {
        stats.requestFinished(status: status, nanos: nanos, routeSlot: ex?.routeStatSlot ?? -1)
        accessLog?.record(AccessLogEntry(exchange: ex, status: status, durationMicros: Int64(nanos / 1000)))
    }
}

private let workerTLSAcceptCallback: @convention(c) (Int32, Int16, UnsafeMutableRawPointer?) -> Void = { _, _, arg in
    Unmanaged<Worker>.fromOpaque(arg!).takeUnretainedValue().acceptReady(tls: true)
}
private let workerAcceptCallback: @convention(c) (Int32, Int16, UnsafeMutableRawPointer?) -> Void = { _, _, arg in
    Unmanaged<Worker>.fromOpaque(arg!).takeUnretainedValue().acceptReady()
}
private let workerSweepCallback: @convention(c) (Int32, Int16, UnsafeMutableRawPointer?) -> Void = { _, _, arg in
    Unmanaged<Worker>.fromOpaque(arg!).takeUnretainedValue().sweep()
}
private let workerFlushCallback: @convention(c) (Int32, Int16, UnsafeMutableRawPointer?) -> Void = { _, _, arg in
    Unmanaged<Worker>.fromOpaque(arg!).takeUnretainedValue().flushDeferred()
}
private let workerControlCallback: @convention(c) (Int32, Int16, UnsafeMutableRawPointer?) -> Void = { _, _, arg in
    Unmanaged<Worker>.fromOpaque(arg!).takeUnretainedValue().control()
}
private let workerDrainDeadlineCallback: @convention(c) (Int32, Int16, UnsafeMutableRawPointer?) -> Void = { _, _, arg in
    Unmanaged<Worker>.fromOpaque(arg!).takeUnretainedValue().drainDeadlineReached()
}
