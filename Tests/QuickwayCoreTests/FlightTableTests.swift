import Foundation
import XCTest
@testable import QuickwayCore

/// The flight table from several threads at once, with real workers (each its own event
/// loop thread) so the upstream cancel really is posted across threads. Also run under
/// ThreadSanitizer by scripts/dev/tsan.sh.
final class FlightTableTests: XCTestCase {
    private var workers: [Worker] = []
    /// Each worker's loop thread.
    private var loopThreads: [pthread_t] = []

    override func setUpWithError() throws {
        for i in 0..<3 {
            let w = try Worker(id: i, name: "flight-test-\(i)", limits: LimitsConfig(), maxConnections: 4, routeCount: 0)
            w.start()
            workers.append(w)
            let seen = Cancels()
            w.post { seen.closure(0) }
            settle(w)
            XCTAssertEqual(seen.threadsSeen.count, 1)
            loopThreads.append(seen.threadsSeen.first ?? pthread_self())
        }
    }

    override func tearDown() {
        for w in workers { w.requestDrain() }
        for w in workers { w.join() }
        workers = []
        loopThreads = []
    }

    /// Waits until everything posted to `w` so far has run.
    private func settle(_ w: Worker) {
        let done = DispatchSemaphore(value: 0)
        w.post { done.signal() }
        XCTAssertEqual(done.wait(timeout: .now() + 10), .success, "\(w.name) did not run its mailbox")
    }

    /// Counts cancels per round and remembers the threads they ran on.
    private final class Cancels: @unchecked Sendable {
        private let lock = NSLock()
        private var byClosure: [Int: Int] = [:]
        private var byLeaderLeft: [Int: Int] = [:]
        private var threads: Set<pthread_t> = []
        func closure(_ round: Int) {
            let me = pthread_self()
            lock.lock(); byClosure[round, default: 0] += 1; threads.insert(me); lock.unlock()
        }
        func leaderLeft(_ round: Int) { lock.lock(); byLeaderLeft[round, default: 0] += 1; lock.unlock() }
        func counts(_ round: Int) -> (closure: Int, leaderLeft: Int) {
            lock.lock(); defer { lock.unlock() }
            return (byClosure[round] ?? 0, byLeaderLeft[round] ?? 0)
        }
        var threadsSeen: Set<pthread_t> { lock.lock(); defer { lock.unlock() }; return threads }
    }

    private func key(_ round: Int) -> [UInt8] { Array("GET /flight/\(round)".utf8) }

    /// The leader's side races every waiter leaving on other threads. The leader's side is
    /// one of two orders, as in ForwardStage and ProxyPipeline.clientLeft: its call starts (the cancel is set), then its
    /// client leaves; or (with a shared tier) its client leaves while the tier is asked,
    /// then the call starts if anyone still waited. Whatever the interleaving, the
    /// upstream call is cancelled exactly once: by the leader itself when nobody waits at
    /// the time its client leaves, else by the cancel closure, run on the leader's worker.
    func testLastOneOutCancelsExactlyOnceOnTheLeadersWorker() {
        let table = FlightTable()
        let cancels = Cancels()
        let leaderWorker = workers[0]
        let rounds = 2000
        let waiterCount = 4
        for round in 0..<rounds {
            guard case .leader(let flight) = table.join(key(round), worker: leaderWorker, maxWaiters: 16, deliver: { _ in }) else {
                return XCTFail("round \(round): not the leader")
            }
            var ids: [Int] = []
            for i in 0..<waiterCount {
                guard case .waiter(let f, let id) = table.join(key(round), worker: workers[1 + i % 2], maxWaiters: 16, deliver: { _ in }) else {
                    return XCTFail("round \(round): not a waiter")
                }
                XCTAssertTrue(f === flight)
                ids.append(id)
            }
            // The leader's part takes a different slot each round, so it runs first in
            // some rounds and last in others.
            let leaderSlot = round % (waiterCount + 1)
            let waiterIds = ids   // an immutable copy for the concurrent closure
            DispatchQueue.concurrentPerform(iterations: waiterCount + 1) { i in
                if i == leaderSlot && round % 2 == 0 {
                    table.setCancelUpstream(flight) { cancels.closure(round) }
                    if !table.leaderLeft(flight) { cancels.leaderLeft(round) }
                } else if i == leaderSlot {
                    if table.leaderLeft(flight) {
                        usleep(UInt32.random(in: 0...40))  // the shared tier is asked meanwhile
                        table.setCancelUpstream(flight) { cancels.closure(round) }
                    } else {
                        cancels.leaderLeft(round)
                    }
                } else {
                    table.leave(flight, id: waiterIds[i < leaderSlot ? i : i - 1])
                }
            }
        }
        settle(leaderWorker)
        var viaClosure = 0
        for round in 0..<rounds {
            let c = cancels.counts(round)
            XCTAssertEqual(c.closure + c.leaderLeft, 1, "round \(round): cancelled \(c.closure) time(s) by the closure, \(c.leaderLeft) by the leader")
            viaClosure += c.closure
        }
        XCTAssertEqual(cancels.threadsSeen.subtracting([loopThreads[0]]), [], "the cancel ran off the leader's worker")
        XCTAssertGreaterThan(viaClosure, 0, "no round was cancelled by the last waiter: nothing raced")
        XCTAssertLessThan(viaClosure, rounds, "no round was cancelled by the leader: nothing raced")
        print("FlightTableTests: \(viaClosure) of \(rounds) rounds cancelled by the last waiter, the rest by the leader")
    }

