import CLibevent

/// Something that can wait in a `DeadlineQueue`: subclassed by what keeps a deadline
/// (an upstream call), so that arming and disarming allocate nothing (the links are
/// the entry's own fields). Loop thread only.
///
/// Links: the lane holds its entries unretained, and an entry still in a lane when it is
/// freed takes itself out (`deinit`), so a lane never points at a freed entry. The entry
/// holds its lane (lanes outlive nothing they need).
class DeadlineEntry {
    /// Coarse monotonic milliseconds (`Clock.coarseMillis`) at which it is due.
    fileprivate(set) var deadline: Int64 = 0
    fileprivate var lane: DeadlineQueue.Lane?
    fileprivate unowned(unsafe) var previous: DeadlineEntry?
    fileprivate unowned(unsafe) var next: DeadlineEntry?

    init() {}

    deinit { if let lane { lane.unlink(self) } }

    /// Waiting in a queue.
    var isArmed: Bool { lane != nil }

    /// The deadline passed: called once, after the entry has left the queue (it may arm
    /// itself or others again).
    func deadlinePassed() {}
}

/// Deadlines of a worker's upstream calls on one libevent timer, instead of a timer
/// event, an object and a closure made and freed per call (three allocations and three
/// frees a request).
///
/// Entries that wait the same number of milliseconds fall due in the order they were
/// armed, so each such wait has its own FIFO lane, kept in order by appending: arming
/// and disarming are a few pointer moves. The timer is armed for the earliest head of any
/// lane; disarming never touches it (it may fire with nothing due, and re-arms for what
/// is). There are as many lanes as distinct waits in the configuration (one per
/// service timeout), so finding one is a short scan.
///
/// Precision: deadlines are counted on the coarse monotonic clock (a few milliseconds),
/// and an entry never fires before its deadline on that clock. Thread rule: the owning
/// worker's loop only.
final class DeadlineQueue {
    /// The entries waiting `millis`, oldest (earliest due) first.
    final class Lane {
        let millis: Int64
        fileprivate unowned(unsafe) var head: DeadlineEntry?
        fileprivate unowned(unsafe) var tail: DeadlineEntry?
        init(millis: Int64) { self.millis = millis }

        fileprivate func append(_ e: DeadlineEntry) {
            e.previous = tail
            e.next = nil
            if let t = tail { t.next = e } else { head = e }
            tail = e
        }

        fileprivate func unlink(_ e: DeadlineEntry) {
            if let p = e.previous { p.next = e.next } else { head = e.next }
            if let n = e.next { n.previous = e.previous } else { tail = e.previous }
            e.previous = nil
            e.next = nil
            e.lane = nil
        }
    }

    /// Loop-thread only: exempt from run-time exclusivity checks (one per armed deadline).
    /// `fire` walks it while a deadline's handler may arm another (`lane(for:)` may then
    /// append): safe because `for in` walks a copy; keep it so (not an index loop).
    @exclusivity(unchecked) private var lanes: [Lane] = []
    private var timer: OpaquePointer?
    /// The deadline the timer is set for (0: not set).
    private var timerDue: Int64 = 0

    init(base: OpaquePointer) {
        timer = event_new(base, -1, 0, deadlineQueueCallback, Unmanaged.passUnretained(self).toOpaque())
    }

    deinit { shutdown() }

    /// Frees the timer and empties the lanes (entries left waiting never fire). Call on
    /// the loop thread while the event base is alive (the owner's shutdown).
    func shutdown() {
        if let timer { event_free(timer) }
        timer = nil
        timerDue = 0
        for lane in lanes {
            while let e = lane.head { lane.unlink(e) }
        }
    }

    /// Entries waiting now (all lanes), for tests and stats.
    var count: Int {
        var n = 0
        for lane in lanes {
            var e = lane.head
            while let x = e { n += 1; e = x.next }
        }
        return n
    }

    /// Puts `e` in the queue, due `millis` from now (an entry already waiting is moved).
    func arm(_ e: DeadlineEntry, afterMillis millis: Int64) {
        if let lane = e.lane { lane.unlink(e) }
        let now = Clock.coarseMillis()
        let wait = max(millis, 1)
        e.deadline = now + wait
        let lane = self.lane(for: wait)
        e.lane = lane
        lane.append(e)
        if timerDue == 0 || e.deadline < timerDue { setTimer(due: e.deadline, now: now) }
    }

    /// Takes `e` out of the queue if it is waiting.
    func disarm(_ e: DeadlineEntry) {
        e.lane?.unlink(e)
    }

    private func lane(for millis: Int64) -> Lane {
        for lane in lanes where lane.millis == millis { return lane }
        let lane = Lane(millis: millis)
        lanes.append(lane)
        return lane
    }

    private func setTimer(due: Int64, now: Int64) {
        guard let timer else { return }
        timerDue = due
        var tv = EventLoopSupport.timeval(millis: max(due - now, 1))
        event_add(timer, &tv)
    }

    /// The timer fired: every entry now due leaves its lane and is told, then the timer
    /// is set for the earliest one left.
    fileprivate func fire() {
        timerDue = 0
        let now = Clock.coarseMillis()
        for lane in lanes {
            while let e = lane.head, e.deadline <= now {
                lane.unlink(e)
                e.deadlinePassed()   // `e` is held by this binding during the call
            }
        }
        var earliest = Int64.max
        for lane in lanes { if let e = lane.head, e.deadline < earliest { earliest = e.deadline } }
        if earliest != .max && (timerDue == 0 || earliest < timerDue) { setTimer(due: earliest, now: now) }
    }
}

private let deadlineQueueCallback: @convention(c) (Int32, Int16, UnsafeMutableRawPointer?) -> Void = { _, _, arg in
    Unmanaged<DeadlineQueue>.fromOpaque(arg!)._withUnsafeGuaranteedRef { $0.fire() }
}
