import CLibevent
import CQuickwayShims
import Glibc

/// One asynchronous connection to Redis on one event loop (a `RedisSocket`: TCP, or TLS
/// for `rediss://`). Each worker has its own, so commands and replies never cross threads.
///
/// - Commands go out pipelined; Redis answers in order, so `pending` is a FIFO that
///   matches each reply (or hiredis's NULL for a dropped connection) to its caller.
/// - No caller waits longer than its timeout: a timer answers overdue entries with
///   `.unavailable` and leaves them in the FIFO as placeholders for the late replies.
///   A reply that is more than `stallGraceMillis` overdue means a stuck connection,
///   which is dropped and made again.
/// - While the link is down, commands are answered `.unavailable` at once. Reconnects
///   back off from 100 ms, doubling to 2 s, with jitter.
///
/// - A connection that fails its TLS handshake (a certificate the CA did not sign, a name
///   it does not carry) is a connect failure like a refused one: counted
///   (`tlsFailures` too), logged with OpenSSL's reason, and retried with backoff, while
///   callers follow `on_failure` as for any Redis outage.
///
/// Thread rule: loop thread only. The socket's closures hold the link unowned: the link
/// owns the socket and closes it (ending every callback) before it goes.
final class RedisLink {
    enum State { case down, connecting, up }

    private struct Pending {
        var done: ((RedisReply) -> Void)?
        let deadline: Int64
        let timeout: Int64
    }

    let base: OpaquePointer
    let endpoint: RedisEndpoint
    /// Where hiredis connects: the host's address as last resolved (re-resolved in the
    /// background after a failed connect or a lost connection).
    let address: RedisAddress
    let defaultTimeoutMillis: Int64
    let stats: RedisStats
    /// `rediss://`: the client TLS context (nil: plain TCP).
    let tls: RedisTLS?
    /// Sentinel: check `ROLE` after connecting and drop a connection to a replica (or one
    /// answering `READONLY`), and reconnect when the master moves (`RedisAddress`).
    let requireMaster: Bool
    /// The master generation this connection was made under.
    private var connectedGeneration = 0
    private(set) var state = State.down
    private var socket: RedisSocket?
    /// `ip:port` of the last connect, for logs.
    private var connectedAddress = ""
    private var pending: [Pending] = []
    private var pendingHead = 0
    private var sweepTimer: LoopTimer?
    /// When `sweepTimer` fires (monotonic ms).
    private var sweepDeadline: Int64 = 0
    private var reconnectTimer: LoopTimer?
    private var connectTimer: LoopTimer?
    private var backoffMillis: Int64 = 0
    private var closed = false
    private var lastError = ""
    static let stallGraceMillis: Int64 = 1000
    /// Subscriber mode: the channel this link listens on and what to do with each
    /// message. Such a link sends nothing else (Redis allows only (P)SUBSCRIBE then).
    private var subscription: (channel: [UInt8], onMessage: ([UInt8]) -> Void)?
    /// Subscriber links: Redis confirmed the subscription (after each connect), and the
    /// link went down (each time it stops being up, or fails to connect): from then on
    /// messages may be missed (`PurgeFollower`).
    var onSubscribed: (() -> Void)?
    var onDown: (() -> Void)?

    /// TLS: the certificate must name the address connected to (its IP), not the
    /// endpoint's host (an address that moves: the cluster's purge subscription).
    let tlsNameFromAddress: Bool

    init(base: OpaquePointer, endpoint: RedisEndpoint, address: RedisAddress, timeoutMillis: Int64, stats: RedisStats, tls: RedisTLS? = nil,
         requireMaster: Bool = false, tlsNameFromAddress: Bool = false) {
        self.base = base
        self.tlsNameFromAddress = tlsNameFromAddress
        self.tls = tls
        self.requireMaster = requireMaster
        self.endpoint = endpoint
        self.address = address
        self.defaultTimeoutMillis = timeoutMillis
        self.stats = stats
    }

    /// Connects (on the loop thread).
    func start() { connect() }

    /// Whether a command sent on this link awaits its reply (or its late reply).
    var hasPending: Bool { pendingHead < pending.count }

    /// Makes this a subscriber link: after every (re)connect it subscribes to `channel`
    /// and hands each message's payload to `onMessage`. Call before `start()`.
    func subscribe(_ channel: [UInt8], onMessage: @escaping ([UInt8]) -> Void) {
        subscription = (channel, onMessage)
    }

    /// A reply off the socket: a subscriber link's pushes (`message`, and the
    /// `subscribe` confirmation) go to the subscription, every other reply to the oldest
    /// pending command.
    private func received(_ r: UnsafeMutablePointer<redisReply>) {
        if let sub = subscription, r.pointee.type == REDIS_REPLY_ARRAY {
            if case let .array(parts) = RedisReply(r), parts.count == 3, case .string(let kind) = parts[0] {
                if kind == Array("message".utf8), case .string(let payload) = parts[2] { sub.onMessage(payload) }
                if kind == Array("subscribe".utf8) { onSubscribed?() }
                if kind == Array("message".utf8) || kind == Array("subscribe".utf8) { return }
            }
        }
        replied(r)
    }

