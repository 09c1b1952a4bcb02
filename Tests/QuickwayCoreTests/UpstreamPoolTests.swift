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
    /// Stands for the connections' service (`serviceKey`).
    private let service = ServiceStandIn()

    private func connection(_ member: UpstreamMember, _ pool: UpstreamPool, keepalive: Int = 128) -> UpstreamConnection {
        var fds: [Int32] = [0, 0]
        XCTAssertEqual(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds), 0)
        _ = fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK)   // as libcurl's connected sockets are
        peers.append(fds[1])
        return UpstreamConnection(fd: fds[0], member: member, service: service,
                                  keepalive: keepalive, pool: pool)
    }

    private func member(_ ip: String) -> UpstreamMember {
        UpstreamMember(ip: ip, service: ServiceConfig(name: "svc", host: "svc.local"), startsUp: true)
    }

    func testTakeGivesTheMostRecentConnectionOfThatIPOnly() {
        let pool = UpstreamPool(base: base, buffers: nil)
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
        let pool = UpstreamPool(base: base, buffers: nil)
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
        let pool = UpstreamPool(base: base, buffers: nil)
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

    // MARK: the shared socket layer under upstream connections

    /// Runs the loop until `condition` holds (bounded by a count of non-blocking turns).
    private func turn(until condition: () -> Bool) -> Bool {
        for _ in 0..<200 {
            if condition() { return true }
            event_base_loop(base, EVLOOP_NONBLOCK)
            usleep(1000)
        }
        return condition()
    }

    private func get(_ path: String) -> UpstreamRequest {
        UpstreamRequest(method: Array("GET".utf8), isHead: false, hasBody: false, body: [], headers: UpstreamHeaders(),
                        pathAndQuery: ArraySlice(path.utf8), idempotent: true)
    }

    /// The request goes out through the connection's `TCPTransport` framed as RFC 9112
    /// says; the peer reads exactly those bytes, and `wroteAny` tells that some left.
    func testARequestIsFramedOntoTheSocket() {
        let pool = UpstreamPool(base: base, buffers: BufferPool())
        let c = connection(member("127.0.0.2"), pool)
        XCTAssertFalse(c.wroteAny)
        c.send(get("/a?b=1"), authority: Array("svc:80".utf8))
        XCTAssertTrue(c.wroteAny)
        XCTAssertFalse(c.hasPendingOutput)
        var got = [UInt8](repeating: 0, count: 256)
        let n = recv(peers.last!, &got, got.count, 0)
        XCTAssertEqual(String(decoding: got[0..<max(n, 0)], as: UTF8.self), "GET /a?b=1 HTTP/1.1\r\nHost: svc:80\r\n\r\n")
        pool.closeAll()
    }

    /// A connection idle in the pool past a sweep holds no buffer memory (the worker's
    /// stand-in takes the buffers' place; one handed straight to the next call keeps
    /// them), and one the upstream closes while idle leaves the pool on the loop turn
    /// that reads the close, before anyone sends on it.
    func testAnIdleConnectionHoldsNoBuffersAndIsDroppedWhenTheUpstreamCloses() {
        let buffers = BufferPool()
        let pool = UpstreamPool(base: base, buffers: buffers)
        let a = member("127.0.0.2")
        let c = connection(a, pool)
        c.send(get("/"), authority: Array("svc".utf8))
        XCTAssertFalse(c.transport.output.isStandIn, "sending took buffers of its own")
        pool.put(c)
        pool.sweep(nowMillis: c.idleSince + UpstreamPool.buffersBackAfterMillis - 1)
        XCTAssertFalse(c.transport.output.isStandIn, "just back in the pool: kept for the next call")
        pool.sweep(nowMillis: c.idleSince + UpstreamPool.buffersBackAfterMillis)
        XCTAssertTrue(c.transport.input.isStandIn && c.transport.output.isStandIn, "idle past a sweep: no buffers of its own")
        XCTAssertEqual(c.transport.input.heldBytes + c.transport.output.heldBytes, 0)
        close(peers.removeLast())
        XCTAssertTrue(turn { c.isClosed }, "the idle connection whose peer closed was not dropped")
        XCTAssertNil(pool.take(a))
        pool.closeAll()
    }

    /// Bytes an upstream sends on an idle connection unasked (they would be read as the
    /// next request's answer) drop it too. The pool holds the only reference, as in the
    /// gateway: dropping it from inside its own read must not free it under its feet.
    func testAnIdleConnectionTheUpstreamWritesToIsDropped() {
        let pool = UpstreamPool(base: base, buffers: BufferPool())
        let a = member("127.0.0.2")
        weak var c: UpstreamConnection?
        do {
            let strong = connection(a, pool)
            c = strong
            pool.put(strong)
        }
        XCTAssertNotNil(c, "the pool holds it")
        XCTAssertEqual(send(peers.last!, "HTTP/1.1 200 OK\r\n\r\n", 19, 0), 19)
        XCTAssertTrue(turn { c == nil }, "dropped and, at the end of that loop turn, freed")
        XCTAssertNil(pool.take(a))
        pool.closeAll()
    }

    /// A large request grows the connection's output buffer; back in the pool, the
    /// connection keeps at most one block of it, so a burst of large uploads does not
    /// stay pinned in pooled connections that the next calls keep busy.
    func testALargeRequestsBufferIsTrimmedWhenTheConnectionIsPooled() {
        let pool = UpstreamPool(base: base, buffers: BufferPool())
        let c = connection(member("127.0.0.2"), pool)
        let body = [UInt8](repeating: 0x62, count: 1 << 20)
        c.send(UpstreamRequest(method: Array("POST".utf8), isHead: false, hasBody: true, body: body, headers: UpstreamHeaders(),
                               pathAndQuery: ArraySlice("/up".utf8), idempotent: false), authority: Array("svc".utf8))
        let peer = peers.last!
        _ = fcntl(peer, F_SETFL, fcntl(peer, F_GETFL) | O_NONBLOCK)
        var sink = [UInt8](repeating: 0, count: 65536)
        var received = 0
        XCTAssertTrue(turn {
            while true {
                let n = recv(peer, &sink, sink.count, 0)
                if n <= 0 { break }
                received += n
            }
            return !c.hasPendingOutput
        }, "the request was not sent")
        XCTAssertGreaterThan(received, 1 << 20)
        XCTAssertGreaterThan(c.transport.output.heldBytes, UpstreamConnection.keptBufferBytes, "sending grew the buffer")
        pool.put(c)
        XCTAssertLessThanOrEqual(c.transport.output.heldBytes, UpstreamConnection.keptBufferBytes)
        pool.closeAll()
    }
}

