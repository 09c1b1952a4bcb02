import Foundation
import XCTest
@testable import QuickwayCore

/// Counters and flags several threads touch at once through the C atomic helpers
/// (`qw_shared_add`, `qw_flag_*`). Each must live at a stable address of its own: passed
/// as `&storedProperty` it is formally an exclusive access of the whole object's property
/// (and may be a temporary), which ThreadSanitizer reports as a race. Run under
/// ThreadSanitizer by scripts/dev/tsan.sh.
final class SharedCounterTests: XCTestCase {
    /// 4 threads x 100k take/release pairs on the gateway-wide budget: it ends at 0 and
    /// no take is refused while far below the limit.
    func testConnectionBudgetTakeReleaseFromFourThreads() {
        let budget = ConnectionBudget(limit: 1_000_000)
        let refused = Tally()
        DispatchQueue.concurrentPerform(iterations: 4) { _ in
            var n = 0
            for _ in 0..<100_000 {
                if budget.take() { budget.release() } else { n += 1 }
            }
            refused.add(n)
        }
        XCTAssertEqual(refused.value, 0)
        XCTAssertEqual(budget.current, 0)
        XCTAssertTrue(budget.hasRoom)
    }

    /// Takes only, then releases only, from 4 threads: the counts add up exactly.
    func testConnectionBudgetCountsExactly() {
        let budget = ConnectionBudget(limit: 1_000_000)
        DispatchQueue.concurrentPerform(iterations: 4) { _ in
            for _ in 0..<50_000 { XCTAssertTrue(budget.take()) }
        }
        XCTAssertEqual(budget.current, 200_000)
        DispatchQueue.concurrentPerform(iterations: 4) { _ in
            for _ in 0..<50_000 { budget.release() }
        }
        XCTAssertEqual(budget.current, 0)
    }

    /// At the limit, concurrent takers never hold more slots than the limit, and a
    /// refused take leaves nothing behind.
    func testConnectionBudgetNeverGrantsMoreThanTheLimit() {
        let limit = 8
        let budget = ConnectionBudget(limit: limit)
        let held = Tally()
        let most = Tally()
        DispatchQueue.concurrentPerform(iterations: 4) { _ in
            for _ in 0..<50_000 {
                guard budget.take() else { continue }
                most.max(held.add(1))
                held.add(-1)
                budget.release()
            }
        }
        XCTAssertLessThanOrEqual(most.value, limit)
        XCTAssertEqual(budget.current, 0)
        XCTAssertEqual(held.value, 0)
    }

    /// The log level is set by reloads (one thread) and read by every worker.
    func testLogLevelSetAndReadFromSeveralThreads() {
        let saved = Log.level
        defer { Log.level = saved }
        let levels: [LogLevel] = [.debug, .info, .warn, .error]
        DispatchQueue.concurrentPerform(iterations: 4) { i in
            for k in 0..<20_000 {
                if i == 0 { Log.level = levels[k % levels.count] } else { XCTAssertTrue(levels.contains(Log.level)) }
            }
        }
        Log.level = .warn
        XCTAssertEqual(Log.level, .warn)
    }

    /// A drain asked for from other threads (the signal thread) while the worker's loop
    /// reads the flag: the loop stops.
    func testWorkerDrainRequestedFromOtherThreads() throws {
        for round in 0..<20 {
            let w = try Worker(id: round, name: "drain-test-\(round)", limits: LimitsConfig(), maxConnections: 4, routeCount: 0)
            w.start()
            // Keep the loop busy reading its flag (every post runs `control`).
            DispatchQueue.concurrentPerform(iterations: 3) { i in
                for _ in 0..<200 { w.post {} }
                if i == 0 { w.requestDrain() }
            }
            let done = DispatchSemaphore(value: 0)
            Thread { w.join(); done.signal() }.start()
            XCTAssertEqual(done.wait(timeout: .now() + 10), .success, "round \(round): the worker did not stop")
        }
    }
}

/// A lock-guarded tally (the tests' own bookkeeping, not the code under test).
private final class Tally: @unchecked Sendable {
    private let lock = NSLock()
    private var n = 0
    @discardableResult
    func add(_ v: Int) -> Int { lock.lock(); defer { lock.unlock() }; n += v; return n }
    func max(_ v: Int) { lock.lock(); defer { lock.unlock() }; n = Swift.max(n, v) }
    var value: Int { lock.lock(); defer { lock.unlock() }; return n }
}
