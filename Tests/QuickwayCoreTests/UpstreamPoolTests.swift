import XCTest
import Glibc
import CLibevent
@testable import QuickwayCore

/// The per-worker pool of idle upstream connections: most recent first, per IP, idle
/// ones closed by the sweep, and a connection whose IP list the sweep forgot still
/// goes back where `take` finds it.
final class UpstreamPoolTests: XCTestCase {
    private var base: OpaquePointer!
    private var peers: [Int32] = []

    override func setUp() { base = event_base_new() }
    override func tearDown() {
        for fd in peers { close(fd) }
        event_base_free(base)
    }

    /// A connection on one end of a socket pair (the other end stays open: it is silent).
    private func connection(_ member: UpstreamMember, _ pool: UpstreamPool) -> UpstreamConnection {
        var fds: [Int32] = [0, 0]
        XCTAssertEqual(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds), 0)
        peers.append(fds[1])
        return UpstreamConnection(fd: fds[0], memberKey: ObjectIdentifier(member), pool: pool, base: base)
    }

    private func member(_ ip: String) -> UpstreamMember {
        UpstreamMember(ip: ip, service: ServiceConfig(name: "svc", host: "svc.local"), startsUp: true)
    }

    func testTakeGivesTheMostRecentConnectionOfThatIPOnly() {
        let pool = UpstreamPool()
        let a = member("127.0.0.2"), b = member("127.0.0.3")
        let a1 = connection(a, pool), a2 = connection(a, pool), b1 = connection(b, pool)
        pool.put(a1); pool.put(b1); pool.put(a2)
        XCTAssertTrue(pool.take(a) === a2)
        XCTAssertTrue(pool.take(a, checkAlive: true) === a1)
        XCTAssertNil(pool.take(a))
        XCTAssertTrue(pool.take(b) === b1)
        pool.closeAll()
    }

    func testSweepClosesIdleOnesAndAForgottenListIsFoundAgain() {
        let pool = UpstreamPool()
        let a = member("127.0.0.2")
        let old = connection(a, pool), busy = connection(a, pool)
        pool.put(busy)
        XCTAssertTrue(pool.take(a) === busy)   // busy now remembers its list
        pool.put(old)
        let now = Clock.coarseMillis()
        // `old` idles past the timeout: closed, and its IP's list, now empty, forgotten.
        pool.sweep(nowMillis: now + UpstreamPool.idleTimeoutMillis + 1)
        XCTAssertTrue(old.isClosed)
        XCTAssertNil(pool.take(a))
        // The busy one comes back to a list the pool no longer has: it must still be found.
        pool.put(busy)
        XCTAssertTrue(pool.take(a) === busy)
        XCTAssertFalse(busy.isClosed)
        pool.closeAll()
    }

    func testCloseAllClosesEveryIdleConnection() {
        let pool = UpstreamPool()
        let a = member("127.0.0.2")
        let cs = (0..<3).map { _ in connection(a, pool) }
        for c in cs { pool.put(c) }
        pool.closeAll()
        XCTAssertTrue(cs.allSatisfy(\.isClosed))
        XCTAssertNil(pool.take(a))
        // A call that ends after the shutdown: its connection is closed, not kept.
        let late = connection(a, pool)
        pool.put(late)
        XCTAssertTrue(late.isClosed)
        XCTAssertNil(pool.take(a))
    }
}