/// An object whose identity stands for a service in the pool's tables.
private final class ServiceStandIn {}

/// `services.<name>.keepalive`: the bound on a service's idle connections in one worker's
/// pool, over all its IPs; the oldest idle one makes room, as in nginx's `keepalive N`.
final class UpstreamPoolKeepaliveTests: XCTestCase {
    private var base: OpaquePointer!
    private var peers: [Int32] = []
    private let serviceA = ServiceStandIn(), serviceB = ServiceStandIn()

    override func setUp() { base = event_base_new() }
    override func tearDown() {
        for fd in peers { close(fd) }
        event_base_free(base)
    }

    private func connection(_ member: UpstreamMember, _ service: AnyObject, keepalive: Int, _ pool: UpstreamPool) -> UpstreamConnection {
        var fds: [Int32] = [0, 0]
        XCTAssertEqual(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds), 0)
        _ = fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK)
        peers.append(fds[1])
        return UpstreamConnection(fd: fds[0], member: member, service: service,
                                  keepalive: keepalive, pool: pool)
    }

    private func member(_ ip: String) -> UpstreamMember {
        UpstreamMember(ip: ip, service: ServiceConfig(name: "svc", host: "svc.local"), startsUp: true)
    }

    func testAFullPoolClosesTheServicesOldestIdleConnectionOverAllItsIPs() {
        let stats = WorkerStats(routeCount: 0)
        let pool = UpstreamPool(base: base, buffers: nil, stats: stats)
        let a = member("127.0.0.2"), b = member("127.0.0.3")
        let a1 = connection(a, serviceA, keepalive: 2, pool), b1 = connection(b, serviceA, keepalive: 2, pool)
        let a2 = connection(a, serviceA, keepalive: 2, pool)
        pool.put(a1)
        pool.put(b1)
        XCTAssertEqual(pool.idleCount, 2)
        a1.idleSince = b1.idleSince - 1   // a1 came back first
        pool.put(a2)   // full: a1, the oldest of the service (on either IP), goes
        XCTAssertTrue(a1.isClosed)
        XCTAssertFalse(b1.isClosed)
        XCTAssertFalse(a2.isClosed)
        XCTAssertEqual(pool.idleCount, 2)
        XCTAssertEqual(stats.count(of: .upstreamIdleClosedOverKeepalive), 1)
        XCTAssertTrue(pool.take(a) === a2)
        XCTAssertNil(pool.take(a))
        XCTAssertTrue(pool.take(b) === b1)
        XCTAssertEqual(pool.idleCount, 0)
        pool.closeAll()
    }

    func testEachServiceHasItsOwnBoundAndZeroKeepsNone() {
        let pool = UpstreamPool(base: base, buffers: nil)
        let a = member("127.0.0.2"), b = member("127.0.0.3")
        let kept = (0..<3).map { _ in connection(a, serviceA, keepalive: 3, pool) }
        for c in kept { pool.put(c) }
        let none = connection(b, serviceB, keepalive: 0, pool)
        pool.put(none)
        XCTAssertTrue(none.isClosed, "keepalive 0: closed as it comes back")
        XCTAssertFalse(kept.contains { $0.isClosed }, "another service's bound")
        XCTAssertEqual(pool.idleCount, 3)
        pool.closeAll()
    }

    func testCountsStayRightThroughDiscardsAndSweeps() {
        let pool = UpstreamPool(base: base, buffers: nil)
        let a = member("127.0.0.2")
        let cs = (0..<4).map { _ in connection(a, serviceA, keepalive: 4, pool) }
        for c in cs { pool.put(c) }
        pool.discard(cs[1])
        XCTAssertEqual(pool.idleCount, 3)
        cs[0].idleSince = 0
        pool.sweep(nowMillis: UpstreamPool.idleTimeoutMillis + 1)   // cs[0] idled past the timeout
        XCTAssertTrue(cs[0].isClosed)
        XCTAssertEqual(pool.idleCount, 2)
        // Room for two more before the oldest goes.
        let more = (0..<2).map { _ in connection(a, serviceA, keepalive: 4, pool) }
        for c in more { pool.put(c) }
        XCTAssertFalse(cs[2].isClosed || cs[3].isClosed)
        XCTAssertEqual(pool.idleCount, 4)
        pool.closeAll()
        XCTAssertEqual(pool.idleCount, 0)
    }
}
