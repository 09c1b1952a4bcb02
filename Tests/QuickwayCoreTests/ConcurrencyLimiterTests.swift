import XCTest
@testable import QuickwayCore

/// The limiter on a fake clock, with waiters that record what they were told:
/// admissions up to the limit, a queue bounded in count and time, FIFO grants, waiters
/// that leave, and the counters `/stats` reads.
final class ConcurrencyLimiterTests: XCTestCase {
    private final class Waiter: ConcurrencyWaiter {
        var granted = 0, timedOut = 0
        var onGrant: (() -> Void)?
        func concurrencySlotGranted() { granted += 1; onGrant?() }
        func concurrencyQueueTimedOut() { timedOut += 1 }
    }

    private let ms: UInt64 = 1_000_000
    private var now: UInt64 = 5_000_000_000
    private var wakeUps: [UInt64] = []

    private func limiter(max: Int, queue: Int = 0, timeoutMillis: Int64 = 50) -> ConcurrencyLimiter {
        var c = ConcurrencyConfig(max: max)
        c.queue = queue
        c.queueTimeoutMillis = timeoutMillis
        return ConcurrencyLimiter(c, now: { [unowned self] in self.now }, wakeAt: { [unowned self] in self.wakeUps.append($0) })
    }

    func testCallsPastTheLimitAreShedAtOnceWithoutAQueue() {
        let l = limiter(max: 2)
        let (a, b, c) = (Waiter(), Waiter(), Waiter())
        XCTAssertEqual(l.admit(a), .admitted)
        XCTAssertEqual(l.admit(b), .admitted)
        XCTAssertEqual(l.admit(c), .shed)
        XCTAssertEqual(l.counters.figures, ConcurrencyFigures(limit: 2, inFlight: 2, queued: 0, shed: 1))
        l.release()
        XCTAssertEqual(l.inFlight, 1)
        XCTAssertEqual(l.admit(c), .admitted, "a freed slot is taken by the next call")
        l.release(); l.release()
        XCTAssertEqual(l.counters.figures.inFlight, 0)
    }

    func testAQueuedCallGetsTheNextFreedSlotInArrivalOrder() {
        let l = limiter(max: 1, queue: 2)
        let (a, b, c, d) = (Waiter(), Waiter(), Waiter(), Waiter())
        XCTAssertEqual(l.admit(a), .admitted)
        XCTAssertEqual(l.admit(b), .queued)
        XCTAssertEqual(l.admit(c), .queued)
        XCTAssertEqual(l.admit(d), .shed, "the queue holds 2")
        XCTAssertEqual(wakeUps, [now + 50 * ms], "a wake-up for the first waiter's deadline")
        XCTAssertEqual(l.counters.figures.queued, 2)
        l.release()
        XCTAssertEqual([b.granted, c.granted], [1, 0], "first come, first served")
        XCTAssertEqual(l.inFlight, 1)
        l.release()
        XCTAssertEqual(c.granted, 1)
        l.release()
        XCTAssertEqual(l.counters.figures, ConcurrencyFigures(limit: 1, inFlight: 0, queued: 0, shed: 1))
    }

    func testANewCallDoesNotOvertakeTheQueue() {
        let l = limiter(max: 1, queue: 1)
        let (a, b, c) = (Waiter(), Waiter(), Waiter())
        XCTAssertEqual(l.admit(a), .admitted)
        XCTAssertEqual(l.admit(b), .queued)
        l.release()   // b takes it
        XCTAssertEqual(l.admit(c), .queued)
        XCTAssertEqual(b.granted, 1)
    }

    func testAWaitPastTheQueueTimeoutIsRefused() {
        let l = limiter(max: 1, queue: 4, timeoutMillis: 50)
        let (a, b, c) = (Waiter(), Waiter(), Waiter())
        XCTAssertEqual(l.admit(a), .admitted)
        XCTAssertEqual(l.admit(b), .queued)
        now += 20 * ms
        XCTAssertEqual(l.admit(c), .queued)
        now += 31 * ms   // b waited 51 ms, c 31 ms
        l.expire()
        XCTAssertEqual([b.timedOut, c.timedOut], [1, 0])
        XCTAssertEqual(wakeUps.last, now - 31 * ms + 50 * ms, "re-armed for c's deadline")
        XCTAssertEqual(l.counters.figures.shed, 1)
        now += 20 * ms
        l.release()   // expiry runs first: c's wait is over too, so nobody gets the slot
        XCTAssertEqual([c.timedOut, c.granted], [1, 0])
        XCTAssertEqual(l.inFlight, 0)
        XCTAssertEqual(l.counters.figures, ConcurrencyFigures(limit: 1, inFlight: 0, queued: 0, shed: 2))
    }