    /// Sends `command`; `done` runs on this loop with the reply, or `.unavailable` within
    /// the timeout. Commands sent while connecting wait for the connection (bounded by
    /// the same timeout); while down they are answered at once.
    func send(_ command: RedisCommand, timeoutMillis: Int64? = nil, _ done: @escaping (RedisReply) -> Void) {
        if requireMaster && state != .down && address.generation != connectedGeneration {
            // The master moved (Sentinel): this command goes to the new one.
            lastError = "the master moved"
            dropConnection()
            reconnectTimer?.cancel()
            reconnectTimer = nil
            connect()
        }
        guard state != .down, let socket else {
            stats.add(.unavailable)
            done(.unavailable("Redis is not connected (\(lastError))"))
            return
        }
        stats.add(.commands)
        let timeout = timeoutMillis ?? defaultTimeoutMillis
        let deadline = Clock.monotonicMillis() + timeout
        // In the FIFO before the write: a write that fails at once closes the connection
        // (`disconnected`), which must answer this command too. Appended after, it would
        // stay in the FIFO and take the next connection's first reply.
        pending.append(Pending(done: done, deadline: deadline, timeout: timeout))
        if sweepTimer == nil || deadline < sweepDeadline { armSweep(afterMillis: timeout) }
        command.withCString { socket.write(UnsafeRawBufferPointer(start: $0, count: $1)) }
    }

    // MARK: replies

    /// Answers the oldest pending command with `reply`, or (nil) with "dropped".
    private func replied(_ reply: UnsafeMutablePointer<redisReply>?) {
        guard pendingHead < pending.count else { return }
        let done = pending[pendingHead].done
        pending[pendingHead].done = nil
        pendingHead += 1
        if pendingHead == pending.count {
            pending.removeAll(keepingCapacity: true)
            pendingHead = 0
        } else if pendingHead > 256 && pendingHead * 2 > pending.count {
            pending.removeFirst(pendingHead)
            pendingHead = 0
        }
        guard let done else { return }   // answered already (timed out)
        if let r = reply {
            let value = RedisReply(r)
            if case .error = value { stats.add(.errors) }
            done(value)
            if case .error(let m) = value, m.hasPrefix("READONLY"), requireMaster, socket != nil {
                // A replica (a failover this link has not heard of yet): never write there.
                stats.add(.readonlyErrors)
                lastError = "READONLY from \(connectedAddress): not the master"
                Log.warn("redis: \(lastError); reconnecting")
                dropConnection()
            }
        } else {
            done(.unavailable("the Redis connection dropped (\(lastError.isEmpty ? "closed" : lastError))"))
        }
    }

    private func armSweep(afterMillis: Int64) {
        sweepTimer?.cancel()
        sweepDeadline = Clock.monotonicMillis() + max(1, afterMillis)
        sweepTimer = LoopTimer(base: base, afterMillis: max(1, afterMillis)) { [unowned self] in
            self.sweepTimer = nil
            self.sweepOverdue()
        }
    }

    /// Answers overdue callers; drops a connection whose oldest reply is far overdue.
    private func sweepOverdue() {
        let now = Clock.monotonicMillis()
        var next: Int64?
        var stalled = false
        for i in pendingHead..<pending.count {
            let d = pending[i].deadline
            if d <= now {
                if now - d > Self.stallGraceMillis { stalled = true }
                if let done = pending[i].done {
                    pending[i].done = nil
                    stats.add(.timeouts)
                    done(.unavailable("Redis did not answer within \(Units.formatMillis(pending[i].timeout))"))
                }
                // Keep watching it: a reply this late means the connection is stuck.
                next = min(next ?? .max, d + Self.stallGraceMillis + 1 - now)
            } else {
                next = min(next ?? .max, d - now)
            }
        }
        if stalled {
            lastError = "no reply for over \(Units.formatMillis(Self.stallGraceMillis)) past the timeout"
            Log.warn("redis \(endpoint.display): \(lastError); reconnecting")
            dropConnection()
            return
        }
        if let n = next, pendingHead < pending.count { armSweep(afterMillis: n) }
    }

    // MARK: connection

