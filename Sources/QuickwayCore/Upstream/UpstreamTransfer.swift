import CCurl
import CQuickwayShims
import Glibc

/// One upstream HTTP call made entirely by libcurl (its HTTP layer) on a pooled easy
/// handle: the path for `scheme: https`. Plain-HTTP calls use `UpstreamHTTPCall`.
///
/// Ownership: while the call runs, the transfer keeps itself alive (`CurlTask.attach`;
/// its address is `CURLOPT_PRIVATE` and the callbacks' user data), let go when it
/// finishes or is cancelled. It holds its delegate strongly until then. Thread rule: one worker.
///
/// Cancelling from inside one of curl's callbacks (the delegate writes to a client that
/// has hung up) only marks the transfer: its callbacks then tell curl to abort, and the
/// handle is removed, pooled and the transfer released once curl has returned
/// (`UpstreamClient.afterCurlReturns`). Until then curl may still call us.
final class UpstreamTransfer: CurlTask, UpstreamCall {
    private let client: UpstreamClient
    private let service: ServiceRuntime
    private var easy: UnsafeMutableRawPointer?
    private var headerList: UnsafeMutablePointer<curl_slist>?
    private var delegate: UpstreamCallDelegate?
    private var body: [UInt8] = []
    private var bodyOffset = 0
    /// A body read as it is sent (spooled or streamed), instead of `body`.
    private var bodySource: RequestBodySource?
    /// Why the body could not be completed (the read callback aborted the transfer).
    private var bodyFailure: (GatewayErrorCode, String)?
    private(set) var head = UpstreamResponseHead()
    let member: UpstreamMember
    private var health = UpstreamHealthReport()
    /// Cancelled or finished: the delegate is gone, callbacks tell curl to abort, and all
    /// that is left is taking the handle off the multi handle.
    private(set) var isEnded = false

    init(client: UpstreamClient, service: ServiceRuntime, member: UpstreamMember) {
        self.client = client
        self.service = service
        self.member = member
    }

    /// Its handles come from `UpstreamClient.takeHandle`, which tracks them.
    override var watchesIdleConnection: Bool { true }
    /// `CURLOPT_CONNECT_TO` the member's IP.
    override var connectsToOneAddress: Bool { true }

    var upstreamAddress: String { member.ip }

