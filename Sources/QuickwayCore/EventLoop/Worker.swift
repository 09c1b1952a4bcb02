import Glibc
import CLibevent
import CQuickwayShims
import Foundation

/// One event-loop thread: its `event_base`, its connection table, its timers (the sweep
/// every 250 ms, deferred flushes) and a mailbox other threads post work to. What it
/// serves comes from outside: a `Listener` accepts connections and builds them with the
/// factory `Gateway` gives it, so the loop knows connections only as `ClientConnection`.
/// Nothing here is touched from another thread except through `post` and
/// `requestDrain()`, which go through its `LoopMailbox`. The base has
/// no lock (`EventLoopSupport.makeBase`): every libevent call on it is made on the loop
/// thread, or before the loop thread starts.
///
/// `@unchecked Sendable`: a worker is created on one thread and runs on its own. Its
/// loop-side state is touched only on the loop thread; the entry points other threads
/// call (`post`, `requestDrain`, `join`) go through the mailbox or the `finished`
/// semaphore.
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
    /// Above this many open connections an idle HTTP/1.1 connection gives its buffer
    /// objects back at once, below it at the next sweep: as many as the pool keeps spare
    /// objects for (two each). Loop thread; a test may lower it.
    var idleBuffersGoBackAtOnceAbove: Int { didSet { connectionsChanged() } }
    /// `connections.count > idleBuffersGoBackAtOnceAbove`, kept as connections come and
    /// go (read per request).
    @exclusivity(unchecked) var idleBuffersGoBackAtOnce = false
    /// What accepts this loop's connections (nil for a loop that only runs timers and
    /// posted work). Set before `start()`.
    var listener: Listener?
    let maxConnections: Int
    /// The gateway-wide connection limit (nil: only this worker's `maxConnections`).
    var budget: ConnectionBudget?
    private var sweepEvent: OpaquePointer?
    private var controlEvent: OpaquePointer?
    /// Runs `flushDeferred` once the I/O callbacks of the current loop turn are done
    /// (activated on demand; libevent runs it after the events already active).
    private var flushEvent: OpaquePointer?
    /// Transports whose output waits for `flushDeferred` (`deferFlush`), each retained
    /// until it is flushed. Loop thread only.
    private let pendingFlush = DeferredFlushList()
    /// Work and drain requests from other threads; its eventfd wakes `control()`.
    private let mailbox: LoopMailbox
    private var drainDeadlineEvent: OpaquePointer?
    var connections = ConnectionTable()
    /// Connections closed since the last sweep, still referenced: a connection closes
    /// from inside its own methods (a read error, a hang-up seen mid-`process`), and the
    /// codec and transport frames still on the stack must not outlive their objects.
    var retired: [ClientConnection] = []
    private(set) var isDraining = false
    private var finished = DispatchSemaphore(value: 0)
    /// Runs once the loop exits (frees the handler's resources on the loop thread).
    var onLoopExit: (() -> Void)?
    /// The loop thread takes a descriptor table of its own (`DescriptorTables`): opt-in
    /// (`workers_private_fd_tables`). Set before `start()`.
    var ownDescriptorTable = false
    /// The loop thread's kernel id once it runs with a table of its own (else 0): the
    /// table is `/proc/self/task/TID/fd`, counted into the process's open descriptors.
    /// Written by `start()` before the gateway serves, read-only after.
    private(set) var ownTableThreadID: Int32 = 0
    /// The eventfd's number in the process's table when the loop thread has a table of its
    /// own (-1 otherwise): other threads write to this copy; `join()` closes it.
    private var processWakeFD: Int32 = -1

    init(id: Int, name: String, limits: LimitsConfig, maxConnections: Int, routeCount: Int = WorkerStats.maxRoutes) throws {
        self.id = id
        self.name = name
        idleBuffersGoBackAtOnceAbove = bufferPool.maxSpareObjects / 2
        self.limits = limits
        headFieldScratch = HeadFieldScratch(headBytes: limits.maxHeaderBytes)
        self.maxConnections = maxConnections
        self.stats = WorkerStats(routeCount: routeCount)
        mailbox = try LoopMailbox(name: name)
        base = EventLoopSupport.makeBase()
    }

    // MARK: other threads

    /// Runs `work` on this worker's loop, from any thread; wakes the loop at once.
    /// After the loop has ended, `work` is dropped (whatever it answered is gone too).
    func post(_ work: @escaping @Sendable () -> Void) { mailbox.post(work) }

    /// Starts the loop on a new thread.
    func start() {
        let me = Uncounted(self).toOpaque()
        listener?.start()
        sweepEvent = event_new(base, -1, Int16(EV_PERSIST), workerSweepCallback, me)
        var tv = EventLoopSupport.timeval(millis: 250)
        event_add(sweepEvent, &tv)
        flushEvent = event_new(base, -1, 0, workerFlushCallback, me)
        controlEvent = event_new(base, mailbox.fd, Int16(EV_READ | EV_PERSIST), workerControlCallback, me)
        event_add(controlEvent, nil)
        // With a descriptor table of its own, the process's copies of the listeners are
        // closed once the thread has taken its table, and the eventfd's at `join()`.
        ownTableThreadID = LoopThread.start(name: name, ownTable: ownDescriptorTable, keeping: listener?.descriptors ?? []) { [self] in
            event_base_dispatch(base)
            // Order matters: connections still open (cut at the drain deadline) cancel
            // their upstream calls while the upstream client exists; then the client, the
            // Redis links and the probes free their events (onLoopExit); then the base.
            for c in connections.snapshot() { c.closeNow() }
            retired.removeAll()
            onLoopExit?()
            closeLoop()
            finished.signal()
        }
        if ownTableThreadID != 0 { processWakeFD = mailbox.fd }
    }

    /// Blocks until the loop has exited.
    func join() {
        finished.wait()
        if processWakeFD >= 0 { close(processWakeFD); processWakeFD = -1 }
    }

    /// Asks the loop (from any thread) to stop accepting and finish what is in flight.
    func requestDrain() { mailbox.requestDrain() }

    /// Frees the worker's own events and its event base once the loop has ended (loop
    /// thread). Everything else on the base has freed its events by then.
    private func closeLoop() {
        mailbox.close()
        for e in [sweepEvent, controlEvent, drainDeadlineEvent, flushEvent] { if let e { event_free(e) } }
        sweepEvent = nil; controlEvent = nil; drainDeadlineEvent = nil; flushEvent = nil
        pendingFlush.removeAll()   // not sent: the loop is over
        listener?.close()
        event_base_free(base)
    }

    // MARK: loop turns

    fileprivate func sweep() {
        retired.removeAll(keepingCapacity: true)   // no connection code is on the stack here
        onSweep?()
        listener?.resumeIfRoom()
        let now = Clock.coarseMillis()
        // Last slot first, the table read afresh at each step (see `ConnectionTable`).
        var i = connections.count - 1
        while i >= 0 {
            if i < connections.count { connections[i].checkDeadline(now) }
            i -= 1
        }
    }

    /// Runs at each sweep (the access log's flush).
    var onSweep: (() -> Void)?

    /// Sends `t`'s output after the other I/O callbacks of this loop turn instead of now,
    /// so the sends of a turn go out back to back: a peer process woken by the first finds
    /// the others ready, instead of being woken once per send (the WebSocket relay, where
    /// a frame in means a frame out). Loop thread.
    func deferFlush(_ t: any ByteTransport) {
        if pendingFlush.append(t), let flushEvent { event_active(flushEvent, EV_TIMEOUT, 0) }
    }

    fileprivate func flushDeferred() { pendingFlush.flushAll() }

    fileprivate func control() {
        for w in mailbox.take() { w() }
        if mailbox.drainRequested && !isDraining { beginDrain() }
    }

    private func beginDrain() {
        isDraining = true
        // Connections the kernel already completed wait in the accept queue; closing the
        // listener would reset them. Take them first and serve what they already sent.
        let known = connections.count
        listener?.acceptQueued()
        // Accepting removes nothing, so the new ones are the entries past `known`.
        for c in connections.snapshot(from: known) { c.readNow() }
        listener?.close()
        for c in connections.snapshot() { c.drain() }
        if connections.isEmpty {
            event_base_loopexit(base, nil)
            return
        }
        // Bounded: whatever is still running at the deadline is cut off.
        drainDeadlineEvent = event_new(base, -1, 0, workerDrainDeadlineCallback, Uncounted(self).toOpaque())
        var tv = EventLoopSupport.timeval(millis: limits.drainTimeoutMillis)
        event_add(drainDeadlineEvent, &tv)
    }

    fileprivate func drainDeadlineReached() {
        Log.warn("\(name): drain timeout reached with \(connections.count) connection(s) open; closing them")
        for c in connections.snapshot() { c.closeNow() }
        event_base_loopexit(base, nil)
    }
}

// libevent's callbacks: the worker, unretained (it outlives its events).
private let workerSweepCallback: @convention(c) (Int32, Int16, UnsafeMutableRawPointer?) -> Void = { _, _, arg in
    Uncounted<Worker>.fromOpaque(arg!).with { $0.sweep() }
}
private let workerFlushCallback: @convention(c) (Int32, Int16, UnsafeMutableRawPointer?) -> Void = { _, _, arg in
    Uncounted<Worker>.fromOpaque(arg!).with { $0.flushDeferred() }
}
private let workerControlCallback: @convention(c) (Int32, Int16, UnsafeMutableRawPointer?) -> Void = { _, _, arg in
    Uncounted<Worker>.fromOpaque(arg!).with { $0.control() }
}
private let workerDrainDeadlineCallback: @convention(c) (Int32, Int16, UnsafeMutableRawPointer?) -> Void = { _, _, arg in
    Uncounted<Worker>.fromOpaque(arg!).with { $0.drainDeadlineReached() }
}
