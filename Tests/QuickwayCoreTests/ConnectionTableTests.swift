import XCTest
@testable import QuickwayCore

/// The worker's connection table: slots stay consistent through removals from any
/// position and replacements, and a walk from the last slot survives a visit that
/// closes the visited connection.
final class ConnectionTableTests: XCTestCase {
    private final class Fake: ClientConnection {
        let id: Int
        var tableSlot: Int32 = -1
        var onCheck: ((Fake) -> Void)?
        var checks = 0
        init(_ id: Int) { self.id = id }
        func readNow() {}
        func checkDeadline(_ now: Int64) { checks += 1; onCheck?(self) }
        func drain() {}
        func closeNow() {}
    }

    private func ids(_ t: ConnectionTable) -> Set<Int> {
        Set(t.snapshot().map { ($0 as! Fake).id })
    }

    func testRemovalFromAnySlotKeepsEveryOtherConnectionFindable() {
        var t = ConnectionTable()
        let fakes = (0..<10).map(Fake.init)
        for f in fakes { t.add(f) }
        XCTAssertNotNil(t.remove(fakes[3]))   // middle: the last moves into slot 3
        XCTAssertNotNil(t.remove(fakes[9]))   // was moved: found through its new slot
        XCTAssertNotNil(t.remove(fakes[0]))
        XCTAssertNil(t.remove(fakes[0]), "a second removal finds nothing")
        XCTAssertEqual(ids(t), [1, 2, 4, 5, 6, 7, 8])
        for i in 0..<t.count { XCTAssertEqual(Int(t[i].tableSlot), i) }
        XCTAssertEqual(fakes[3].tableSlot, -1)
        for f in fakes where ![0, 3, 9].contains(f.id) { XCTAssertTrue(t.contains(f)) }
        XCTAssertFalse(t.contains(fakes[3]))
    }

    func testReplaceTakesTheSlotAndRefusesAStranger() {
        var t = ConnectionTable()
        let a = Fake(1), b = Fake(2), c = Fake(3), stranger = Fake(4)
        t.add(a); t.add(b)
        XCTAssertTrue(t.replace(a, with: c) === a)
        XCTAssertTrue(t.contains(c))
        XCTAssertFalse(t.contains(a))
        XCTAssertNil(t.replace(stranger, with: Fake(5)))
        XCTAssertEqual(ids(t), [2, 3])
        // A connection removed from one table is not mistaken for the entry in its old slot.
        var other = ConnectionTable()
        other.add(stranger)
        XCTAssertFalse(t.contains(stranger))
    }

    func testBackwardWalkVisitsEachOnceWhenVisitedOnesRemoveThemselves() {
        var t = ConnectionTable()
        let fakes = (0..<50).map(Fake.init)
        for f in fakes { t.add(f) }
        // Every third connection closes during its visit, as a timed-out one does.
        for f in fakes where f.id % 3 == 0 { f.onCheck = { t.remove($0) } }
        var i = t.count - 1
        while i >= 0 {
            if i < t.count { t[i].checkDeadline(0) }
            i -= 1
        }
        XCTAssertTrue(fakes.allSatisfy { $0.checks == 1 }, "\(fakes.map(\.checks))")
        XCTAssertEqual(t.count, 50 - 17)
        for f in fakes { XCTAssertEqual(t.contains(f), f.id % 3 != 0) }
    }
}