    func testAWaiterThatLeavesIsNeitherGrantedNorCounted() {
        let l = limiter(max: 1, queue: 2)
        let (a, b, c) = (Waiter(), Waiter(), Waiter())
        _ = l.admit(a)
        _ = l.admit(b)
        _ = l.admit(c)
        l.leave(b)
        XCTAssertEqual(l.queued, 1)
        l.release()
        XCTAssertEqual([b.granted, b.timedOut, c.granted], [0, 0, 1])
        l.release()
        XCTAssertEqual(l.counters.figures, ConcurrencyFigures(limit: 1, inFlight: 0, queued: 0, shed: 0))
    }

    func testAGrantedWaiterThatEndsAtOnceHandsTheSlotOn() {
        let l = limiter(max: 1, queue: 3)
        let a = Waiter()
        let waiters = [Waiter(), Waiter(), Waiter()]
        _ = l.admit(a)
        for w in waiters {
            XCTAssertEqual(l.admit(w), .queued)
            w.onGrant = { [unowned l] in l.release() }   // its call fails at once
        }
        l.release()
        XCTAssertEqual(waiters.map(\.granted), [1, 1, 1])
        XCTAssertEqual(l.inFlight, 0)
        XCTAssertEqual(l.queued, 0)
    }

    func testALongQueueOfCallsThatEndAtOnceIsALoopNotARecursion() {
        let l = limiter(max: 1, queue: 50_000)
        _ = l.admit(Waiter())
        var depth = 0, deepest = 0
        let waiters = (0..<50_000).map { _ in Waiter() }
        for w in waiters {
            XCTAssertEqual(l.admit(w), .queued)
            w.onGrant = { [unowned l] in
                depth += 1
                deepest = max(deepest, depth)
                l.release()                  // its call fails at once (no IP up)
                depth -= 1
            }
        }
        l.release()
        XCTAssertEqual(waiters.filter { $0.granted == 1 }.count, 50_000)
        XCTAssertEqual(deepest, 1, "each grant returns before the next")
        XCTAssertEqual(l.inFlight, 0)
    }

    func testTheQueueMemoryStaysBoundedUnderChurn() {
        let l = limiter(max: 1, queue: 8)
        _ = l.admit(Waiter())
        for _ in 0..<10_000 {
            let w = Waiter()
            XCTAssertEqual(l.admit(w), .queued)
            l.leave(w)
        }
        XCTAssertEqual(l.queued, 0)
        XCTAssertNil(l.nextDeadline)
    }

    func testAnAdaptiveLimitStartsAtTheMinimumAndGrowsWithFastRoundTrips() {
        var c = ConcurrencyConfig(max: 50)
        var a = AdaptiveConcurrencyConfig()
        a.minLimit = 2
        a.minRTTRequests = 4
        c.adaptive = a
        let l = ConcurrencyLimiter(c, now: { [unowned self] in self.now })
        XCTAssertEqual(l.limit, 2)
        let w = Waiter()
        XCTAssertEqual(l.admit(w), .admitted)
        XCTAssertEqual(l.admit(w), .admitted)
        XCTAssertEqual(l.admit(w), .shed, "pinned to min_limit while minRTT is measured")
        l.release(rttNanos: 10 * ms)
        l.release(rttNanos: 10 * ms)
        for _ in 0..<40 {
            // Each window the calls fill the limit (a busy service), then end at the unloaded pace.
            while l.admit(w) == .admitted {}
            while l.inFlight > 0 { l.release(rttNanos: 10 * ms) }
            now += 101 * ms
        }
        XCTAssertEqual(l.limit, 50)
        XCTAssertEqual(l.counters.figures.limit, 50)
        XCTAssertEqual(l.counters.figures.minRTTMicros, 10_000)
    }
}