    /// Configures the easy handle and adds it to the multi handle.
    func start(_ r: UpstreamRequest, delegate: UpstreamCallDelegate) {
        self.delegate = delegate
        let h = client.takeHandle()
        easy = h
        let ptr = attach(to: h)
        qw_easy_setopt_ptr(h, CURLOPT_HEADERDATA, ptr)
        qw_easy_setopt_ptr(h, CURLOPT_WRITEDATA, ptr)

        // URL: service prefix + path and query, NUL-terminated (curl copies it).
        health.start(at: Clock.monotonicNanos())
        var url = service.urlPrefix
        url.append(contentsOf: r.pathAndQuery)
        url.append(0)
        url.withUnsafeBufferPointer { qw_easy_setopt_ptr(h, CURLOPT_URL, $0.baseAddress) }
        qw_easy_setopt_ptr(h, CURLOPT_CONNECT_TO, member.connectTo)
        if service.config.scheme == .https {
            // The connection goes to the member's IP; SNI, Host and certificate checks use
            // the service host from the URL.
            let verify = service.config.tls?.verify ?? true
            qw_easy_setopt_long(h, CURLOPT_SSL_VERIFYPEER, verify ? 1 : 0)
            qw_easy_setopt_long(h, CURLOPT_SSL_VERIFYHOST, verify ? 2 : 0)
            if let ca = service.config.tls?.caFile { qw_easy_setopt_ptr(h, CURLOPT_CAINFO, ca) }
        }

        // A request that must not be sent twice goes on a fresh connection: libcurl sends
        // a request again by itself when a reused connection dies before any answer.
        qw_easy_setopt_long(h, CURLOPT_FRESH_CONNECT, r.idempotent ? 0 : 1)
        // `keepalive: 0` keeps no connection. (Other values do not size curl's cache: curl
        // counts connections in use in it too, so a cache sized to the idle bound would
        // close each busy call's connection as it ends.)
        qw_easy_setopt_long(h, CURLOPT_FORBID_REUSE, service.config.keepalive == 0 ? 1 : 0)

        // Method and body.
        qw_easy_setopt_long(h, CURLOPT_HTTPGET, 1)
        qw_easy_setopt_ptr(h, CURLOPT_CUSTOMREQUEST, nil)
        if r.isHead {
            qw_easy_setopt_long(h, CURLOPT_NOBODY, 1)
        } else {
            if r.hasBody {
                body = r.body
                bodySource = r.bodySource
                qw_easy_setopt_long(h, CURLOPT_POST, 1)
                // -1: the length is not known, and the request goes chunked (its header
                // is in the list, `headerList`).
                let size = r.bodySource.map { $0.length ?? -1 } ?? body.count
                qw_easy_setopt_off(h, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(size))
                qw_easy_setopt_ptr(h, CURLOPT_POSTFIELDS, nil)
                qw_easy_setopt_datafn(h, CURLOPT_READFUNCTION, upstreamReadCallback)
                qw_easy_setopt_ptr(h, CURLOPT_READDATA, ptr)
            }
            if r.method != [0x47, 0x45, 0x54] || r.hasBody {  // anything but a plain GET
                var m = r.method
                m.append(0)
                m.withUnsafeBufferPointer { qw_easy_setopt_ptr(h, CURLOPT_CUSTOMREQUEST, $0.baseAddress) }
            }
        }

        headerList = Self.headerList(r)
        qw_easy_setopt_ptr(h, CURLOPT_HTTPHEADER, headerList)
        qw_easy_setopt_long(h, CURLOPT_CONNECTTIMEOUT_MS, Int(service.config.connectTimeoutMillis))
        if bodySource == nil {
            qw_easy_setopt_long(h, CURLOPT_TIMEOUT_MS, Int(service.config.responseTimeoutMillis))
        } else {
            // A body read as it goes may take longer than the response timeout to send:
            // the timeout counts from the last byte that moved instead (under 1 byte/s
            // for that long), as the plain-HTTP client re-arms it on progress.
            qw_easy_setopt_long(h, CURLOPT_TIMEOUT_MS, 0)
            qw_easy_setopt_long(h, CURLOPT_LOW_SPEED_LIMIT, 1)
            qw_easy_setopt_long(h, CURLOPT_LOW_SPEED_TIME, Int(max(1, (service.config.responseTimeoutMillis + 999) / 1000)))
        }
        client.add(h)
    }

    /// The request's header fields as libcurl's header list, which the caller frees
    /// with `curl_slist_free_all` (curl copies each string; the list must outlive the
    /// transfer). Each field is `Name: value`, or `Name;` when its value is empty
    /// (`Name:` alone tells curl to leave a header out). With a body, `Expect:` and, if
    /// the request has none, `Content-Type:` are added: "Name:" with nothing after it
    /// tells libcurl not to add its own default (`Expect: 100-continue`, a form
    /// Content-Type). curl's default `Accept: */*` is left: it means the same as no
    /// Accept (RFC 9110 12.5.1).
    static func headerList(_ r: UpstreamRequest) -> UnsafeMutablePointer<curl_slist>? {
        var list: UnsafeMutablePointer<curl_slist>?
        var line: [UInt8] = []
        r.headers.forEach { name, value in
            line.removeAll(keepingCapacity: true)
            line.append(contentsOf: name)
            if value.isEmpty {
                line.append(UInt8(ascii: ";"))
            } else {
                line.append(contentsOf: ": ".utf8)
                line.append(contentsOf: value)
            }
            line.append(0)
            list = line.withUnsafeBufferPointer { curl_slist_append(list, UnsafeRawPointer($0.baseAddress!).assumingMemoryBound(to: CChar.self)) }
        }
        if r.hasBody {
            list = curl_slist_append(list, "Expect:")
            if let source = r.bodySource, source.length == nil { list = curl_slist_append(list, "Transfer-Encoding: chunked") }
            if !r.headers.contains("content-type") { list = curl_slist_append(list, "Content-Type:") }
        }
        return list
    }

    /// Stops the call (the client left). The upstream connection is closed by curl if
    /// the response was not complete. The delegate is not called again.
    func cancel() {
        guard easy != nil, !isEnded else { return }
        service.health.record(health.cancelled(), of: member)
        delegate = nil
        isEnded = true
        // Inside a curl callback the handle cannot be removed: wait until curl returns.
        client.afterCurlReturns { [self] in detach() }
    }

