import XCTest
@testable import QuickwayCore

/// The purge log's entries and the catch-up decision (`PurgeLog.plan`): which missed
/// purges a gateway replays, and when it must drop its whole local tier instead. The
/// expectations follow the rule in docs: every epoch after the last applied one must be
/// in the log, in order, or nothing short of dropping everything is safe.
final class PurgeLogTests: XCTestCase {
    private func entry(_ e: Int64, _ prefix: String = "/p/") -> PurgeLog.Entry {
        PurgeLog.Entry(epoch: e, purge: .prefix(Array(prefix.utf8)))
    }

    func testEntriesParseAndForeignBytesDoNot() throws {
        let e = try XCTUnwrap(PurgeLog.Entry(Array("42:p/catalog/".utf8)))
        XCTAssertEqual(e.epoch, 42)
        XCTAssertEqual(e.purge, .prefix(Array("/catalog/".utf8)))
        XCTAssertEqual(PurgeLog.Entry(Array("7:a".utf8))?.purge, .all)
        // A key with a colon in it stays whole (the epoch ends at the first colon).
        XCTAssertEqual(PurgeLog.Entry(Array("3:kGET h/x:y?".utf8))?.purge, .key(Array("GET h/x:y?".utf8)))
        for bad in ["p/catalog/", ":a", "0:a", "-1:a", "1a:a", "12:", "12:x", "99999999999999999999:a", "1:aa"] {
            XCTAssertNil(PurgeLog.Entry(Array(bad.utf8)), bad)
        }
    }

    func testSnapshotReadsTheScriptsReply() throws {
        let reply = RedisReply.array([.string(Array("5".utf8)), .array([.string(Array("4:a".utf8)), .string(Array("5:p/x".utf8)), .string(Array("junk".utf8))])])
        let s = try XCTUnwrap(PurgeLog.Snapshot(reply))
        XCTAssertEqual(s.epoch, 5)
        XCTAssertEqual(s.entries.map(\.epoch), [4, 5])
        XCTAssertNil(PurgeLog.Snapshot(.array([.string(Array("x".utf8)), .array([])])))
        XCTAssertNil(PurgeLog.Snapshot(.unavailable("down")))
        XCTAssertEqual(PurgeLog.Snapshot(.array([.string(Array("0".utf8)), .array([])]))?.epoch, 0)
    }

    func testPlanReplaysExactlyWhatWasMissed() {
        let log = PurgeLog.Snapshot(epoch: 10, entries: (6...10).map { entry($0) })
        XCTAssertEqual(PurgeLog.plan(applied: 10, log), .upToDate)
        XCTAssertEqual(PurgeLog.plan(applied: 7, log), .replay([entry(8), entry(9), entry(10)]))
        XCTAssertEqual(PurgeLog.plan(applied: 5, log), .replay((6...10).map { entry($0) }))
    }

    func testPlanDropsEverythingWhenTheLogDoesNotReachBack() {
        let log = PurgeLog.Snapshot(epoch: 10, entries: (6...10).map { entry($0) })
        // Trimmed: epoch 5 is gone.
        guard case .dropAll = PurgeLog.plan(applied: 4, log) else { return XCTFail("trimmed log replayed") }
        // An entry missing in the middle (say it did not parse).
        let holed = PurgeLog.Snapshot(epoch: 10, entries: [entry(8), entry(10)])
        guard case .dropAll = PurgeLog.plan(applied: 7, holed) else { return XCTFail("hole replayed") }
        // Redis lost its data (epoch behind ours), or the log is empty though we are behind.
        guard case .dropAll = PurgeLog.plan(applied: 12, log) else { return XCTFail("epoch went back") }
        guard case .dropAll = PurgeLog.plan(applied: 3, PurgeLog.Snapshot(epoch: 4, entries: [])) else { return XCTFail("empty log") }
    }

    func testRecordedKeysShareOneHashSlot() {
        var c = RedisConfig(url: "redis://h", endpoint: RedisEndpoint(host: "h"))
        c.keyPrefix = "shop:"
        let k = PurgeLog.keys(c)
        XCTAssertEqual(k.epoch, Array("shop:{purge}:epoch".utf8))
        XCTAssertEqual(k.log, Array("shop:{purge}:log".utf8))
        XCTAssertEqual(PurgeLog.eventChannel(c), Array("shop:purge:events".utf8))
    }
}
