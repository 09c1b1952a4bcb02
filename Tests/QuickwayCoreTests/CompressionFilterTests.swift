import Foundation
import XCTest
@testable import QuickwayCore

/// `CompressionFilter` between a producer and a recording sink on a real worker loop:
/// the head it sends, streamed pieces with the sink's backpressure, and stored answers
/// served from the entry's encodings. Expectations: RFC 9110 (Vary, weak ETag) and the
/// zlib decoder, not the filter's own output.
final class CompressionFilterTests: XCTestCase {
    private var loop: LoopHarness!
    private var layer: StreamLayer!
    private var pool: EncoderPool!
    private let cache = ResponseCache(maxBytes: 1 << 20, maxObjectBytes: 1 << 19)

    override func setUpWithError() throws {
        loop = try LoopHarness()
        let c = try ConfigLoader.load(yaml: """
        listen: 127.0.0.1:18080
        services:
          api: { host: api.internal, port: 8080, ips: [127.0.0.2] }
        routes:
          - { name: plain, match: { path_prefix: /p/ }, service: api }
        """)
        let shared = SharedStages(cache: cache)
        let services = Dictionary(uniqueKeysWithValues: c.services.map { ($0.name, ServiceRuntime($0, health: ServiceHealth(config: $0))) })
        let worker = loop.worker
        (layer, pool) = loop.onLoop {
            let pipeline = ProxyPipeline(worker: worker, config: c, client: FakeUpstream(), authenticator: nil, statSlots: RouteStatSlots(),
                                         shared: shared, services: services)
            return (StreamLayer(workerId: worker.id, stats: worker.stats, limits: worker.limits, handler: pipeline), EncoderPool(levels: [:]))
        }
    }

    override func tearDown() {
        let (l, p) = (layer, pool)
        loop.onLoop { _ = l; _ = p }
        layer = nil
        pool = nil
        loop.stop()
    }

    let json = Array(String(repeating: "{\"id\":1,\"name\":\"widget\",\"tags\":[\"a\",\"b\"]},", count: 200).utf8)
    let lines = "Content-Type: application/json\r\nETag: \"e1\"\r\n"

    private func open(_ coding: ContentCoding?, _ sink: RecordingSink) -> Exchange {
        let (ex, _) = layer.open(parsedHead("GET /p/x HTTP/1.1\nHost: a\n\n"), sink: sink, peer: "127.0.0.9", overTLS: false)
        ex.bodyFilter = CompressionFilter(config: CompressionConfig(), pool: pool, cache: cache, coding: coding)
        return ex
    }

    func testAStreamedAnswerIsCompressedPieceByPieceWithBackpressure() {
        let (json, lines) = (json, lines)
        let (ex, sink): (Exchange, RecordingSink) = loop.onLoop {
            let sink = RecordingSink()
            sink.pauseAfterBytes = 16
            let ex = self.open(.gzip, sink)
            Array(lines.utf8).withUnsafeBytes { ex.beginStream(status: 200, reason: nil, headerLines: $0, contentLength: json.count) }
            return (ex, sink)
        }
        XCTAssertEqual(loop.onLoop { sink.length }, .unknown, "the compressed length is not known up front")
        let head = loop.onLoop { sink.headerLines }
        XCTAssertTrue(head.contains("Content-Encoding: gzip\r\n"))
        XCTAssertTrue(head.contains("Vary: Accept-Encoding\r\n"))
        XCTAssertTrue(head.contains("ETag: W/\"e1\"\r\n"), "RFC 9110 8.8.1: a weak validator for other bytes")
        let first = loop.onLoop { json[0..<100].withUnsafeBytes { ex.streamBody($0) } }
        XCTAssertEqual(first, .pause, "the sink's pause, past its mark, reaches the producer through the filter")
        ReferenceDecoders.partial = true
        let sofar = loop.onLoop { sink.body }
        XCTAssertEqual(ReferenceDecoders.gunzip(sofar).map { Array($0) }, Array(json[0..<100]), "the piece was flushed: decodable now")
        ReferenceDecoders.partial = false
        loop.onLoop { _ = json[100...].withUnsafeBytes { ex.streamBody($0) }; ex.endStream() }
        XCTAssertTrue(ReferenceDecoders.gunzip(loop.onLoop { sink.body }) == json)
        XCTAssertEqual(loop.onLoop { self.pool.idleCount(.gzip) }, 1, "the encoder went back to the worker's pool")
    }

    func testAnIdentityClientGetsTheBytesAsTheyAreWithVary() {
        let (json, lines) = (json, lines)
        let sink: RecordingSink = loop.onLoop {
            let sink = RecordingSink()
            let ex = self.open(nil, sink)
            Array(lines.utf8).withUnsafeBytes { l in json.withUnsafeBytes { ex.respond(status: 200, headerLines: l, body: $0) } }
            return sink
        }
        XCTAssertEqual(loop.onLoop { sink.body }, json)
        XCTAssertEqual(loop.onLoop { sink.length }, .known(json.count))
        XCTAssertEqual(loop.onLoop { sink.headerLines }, lines + "Vary: Accept-Encoding\r\n", "could have been compressed: Vary, strong ETag kept")
    }

    func testAStoredAnswerIsServedFromItsEncodingWithNoCompressionWork() {
        let (json, lines, cache) = (json, lines, cache)
        let r = CachedResponse(status: 200, reason: [], headerLines: Array(lines.utf8), body: json, receivedAt: Clock.wallSeconds())
        cache.store(Array("GET a/p/x".utf8), r, ttlMillis: 60_000, nowMillis: 0)
        // Not a real brotli stream: had the filter compressed, the body would differ.
        cache.attachEncoding([0xCE, 0xB2, 0xCF, 0x81], coding: .br, to: r)
        let sink: RecordingSink = loop.onLoop {
            let sink = RecordingSink()
            ProxyPipeline.respondCached(self.open(.br, sink), r, "HIT")
            return sink
        }
        XCTAssertEqual(loop.onLoop { sink.body }, [0xCE, 0xB2, 0xCF, 0x81])
        XCTAssertEqual(loop.onLoop { sink.length }, .known(4), "a stored encoding's length is known")
        XCTAssertTrue(loop.onLoop { sink.headerLines }.contains("Content-Encoding: br\r\n"))
        // A coding not made yet is made once and kept with the entry.
        let zsink: RecordingSink = loop.onLoop {
            let sink = RecordingSink()
            ProxyPipeline.respondCached(self.open(.zstd, sink), r, "HIT")
            return sink
        }
        let made = r.encodings.get(.zstd)
        XCTAssertNotNil(made)
        XCTAssertEqual(loop.onLoop { zsink.body }, made)
        XCTAssertTrue(ReferenceDecoders.unzstd(made ?? []) == json)
    }
}
