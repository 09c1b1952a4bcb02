/// Idle keep-alive connections to plain-HTTP upstreams, for one worker. Most recently
/// used first out (the least likely to have been closed by the upstream), per IP.
///
/// At most `services.<name>.keepalive` idle connections per service (over all its IPs),
/// as nginx's `keepalive N`: a connection that comes back to a full pool takes the place
/// of the service's oldest idle one, which is closed at once, so what a burst of calls
/// opened goes back as the calls end, not a minute later. Idle longer than
/// `idleTimeoutMillis`, closed by the sweep.
///
/// Each IP's list is an object the pool finds with one hash lookup per `take`, and a
/// connection remembers it for its `put` (none): a dictionary of arrays mutated in place
/// cost two lookups and a heap-allocated accessor frame per request. Each list names its
/// service's count (`ServiceIdle`), which `put` compares with the bound.
///
/// The tables and the lists are `UncheckedState`: `take` and `put` reach them once a
/// request, on the loop thread, and no access spans a call that could come back here.
final class UpstreamPool {
    static let idleTimeoutMillis: Int64 = 60_000
    /// Idle this long, a connection's buffers go back at the next sweep.
    static let buffersBackAfterMillis: Int64 = 1_000
    private let byMember = UncheckedState([ObjectIdentifier: IdleConnections]())
    private let byService = UncheckedState([ObjectIdentifier: ServiceIdleConnections]())
    /// `closeAll` ran (the worker is stopping): a connection coming back is closed, not
    /// kept in a new list that nothing would ever empty (a list and its connections hold
    /// each other).
    private var isClosed = false
    /// The worker's loop, where the connections' transports put their events.
    let base: OpaquePointer
    /// The worker's buffer pool, which the transports' buffers draw from.
    let buffers: BufferPool?
    /// The worker's counters (`upstream_idle` in `/stats`); none in tests and on the admin loop.
    private let stats: WorkerStats?
    /// Closed connections, kept to the end of the loop turn (their code may be on the stack).
    private let closing: EndOfTurnRelease

    init(base: OpaquePointer, buffers: BufferPool?, stats: WorkerStats? = nil) {
        self.base = base
        self.buffers = buffers
        self.stats = stats
        closing = EndOfTurnRelease(base: base)
    }

    func holdToEndOfTurn(_ c: UpstreamConnection) { closing.hold(c) }

    /// The most recently used idle connection to `member`. `checkAlive`: first peek at
    /// the socket and drop connections the upstream has closed or written to unasked.
    func take(_ member: UpstreamMember, checkAlive: Bool = false) -> UpstreamConnection? {
        guard let idle = byMember.value[ObjectIdentifier(member)] else { return nil }
        while let c = idle.value.list.popLast() {
            idle.value.service.value.count -= 1
            guard checkAlive else { return c }
            if c.isSilent { return c }
            c.close()
        }
        return nil
    }

    func put(_ c: UpstreamConnection) {
        guard !c.isClosed else { return }
        c.user = nil
        guard !isClosed else { c.close(); return }
        let idle = idleList(of: c)
        let service = idle.value.service
        // The bound of the config the connection was made under (a table entry may
        // outlive the service object whose address keyed it: a reload).
        service.value.keepalive = c.keepalive
        if service.value.count >= service.value.keepalive, !closeOldest(of: service) {
            c.close()   // `keepalive: 0`: nothing is kept
            return
        }
        c.trimBuffers()
        c.resumeReading()
        c.idleSince = Clock.coarseMillis()
        idle.value.list.append(c)
        service.value.count += 1
    }

    /// Closes the service's connection idle the longest (the first of some IP's list), to
    /// make room for one coming back; false when it has none.
    private func closeOldest(of service: ServiceIdleConnections) -> Bool {
        var oldest: IdleConnections?
        var since = Int64.max
        for l in service.value.lists {
            if let first = l.value.list.first, first.idleSince < since {
                since = first.idleSince
                oldest = l
            }
        }
        guard let l = oldest else { return false }
        let c = l.value.list.removeFirst()
        service.value.count -= 1
        stats?.count(.upstreamIdleClosedOverKeepalive)
        closing.hold(c)
        c.close()
        return true
    }

