import Foundation
import XCTest
@testable import QuickwayCore

/// A response sink that records what the pipeline answered (the stand-in for a codec).
final class RecordingSink: ResponseSink {
    var status = 0
    var headerLines = ""
    var length: ResponseLength?
    var body: [UInt8] = []
    var ended = false
    var aborted = false
    var heads = 0
    /// Answer `.pause` to every piece of body once this many bytes were taken.
    var pauseAfterBytes = Int.max
    var onWritable: (() -> Void)?
    /// The exchange being answered, held until its response ends, as a codec holds it.
    var exchange: Exchange?

    /// The gateway's own fields of the last head (written by the exchange, not the sink).
    var requestId: String?
    var cacheStatus: String?
    var age: Int?

    func sendHead(_ head: ResponseHead) {
        heads += 1
        status = head.status
        requestId = head.requestId.string
        cacheStatus = head.cacheStatus.map { "\($0)" }
        age = head.age
        headerLines = head.headerLines.map { String(decoding: $0, as: UTF8.self) } ?? ""
        length = head.length
    }

    func sendBody(_ bytes: UnsafeRawBufferPointer) -> BodyWrite {
        body.append(contentsOf: bytes)
        return body.count >= pauseAfterBytes ? .pause : .accepted
    }

    func whenWritable(_ resume: @escaping () -> Void) { onWritable = resume }
    func sendEnd() { ended = true; self.exchange = nil }
    func sendAbort() { aborted = true; self.exchange = nil }

    var bodyString: String { String(decoding: body, as: UTF8.self) }
}

/// A fake upstream: records each call and lets the test answer it.
final class FakeUpstream: UpstreamCallMaker {
    private(set) var calls: [FakeCall] = []
    /// Runs as each call starts (to answer it at once); nil: the test answers later.
    var onStart: ((FakeCall) -> Void)?

    func makeCall(service: ServiceRuntime, member: UpstreamMember) -> UpstreamCall {
        let c = FakeCall(ip: member.ip, upstream: self)
        calls.append(c)
        return c
    }

    fileprivate func started(_ c: FakeCall) { onStart?(c) }
}

/// One upstream call the test drives: `answer` for a whole response, `fail` for a
/// failure. Reports to its delegate like the real clients do.
final class FakeCall: UpstreamCall {
    let ip: String
    private unowned let upstream: FakeUpstream
    private(set) var request: UpstreamRequest?
    private var delegate: UpstreamCallDelegate?
    private(set) var head = UpstreamResponseHead()
    private(set) var cancelled = false
    private(set) var resumes = 0
    /// Body pieces the delegate refused (paused on), offered again on `resume`.
    private var held: [[UInt8]] = []
    private var endAfterHeld = false

    init(ip: String, upstream: FakeUpstream) {
        self.ip = ip
        self.upstream = upstream
    }

    /// The method sent.
    var method: String { requestLine.first ?? "" }
    /// The target sent, likewise.
    var target: String { requestLine.count > 1 ? requestLine[1] : "" }

    private var requestLine: [String] {
        guard let r = request else { return [] }
        return [String(decoding: r.method, as: UTF8.self), String(decoding: r.pathAndQuery, as: UTF8.self)]
    }

    func start(_ request: UpstreamRequest, delegate: UpstreamCallDelegate) {
        self.request = request
        self.delegate = delegate
        upstream.started(self)
    }

    func cancel() {
        cancelled = true
        delegate = nil
    }

    func resume() {
        resumes += 1
        offerHeld()
    }

    /// Sends a status line, header lines and a body in `pieces` pieces.
    func answer(_ status: Int, headers: [String] = [], body: String = "", pieces: Int = 1) {
        answer(status, headers: headers, bodyBytes: Array(body.utf8), pieces: pieces)
    }

    func answer(_ status: Int, headers: [String] = [], bodyBytes: [UInt8], pieces: Int = 1) {
        guard let d = delegate else { return }
        for line in ["HTTP/1.1 \(status) X"] + headers + ["Content-Length: \(bodyBytes.count)", ""] {
            var l = line
            _ = l.withUTF8 { head.feed(UnsafeRawBufferPointer($0)) }
        }
        d.upstreamHeadReceived(self, head)
        let size = max(1, (bodyBytes.count + pieces - 1) / pieces)
        held = stride(from: 0, to: bodyBytes.count, by: size).map { Array(bodyBytes[$0..<min($0 + size, bodyBytes.count)]) }
        endAfterHeld = true
        offerHeld()
    }

