import XCTest
@testable import QuickwayCore

/// `NonceTable` against a plain model (a `Set` and a FIFO of expiries): the same answers
/// for every claim and lookup, through growth, wrap-around probing, backward-shift
/// deletion and shrinking.
final class NonceTableTests: XCTestCase {
    /// A deterministic generator (SplitMix64), so a failure repeats.
    struct SplitMix { var state: UInt64; mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15; var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9; z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31) } }

    func testClaimsMatchAModelThroughGrowthDeletionAndShrinking() {
        var rng = SplitMix(state: 42)
        var table = NonceTable(limit: 5000)
        var model = Set<UInt64>()
        var fifo: [(UInt64, Int64)] = []
        var head = 0
        // Few distinct home slots (fingerprints drawn from a small pool of high bits) so
        // probe runs are long and wrap around the table's end.
        var issued: [UInt64] = []
        let ttl: Int64 = 50
        for now in Int64(0)..<4000 {
            table.expire(now: now)
            while head < fifo.count && fifo[head].1 <= now { model.remove(fifo[head].0); head += 1 }
            for _ in 0..<Int(rng.next() % 4) {
                let f: UInt64
                if !issued.isEmpty && rng.next() % 4 == 0 {
                    f = issued[Int(rng.next() % UInt64(issued.count))]   // a replay, live or expired
                } else {
                    f = ((rng.next() % 64) << 16 | (rng.next() & 0xFFFF) | (rng.next() << 24)) | 1
                    issued.append(f)
                }
                let expected: NonceTable.Claim = model.contains(f) ? .present : (model.count >= 5000 ? .full : .claimed)
                XCTAssertEqual(table.claim(f, expiry: now + ttl), expected, "claim at \(now)")
                if expected == .claimed { model.insert(f); fifo.append((f, now + ttl)) }
            }
            if now % 97 == 0 {
                for f in issued.suffix(200) { XCTAssertEqual(table.contains(f), model.contains(f)) }
            }
            XCTAssertEqual(table.count, model.count)
        }
        // Everything expires; the table shrinks back.
        table.expire(now: 1_000_000)
        XCTAssertEqual(table.count, 0)
        XCTAssertEqual(table.slotCount, 64)
        for f in issued.prefix(500) { XCTAssertFalse(table.contains(f)) }
    }

    func testAFullTableRefusesAndForgetsNothing() {
        var table = NonceTable(limit: 3)
        XCTAssertEqual(table.claim(0x10000, expiry: 10), .claimed)
        XCTAssertEqual(table.claim(0x20000, expiry: 10), .claimed)
        XCTAssertEqual(table.claim(0x30000, expiry: 11), .claimed)
        XCTAssertEqual(table.claim(0x40000, expiry: 11), .full)
        XCTAssertEqual(table.claim(0x10000, expiry: 11), .present, "a held one is still a replay when full")
        table.expire(now: 10)
        XCTAssertEqual(table.count, 1)
        XCTAssertFalse(table.contains(0x10000))
        XCTAssertTrue(table.contains(0x30000))
        XCTAssertEqual(table.claim(0x40000, expiry: 12), .claimed)
    }

    func testGrowsToHoldManyAndStaysAtMostHalfFull() {
        var table = NonceTable(limit: 100_000)
        var rng = SplitMix(state: 7)
        var all: [UInt64] = []
        for _ in 0..<100_000 {
            let f = rng.next() | 1
            all.append(f)
            XCTAssertEqual(table.claim(f, expiry: 1), .claimed)
        }
        XCTAssertEqual(table.count, 100_000)
        XCTAssertLessThanOrEqual(table.count * 2, table.slotCount)
        XCTAssertTrue(all.allSatisfy { table.contains($0) })
        XCTAssertEqual(table.claim(all[500], expiry: 1), .present)
    }
}
