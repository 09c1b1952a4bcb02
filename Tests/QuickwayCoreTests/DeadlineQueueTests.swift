import XCTest
@testable import QuickwayCore

/// `DeadlineQueue`: the upstream calls' deadlines on one timer. Entries fire in deadline
/// order whatever lane they wait in, never before their deadline, never after they were
/// disarmed or freed, and may arm again from their own callback. Run on a real loop.
final class DeadlineQueueTests: XCTestCase {
    /// Records when it fired (coarse milliseconds) into a shared log.
    final class Probe: DeadlineEntry {
        let name: String
        let log: FireLog
        var armedAt: Int64 = 0
        var rearmOnce: (DeadlineQueue, Int64)?
        init(_ name: String, _ log: FireLog) {
            self.name = name
            self.log = log
        }
        override func deadlinePassed() {
            log.fired.append((name, Clock.coarseMillis() - armedAt))
            if let (queue, millis) = rearmOnce {
                rearmOnce = nil
                armedAt = Clock.coarseMillis()
                queue.arm(self, afterMillis: millis)
            }
        }
    }

    final class FireLog { var fired: [(String, Int64)] = [] }

    private func arm(_ q: DeadlineQueue, _ p: Probe, _ millis: Int64) {
        p.armedAt = Clock.coarseMillis()
        q.arm(p, afterMillis: millis)
    }

    func testEntriesFireInDeadlineOrderAcrossLanesAndNeverEarly() throws {
        let loop = try LoopHarness()
        defer { loop.stop() }
        let log = FireLog()
        let q = loop.onLoop { DeadlineQueue(base: loop.worker.base) }
        let probes = ["a300": 300, "b100": 100, "c100": 100, "d40": 40, "e200": 200].map { (Probe($0.key, log), Int64($0.value)) }
        loop.onLoop {
            // Armed in this order: b100 before c100 in the same lane.
            for name in ["a300", "b100", "c100", "d40", "e200"] {
                let (p, ms) = probes.first { $0.0.name == name }!
                self.arm(q, p, ms)
            }
        }
        loop.wait(seconds: 5, "all five fired") { log.fired.count == 5 }
        XCTAssertEqual(log.fired.map(\.0), ["d40", "b100", "c100", "e200", "a300"])
        for (name, waited) in log.fired {
            let ms = probes.first { $0.0.name == name }!.1
            XCTAssertGreaterThanOrEqual(waited, ms, "\(name) fired \(waited) ms after it was armed")
        }
        XCTAssertEqual(loop.onLoop { q.count }, 0)
        loop.onLoop { q.shutdown() }
    }

    func testADisarmedEntryNeverFiresAndTheOthersStillDo() throws {
        let loop = try LoopHarness()
        defer { loop.stop() }
        let log = FireLog()
        let q = loop.onLoop { DeadlineQueue(base: loop.worker.base) }
        let early = Probe("early", log), gone = Probe("gone", log), late = Probe("late", log)
        loop.onLoop {
            // The disarmed one is the lane's head and the timer's target.
            self.arm(q, gone, 30)
            self.arm(q, early, 60)
            self.arm(q, late, 120)
            XCTAssertTrue(gone.isArmed)
            q.disarm(gone)
            XCTAssertFalse(gone.isArmed)
        }
        loop.wait(seconds: 5, "the late one fired") { log.fired.contains { $0.0 == "late" } }
        XCTAssertEqual(log.fired.map(\.0), ["early", "late"])
        loop.onLoop { q.shutdown() }
    }

    func testAnEntryFreedWhileWaitingLeavesItsLane() throws {
        let loop = try LoopHarness()
        defer { loop.stop() }
        let log = FireLog()
        let q = loop.onLoop { DeadlineQueue(base: loop.worker.base) }
        let kept = Probe("kept", log)
        loop.onLoop {
            var first: Probe? = Probe("freed-first", log)
            self.arm(q, first!, 50)
            var middle: Probe? = Probe("freed-middle", log)
            self.arm(q, kept, 50)
            self.arm(q, middle!, 50)
            self.arm(q, Probe("freed-last", log), 50)   // no reference left at all
            XCTAssertEqual(q.count, 3, "the last one was freed as soon as it was armed")
            first = nil
            middle = nil
            XCTAssertEqual(q.count, 1)
        }
        loop.wait(seconds: 5, "the kept one fired") { !log.fired.isEmpty }
        XCTAssertEqual(log.fired.map(\.0), ["kept"])
        loop.onLoop { q.shutdown() }
    }

    func testAnEntryMayArmAgainFromItsCallback() throws {
        let loop = try LoopHarness()
        defer { loop.stop() }
        let log = FireLog()
        let q = loop.onLoop { DeadlineQueue(base: loop.worker.base) }
        let p = Probe("again", log)
        p.rearmOnce = (q, 40)
        loop.onLoop { self.arm(q, p, 20) }
        loop.wait(seconds: 5, "fired twice") { log.fired.count == 2 }
        XCTAssertEqual(log.fired.map(\.0), ["again", "again"])
        XCTAssertGreaterThanOrEqual(log.fired[1].1, 40)
        loop.onLoop { q.shutdown() }
    }
}