    private func offerHeld() {
        while let piece = held.first {
            guard let d = delegate else { return }
            let taken = piece.withUnsafeBytes { d.upstreamBody(self, $0) }
            if !taken { return }
            held.removeFirst()
        }
        if endAfterHeld, let d = delegate {
            endAfterHeld = false
            delegate = nil
            d.upstreamFinished(self, .complete)
        }
    }

    var isPaused: Bool { !held.isEmpty }

    func fail(_ kind: UpstreamFailure.Kind = .connectFailed) {
        guard let d = delegate else { return }
        delegate = nil
        d.upstreamFinished(self, .failed(UpstreamFailure(kind: kind, service: "api", address: ip)))
    }
}

/// A started worker (its own loop thread) and helpers to run test code on that loop,
/// where the pipeline lives.
final class LoopHarness {
    let worker: Worker

    init() throws {
        worker = try Worker(id: 0, name: "pipeline-test", limits: LimitsConfig(), maxConnections: 16, routeCount: 8)
        worker.ownDescriptorTable = false   // the tests hand the loop socket pairs made here
        worker.start()
    }

    /// Runs `body` on the loop thread and waits for it.
    func onLoop<T>(_ body: @escaping () -> T) -> T {
        let done = DispatchSemaphore(value: 0)
        // The test thread waits while the loop runs `body`: nothing is used on both at once.
        nonisolated(unsafe) var result: T?
        nonisolated(unsafe) let body = body
        worker.post {
            result = body()
            done.signal()
        }
        precondition(done.wait(timeout: .now() + 10) == .success, "the loop did not run the work")
        return result!
    }

    /// Polls `condition` on the loop until it holds or `seconds` pass.
    func wait(seconds: Double = 5, _ what: String, _ condition: @escaping () -> Bool) {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if onLoop(condition) { return }
            usleep(5_000)
        }
        XCTFail("timed out waiting for: \(what)")
    }

    func stop() {
        worker.requestDrain()
        worker.join()
    }
}

/// Parses one request head (with `\r\n` line ends added) into the normalised head.
func parsedHead(_ text: String) -> HTTPRequestHead {
    var parser = HTTPRequestParser(maxHeadBytes: 16384, maxBodyBytes: 1 << 20)
    let bytes = Array(text.replacingOccurrences(of: "\n", with: "\r\n").utf8)
    let result = try! bytes.withUnsafeBytes { try parser.parseHead($0) }
    guard case let .head(head, _) = result else { fatalError("incomplete head in test: \(text)") }
    return head
}

extension LoopHarness {
    /// A proxy pipeline for `config` on this loop, calling `upstream` and sharing `shared`
    /// (cache and flights) with any other pipeline made with it; no authenticator;
    /// `concurrency`: the worker's limiters (`services.<name>.concurrency`).
    func proxyPipeline(_ config: GatewayConfig, upstream: FakeUpstream, shared: SharedStages,
                       concurrency: WorkerConcurrencyLimits? = nil) -> ProxyPipeline {
        let services = Dictionary(uniqueKeysWithValues: config.services.map { ($0.name, ServiceRuntime($0, health: ServiceHealth(config: $0))) })
        let worker = self.worker
        return onLoop {
            ProxyPipeline(worker: worker, config: config, client: upstream, authenticator: nil, statSlots: RouteStatSlots(),
                          shared: shared, services: services, concurrency: concurrency)
        }
    }

    /// Starts a request through `pipeline` as the stream layer does: the head stages,
    /// then (if none answered or refused) the rest.
    func send(_ pipeline: ProxyPipeline, _ head: String) -> (Exchange, RecordingSink) {
        onLoop {
            let sink = RecordingSink()
            let ex = pipeline.makeExchange(head: parsedHead(head + "\n\n"), sink: sink, requestId: RequestId(Array("test".utf8)),
                                           peer: "127.0.0.9")
            sink.exchange = ex
            if let (code, message) = pipeline.preflight(ex) { ex.respondError(code, message) } else { pipeline.handle(ex) }
            return (ex, sink)
        }
    }
}