    /// Everybody left before the leader's call started (it was waiting for the shared
    /// tier): the cancel set afterwards runs at once, on the leader's worker.
    func testCancelSetAfterEverybodyLeftRunsAtOnce() {
        let table = FlightTable()
        let cancels = Cancels()
        guard case .leader(let flight) = table.join(key(0), worker: workers[0], maxWaiters: 4, deliver: { _ in }),
              case .waiter(_, let id) = table.join(key(0), worker: workers[1], maxWaiters: 4, deliver: { _ in }) else {
            return XCTFail("join")
        }
        XCTAssertTrue(table.leaderLeft(flight), "a waiter is still there")
        let t = Thread { table.leave(flight, id: id) }
        t.start()
        while !t.isFinished { usleep(1000) }
        table.setCancelUpstream(flight) { cancels.closure(0) }
        settle(workers[0])
        XCTAssertEqual(cancels.counts(0).closure, 1)
        XCTAssertEqual(cancels.threadsSeen, [loopThreads[0]])
    }

    /// An answer landing while waiters and the leader leave: the flight is either
    /// answered (no cancel) or abandoned (one cancel), never both, never twice; every
    /// waiter still there when it lands is handed the answer on its own worker.
    func testFinishRacingLeavesCancelsAtMostOnce() {
        let table = FlightTable()
        let cancels = Cancels()
        let delivered = Cancels()
        let rounds = 1000
        for round in 0..<rounds {
            guard case .leader(let flight) = table.join(key(round), worker: workers[0], maxWaiters: 16, deliver: { _ in }) else {
                return XCTFail("round \(round): not the leader")
            }
            var ids: [Int] = []
            for i in 0..<3 {
                guard case .waiter(_, let id) = table.join(key(round), worker: workers[1 + i % 2], maxWaiters: 16,
                                                           deliver: { _ in delivered.closure(round) }) else {
                    return XCTFail("round \(round): not a waiter")
                }
                ids.append(id)
            }
            table.setCancelUpstream(flight) { cancels.closure(round) }
            let waiterIds = ids   // an immutable copy for the concurrent closure
            DispatchQueue.concurrentPerform(iterations: 5) { i in
                switch i {
                case 0: _ = table.leaderLeft(flight)
                case 1: table.finish(flight, .goUpstream)
                default: table.leave(flight, id: waiterIds[i - 2])
                }
            }
        }
        for w in workers { settle(w) }
        for round in 0..<rounds {
            let c = cancels.counts(round).closure
            XCTAssertLessThanOrEqual(c, 1, "round \(round)")
            if c == 1 { XCTAssertEqual(delivered.counts(round).closure, 0, "round \(round): abandoned and answered") }
        }
        XCTAssertEqual(table.figures.leaders, Int64(rounds))
        XCTAssertEqual(cancels.threadsSeen.subtracting([loopThreads[0]]), [])
        XCTAssertEqual(delivered.threadsSeen.subtracting([loopThreads[1], loopThreads[2]]), [])
    }
}