    /// The list `c` goes back to: the one it remembers, unless the pool dropped it.
    private func idleList(of c: UpstreamConnection) -> IdleConnections {
        if let l = c.idleList, !l.value.dropped { return l }
        let l: IdleConnections
        if let found = byMember.value[c.memberKey] {
            l = found
        } else {
            let service: ServiceIdleConnections
            if let s = byService.value[c.serviceKey] {
                service = s
            } else {
                service = ServiceIdleConnections(ServiceIdle(keepalive: c.keepalive))
                byService.value[c.serviceKey] = service
            }
            l = IdleConnections(IdleList(service: service))
            service.value.lists.append(l)
            byMember.value[c.memberKey] = l
        }
        c.idleList = l
        return l
    }

    /// Drops an idle connection the upstream closed.
    func discard(_ c: UpstreamConnection) {
        closing.hold(c)   // first: its idle list may hold the last reference
        forgetIdle(c)
        c.close()
    }

    /// Takes `c` out of its IP's idle list, if it is there.
    func forgetIdle(_ c: UpstreamConnection) {
        if let idle = c.idleList ?? byMember.value[c.memberKey], let i = idle.value.list.firstIndex(where: { $0 === c }) {
            idle.value.list.remove(at: i)
            idle.value.service.value.count -= 1
        }
    }

    /// Idle connections held now, over every service (tests, `/stats`).
    var idleCount: Int { byService.value.values.reduce(0) { $0 + $1.value.count } }

    /// Closes connections idle for longer than the idle timeout, gives back the buffers
    /// of those idle for a second or more (what a burst took goes back within a sweep);
    /// forgets empty lists, and services with none.
    func sweep(nowMillis: Int64) {
        for (key, idle) in byMember.value {
            let service = idle.value.service
            if idle.value.list.contains(where: { nowMillis - $0.idleSince >= Self.idleTimeoutMillis }) {
                let list = idle.value.list
                idle.value.list = list.filter { nowMillis - $0.idleSince < Self.idleTimeoutMillis }
                service.value.count -= list.count - idle.value.list.count
                for c in list where nowMillis - c.idleSince >= Self.idleTimeoutMillis { c.close() }
            }
            for c in idle.value.list where nowMillis - c.idleSince >= Self.buffersBackAfterMillis { c.giveBuffersBack() }
            if idle.value.list.isEmpty {
                idle.value.dropped = true
                byMember.value[key] = nil
                service.value.lists.removeAll { $0 === idle }
            }
        }
        for (key, service) in byService.value where service.value.lists.isEmpty {
            byService.value[key] = nil
        }
        stats?.set(.upstreamIdleConnections, idleCount)
    }

    func closeAll() {
        isClosed = true
        let lists = byMember.value.values
        byMember.value = [:]
        for s in byService.value.values { s.value.lists = []; s.value.count = 0 }
        byService.value = [:]
        for idle in lists {
            idle.value.dropped = true
            let list = idle.value.list
            idle.value.list = []
            for c in list { c.close() }
        }
        closing.shutdown()
    }
}

/// One upstream IP's idle connections in one worker's pool, most recently used last:
/// one object that the pool's table and the connections that remember it share.
/// Loop thread only.
typealias IdleConnections = UncheckedState<IdleList>

struct IdleList {
    var list: [UpstreamConnection] = []
    /// No longer in the pool's table (it was empty at a sweep): a connection that still
    /// remembers it looks its IP's list up again.
    var dropped = false
    /// Its service's count and lists (it is one of them while not dropped).
    let service: ServiceIdleConnections

    init(service: ServiceIdleConnections) { self.service = service }
}

/// One service's idle connections in one worker's pool: their count, which
/// `services.<name>.keepalive` bounds, and its IPs' lists (where the oldest is found).
/// A service's lists and each list's `service` refer to each other until the sweep drops
/// an empty list or the pool closes. Loop thread only.
typealias ServiceIdleConnections = UncheckedState<ServiceIdle>

struct ServiceIdle {
    var keepalive: Int
    var count = 0
    var lists: [IdleConnections] = []

    init(keepalive: Int) { self.keepalive = keepalive }
}
