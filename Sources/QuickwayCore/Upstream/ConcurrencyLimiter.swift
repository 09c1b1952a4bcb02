/// A call waiting in a limiter's queue (`UpstreamRelay`): told once, either way.
protocol ConcurrencyWaiter: AnyObject {
    /// A slot is now the waiter's: it must `release` it when its call ends.
    func concurrencySlotGranted()
    /// It waited `queue_timeout` (or the limiter went away): it holds no slot.
    func concurrencyQueueTimedOut()
}

/// `services.<name>.concurrency` for one service on one worker: how many of its calls
/// may be in flight (a fixed `max`, or the `GradientController`'s limit), and a FIFO
/// queue bounded in count (`queue`) and time (`queue_timeout`) for the rest; past both,
/// a call is refused (shed) at once. The caller asks `admit` before it starts a call
/// and calls `release` exactly once for every slot it got (admitted or granted), with
/// the call's round trip when it has one.
///
/// Loop thread only; the clock and the timer are passed in (`now`, `wakeAt`), so the
/// logic runs on a fake clock in tests. Its figures go to `ConcurrencyCounters` for
/// `/stats` (the admin loop reads them).
final class ConcurrencyLimiter {
    enum Admission: Equatable {
        /// A slot is the caller's now.
        case admitted
        /// The caller waits; it is told through its `ConcurrencyWaiter`.
        case queued
        /// Refused: no slot, no room in the queue.
        case shed
    }

    let config: ConcurrencyConfig
    let counters: ConcurrencyCounters
    private var controller: GradientController?
    private(set) var inFlight = 0
    /// Waiters in arrival order from `head` on, each with its deadline; a waiter that
    /// left is nil in its place. Compacted when the dead front passes half.
    private var waiters: [(waiter: ConcurrencyWaiter?, deadline: UInt64)] = []
    private var head = 0
    private(set) var queued = 0
    /// `grant` is running further up the stack.
    private var granting = false
    private let now: () -> UInt64
    /// Asks to be woken (`expire`) at a monotonic time; nil: only admissions and
    /// releases expire waiters (tests drive `expire` themselves).
    private let wakeAt: ((UInt64) -> Void)?
    private let queueTimeoutNanos: UInt64

    init(_ config: ConcurrencyConfig, counters: ConcurrencyCounters = ConcurrencyCounters(),
         now: @escaping () -> UInt64 = Clock.monotonicNanos, wakeAt: ((UInt64) -> Void)? = nil) {
        self.config = config
        self.counters = counters
        self.now = now
        self.wakeAt = wakeAt
        queueTimeoutNanos = UInt64(config.queueTimeoutMillis) * 1_000_000
        controller = config.adaptive.map { GradientController($0, maxLimit: config.max, nowNanos: now()) }
        counters.setLimit(limit)
    }

    /// Calls allowed in flight now.
    var limit: Int { controller?.limit ?? config.max }
    /// The adaptive controller's last minRTT and sample RTT (nil without `adaptive`).
    var roundTrips: (minRTT: UInt64?, sample: UInt64?)? { controller.map { ($0.minRTTNanos, $0.sampleRTTNanos) } }

    /// May a call start? `waiter` is queued when no slot is free and the queue has room.
    func admit(_ waiter: ConcurrencyWaiter) -> Admission {
        let t = now()
        if controller != nil {
            controller!.advance(inFlight: inFlight + 1, nowNanos: t)   // with the call asking
            counters.setLimit(limit)
            grant()   // the limit may have grown
        }
        expire(at: t)
        if inFlight < limit && queued == 0 {
            take()
            return .admitted
        }
        guard queued < config.queue else {
            counters.shed()
            return .shed
        }
        let first = queued == 0
        waiters.append((waiter, t &+ queueTimeoutNanos))
        queued += 1
        counters.addQueued(1)
        if first { wakeAt?(t &+ queueTimeoutNanos) }
        return .queued
    }

    /// A slot comes back (the call ended, whichever way); `rttNanos`: its round trip, for
    /// the adaptive limit (nil when it has none: cancelled, failed before an answer).
    /// Hands freed slots to the waiters in order.
    func release(rttNanos: UInt64? = nil) {
        precondition(inFlight > 0, "a concurrency slot released twice")
        inFlight -= 1
        counters.addInFlight(-1)
        let t = now()
        if controller != nil {
            // The calls in flight as this one ended, itself included.
            if let rtt = rttNanos { controller!.record(rttNanos: rtt, inFlight: inFlight + 1, nowNanos: t) } else { controller!.advance(inFlight: inFlight + 1, nowNanos: t) }
            counters.setLimit(limit)
            if let r = roundTrips { counters.setRoundTrips(minRTT: r.minRTT, sample: r.sample) }
        }
        expire(at: t)
        grant()
    }

    /// A queued waiter gave up (its client left): it leaves the queue and is not told.
    func leave(_ waiter: ConcurrencyWaiter) {
        for i in head..<waiters.count where waiters[i].waiter === waiter {
            waiters[i].waiter = nil
            queued -= 1
            counters.addQueued(-1)
            return
        }
    }

    /// Refuses the waiters whose `queue_timeout` passed; re-arms the wake-up for the
    /// next one. Called by the timer, and before each admission and release.
    func expire() {
        expire(at: now())
        if let next = nextDeadline { wakeAt?(next) }
    }

    /// When the first live waiter's wait ends (nil: nobody waits).
    var nextDeadline: UInt64? {
        var i = head
        while i < waiters.count {
            if waiters[i].waiter != nil { return waiters[i].deadline }
            i += 1
        }
        return nil
    }

    private func expire(at t: UInt64) {
        while let (w, deadline) = front(), deadline <= t {
            pop()
            counters.shed()
            w.concurrencyQueueTimedOut()   // may re-enter (admit, release): state is settled
        }
    }

    /// Gives free slots to the waiters, first come first served. A waiter whose call
    /// ends inside its grant (no IP to send to) releases from within this loop: that
    /// release only counts, and this loop hands the slot on, so a long queue of such
    /// calls is a loop, not a recursion as deep as the queue.
    private func grant() {
        guard !granting else { return }
        granting = true
        defer { granting = false }
        while inFlight < limit, let (w, _) = front() {
            pop()
            take()
            w.concurrencySlotGranted()     // may re-enter: state is settled
        }
    }

    private func take() {
        inFlight += 1
        counters.addInFlight(1)
    }

    /// The first live waiter, dead ones before it dropped.
    private func front() -> (ConcurrencyWaiter, UInt64)? {
        while head < waiters.count {
            if let w = waiters[head].waiter { return (w, waiters[head].deadline) }
            head += 1
        }
        compact()
        return nil
    }

    private func pop() {
        waiters[head].waiter = nil
        head += 1
        queued -= 1
        counters.addQueued(-1)
        compact()
    }

    private func compact() {
        if head == waiters.count {
            waiters.removeAll(keepingCapacity: waiters.capacity <= 64)
            head = 0
        } else if head > 32 && head * 2 > waiters.count {
            waiters.removeFirst(head)
            head = 0
        }
    }
}