    /// Continues a transfer the delegate paused.
    func resume() {
        guard let h = easy, !isEnded else { return }
        client.pause(h, CURLPAUSE_CONT)
    }

    /// Takes the handle off the multi handle, then pools it and lets the transfer go. If
    /// curl refuses, both stay as they are (curl still points at them): `finished` tries
    /// again when curl reports the transfer done.
    private func detach() {
        guard let h = easy, client.remove(h) else { return }
        release(h)
    }

    func headerLine(_ bytes: UnsafeRawBufferPointer) {
        if head.feed(bytes) {
            health.headReceived(at: Clock.monotonicNanos())
            delegate?.upstreamHeadReceived(self, head)
        }
    }

    func bodyData(_ bytes: UnsafeRawBufferPointer) -> Bool {
        guard let d = delegate else { return true }
        return d.upstreamBody(self, bytes)
    }

    /// What curl's read callback returns: a count of bytes (0 at the end), or
    /// `CURL_READFUNC_PAUSE` while a streamed body waits for the client (curl is
    /// unpaused when bytes come), or `CURL_READFUNC_ABORT` when the body failed.
    func readBody(into buffer: UnsafeMutableRawBufferPointer) -> Int {
        if let source = bodySource { return read(source, into: buffer) }
        let n = min(buffer.count, body.count - bodyOffset)
        if n > 0 {
            body.withUnsafeBytes { src in
                buffer.baseAddress!.copyMemory(from: src.baseAddress! + bodyOffset, byteCount: n)
            }
            bodyOffset += n
        }
        return n
    }

    private func read(_ source: RequestBodySource, into buffer: UnsafeMutableRawBufferPointer) -> Int {
        switch source.read(into: buffer) {
        case .bytes(let n): return n
        case .end: return 0
        case .wait:
            source.whenReadable { [weak self] in
                guard let self, !self.isEnded, let h = self.easy, self.bodySource === source else { return }
                self.client.pause(h, CURLPAUSE_CONT)
            }
            return Int(CURL_READFUNC_PAUSE)
        case .failed(let code, let message):
            bodyFailure = (code, message)
            return Int(CURL_READFUNC_ABORT)
        }
    }

    /// Called by the client when curl reports the transfer done.
    override func finished(_ code: CURLcode) {
        guard let h = easy else { return }
        if isEnded { detach(); return }
        let outcome = outcome(of: code, handle: h)
        service.health.record(health.ended(outcome, status: head.status), of: member)
        let d = delegate
        delegate = nil
        isEnded = true
        // Called once curl has returned, so the removal works (if not, nothing is freed).
        detach()
        d?.upstreamFinished(self, outcome)
    }

    /// How the transfer ended, classified like any upstream failure. Whether any of the
    /// request went out tells a connect timeout from a response timeout.
    private func outcome(of code: CURLcode, handle h: UnsafeMutableRawPointer) -> UpstreamOutcome {
        if let (bodyCode, message) = bodyFailure {
            return .failed(UpstreamFailure(kind: .requestBodyFailed(bodyCode, message), service: service.config.name, address: upstreamAddress))
        }
        var requestBytes = 0
        qw_easy_getinfo_long(h, CURLINFO_REQUEST_SIZE, &requestBytes)
        guard let kind = UpstreamFailure.kind(curl: code, requestSent: requestBytes > 0, headComplete: head.isComplete,
                                              connectTimeoutMillis: service.config.connectTimeoutMillis,
                                              responseTimeoutMillis: service.config.responseTimeoutMillis) else { return .complete }
        return .failed(UpstreamFailure(kind: kind, service: service.config.name, address: upstreamAddress))
    }

    private func release(_ h: UnsafeMutableRawPointer) {
        easy = nil
        if let l = headerList { curl_slist_free_all(l); headerList = nil }
        qw_easy_setopt_ptr(h, CURLOPT_HTTPHEADER, nil)
        // A handle with a low-speed limit (a body read as it goes) goes back without it.
        if bodySource != nil {
            qw_easy_setopt_long(h, CURLOPT_LOW_SPEED_LIMIT, 0)
            qw_easy_setopt_long(h, CURLOPT_LOW_SPEED_TIME, 0)
        }
        client.returnHandle(h)
        body = []
        bodySource = nil
        letGo()
    }
}