    private func connect() {
        guard !closed, socket == nil else { return }
        let target = address.target(defaultPort: endpoint.port)
        connectedGeneration = target.generation
        connectedAddress = "\(target.ip ?? endpoint.host):\(target.port)"
        let unresolved = target.failure
        guard let ip = target.ip else {
            state = .connecting
            connectFailed(unresolved)
            return
        }
        state = .connecting
        if endpoint.tls && tls == nil { return connectFailed("rediss:// without a TLS context (see the error at start)") }
        let s: RedisSocket
        do {
            s = try RedisSocket(base: base, ip: ip, port: target.port, host: requireMaster || tlsNameFromAddress ? ip : endpoint.host, tls: tls)
        } catch {
            connectFailed((error as? RedisFailure)?.message ?? "\(error)")
            return
        }
        s.onOpen = { [unowned self] in self.connected() }
        s.onReply = { [unowned self] in self.received($0) }
        s.onClose = { [unowned self] why, hadOpened in
            self.socket = nil
            if hadOpened { self.disconnected(why) } else { self.setupFailed(why) }
        }
        socket = s
        // Sent first, pipelined ahead of any request's command.
        if let password = endpoint.password {
            var args = [Array("AUTH".utf8)]
            if let u = endpoint.username { args.append(Array(u.utf8)) }
            args.append(Array(password.utf8))
            sendSetup(RedisCommand(args), what: "AUTH")
        }
        if endpoint.db != 0 { sendSetup(RedisCommand("SELECT", String(endpoint.db)), what: "SELECT \(endpoint.db)") }
        if requireMaster {
            // Pipelined ahead of any caller's command, which a replica would refuse
            // (READONLY) for writes anyway.
            send(RedisCommand("ROLE"), timeoutMillis: max(1000, 4 * defaultTimeoutMillis)) { [unowned self] reply in
                guard case .array(let parts) = reply, case .string(let role)? = parts.first else { return }
                guard role != Array("master".utf8) else { return }
                self.stats.add(.replicaRefusals)
                self.lastError = "\(self.connectedAddress) is a \(String(decoding: role, as: UTF8.self)), not the master"
                Log.warn("redis: \(self.lastError); reconnecting")
                self.dropConnection()
            }
        }
        if let sub = subscription {
            // Its confirmation and the messages are pushes (`received`), not in `pending`.
            let cmd = RedisCommand([Array("SUBSCRIBE".utf8), sub.channel])
            cmd.withCString { s.write(UnsafeRawBufferPointer(start: $0, count: $1)) }
        }
        connectTimer = LoopTimer(base: base, afterMillis: max(1000, 4 * defaultTimeoutMillis)) { [unowned self] in
            self.connectTimer = nil
            guard self.state == .connecting else { return }
            self.lastError = "connect timed out"
            self.stats.add(.connectFailures)
            Log.warn("redis \(self.endpoint.display): connect timed out; retrying")
            self.dropConnection()
        }
    }

    private func sendSetup(_ c: RedisCommand, what: String) {
        send(c, timeoutMillis: max(1000, 4 * defaultTimeoutMillis)) { [unowned self] reply in
            guard let why = reply.failure else { return }
            self.lastError = "\(what) failed: \(why)"
            Log.error("redis \(self.endpoint.display): \(self.lastError)")
            if case .error = reply { self.dropConnection() }
        }
    }

    private func connected() {
        connectTimer?.cancel()
        connectTimer = nil
        state = .up
        stats.add(.connects)
        stats.add(.linksUp)
        if backoffMillis > 0 { Log.info("redis \(endpoint.display): connected again") }
        backoffMillis = 0
        lastError = ""
    }

    /// The TCP connect or the TLS handshake failed (the socket is closed).
    private func setupFailed(_ why: String) {
        connectTimer?.cancel()
        connectTimer = nil
        if why.hasPrefix("TLS") {
            stats.add(.tlsFailures)
            // Logged each time: a certificate problem is a configuration error to fix.
            if lastError == why { Log.warn("redis \(endpoint.display): \(why)") }
        }
        stats.noteFailure(why)
        connectFailed(why)
    }

    private func disconnected(_ why: String) {
        let wasUp = state == .up
        markDown()
        lastError = why
        stats.noteFailure(why)
        failAllPending()
        guard !closed else { return }
        if wasUp { Log.warn("redis \(endpoint.display): connection lost (\(lastError)); reconnecting") }
        address.refresh()
        scheduleReconnect()
    }

    private func markDown() {
        onDown?()
        if state == .up {
            stats.add(.linksUp, -1)
            stats.add(.disconnects)
        }
        state = .down
    }

    private func connectFailed(_ why: String) {
        address.refresh()
        markDown()
        stats.add(.connectFailures)
        if lastError != why { Log.warn("redis \(endpoint.display): cannot connect (\(why)); retrying with backoff") }
        lastError = why
        failAllPending()
        scheduleReconnect()
    }

    private func scheduleReconnect() {
        guard !closed, reconnectTimer == nil else { return }
        backoffMillis = backoffMillis == 0 ? 100 : min(2000, backoffMillis * 2)
        let jittered = backoffMillis * Int64.random(in: 80...120) / 100
        reconnectTimer = LoopTimer(base: base, afterMillis: jittered) { [unowned self] in
            self.reconnectTimer = nil
            self.connect()
        }
    }

    /// Drops the connection now (its callers get `.unavailable`) and reconnects later.
    private func dropConnection() {
        guard let s = socket else { return }
        socket = nil
        markDown()
        s.close()
        failAllPending()
        scheduleReconnect()
    }

    private func failAllPending() {
        while pendingHead < pending.count { replied(nil) }
        sweepTimer?.cancel()
        sweepTimer = nil
    }

    /// Closes the link for good (loop thread, at loop exit).
    func shutdown() {
        closed = true
        reconnectTimer?.cancel(); reconnectTimer = nil
        connectTimer?.cancel(); connectTimer = nil
        markDown()
        socket?.close()
        socket = nil
        failAllPending()
    }
}
