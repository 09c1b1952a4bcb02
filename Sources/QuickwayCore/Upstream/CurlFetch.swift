import CCurl
import CQuickwayShims

/// A small GET (or a bare TCP connect) on the control loop's multi handle, for probes
/// and IP-list refreshes. Collects at most `maxBody` bytes and reports once.
/// Ownership: keeps itself alive while running, like `UpstreamTransfer`.
/// `CURLE_OK`, for code outside this file that compares result codes.
let CURLE_OK_VALUE = CURLE_OK

final class CurlFetch: CurlTask {
    struct Result {
        var code: CURLcode
        var status: Int
        /// Time to the first response byte (HTTP) or to the connection (TCP), ms.
        var latencyMillis: Double
        var body: [UInt8]
        var error: String { code == CURLE_OK ? "" : String(cString: curl_easy_strerror(code)) }
    }

    private let client: UpstreamClient
    private var easy: UnsafeMutableRawPointer?
    private var body: [UInt8] = []
    private let maxBody: Int
    private let connectOnly: Bool
    private var toOneAddress = false
    private let done: (Result) -> Void

    init(client: UpstreamClient, maxBody: Int = 1 << 20, connectOnly: Bool = false, done: @escaping (Result) -> Void) {
        self.client = client
        self.maxBody = maxBody
        self.connectOnly = connectOnly
        self.done = done
    }

    func start(url: String, connectTo: UnsafeMutablePointer<curl_slist>?, timeoutMillis: Int64, tls: TLSConfig?) {
        let h = curl_easy_init()!
        easy = h
        let me = attach(to: h)
        qw_easy_setopt_ptr(h, CURLOPT_WRITEDATA, me)
        qw_easy_setopt_datafn(h, CURLOPT_WRITEFUNCTION, curlFetchWriteCallback)
        qw_easy_setopt_ptr(h, CURLOPT_URL, url)
        qw_easy_setopt_long(h, CURLOPT_NOSIGNAL, 1)
        qw_easy_setopt_ptr(h, CURLOPT_PROXY, "")
        qw_easy_setopt_long(h, CURLOPT_TIMEOUT_MS, Int(timeoutMillis))
        qw_easy_setopt_long(h, CURLOPT_CONNECTTIMEOUT_MS, Int(timeoutMillis))
        if let connectTo { qw_easy_setopt_ptr(h, CURLOPT_CONNECT_TO, connectTo) }
        toOneAddress = connectTo != nil   // a member's IP; a URL's host may have several
        if connectOnly {
            qw_easy_setopt_long(h, CURLOPT_CONNECT_ONLY, 1)
            qw_easy_setopt_long(h, CURLOPT_FRESH_CONNECT, 1)
        } else {
            client.idle.track(h)   // a probe reuses pooled connections too
        }
        if let tls {
            qw_easy_setopt_long(h, CURLOPT_SSL_VERIFYPEER, tls.verify ? 1 : 0)
            qw_easy_setopt_long(h, CURLOPT_SSL_VERIFYHOST, tls.verify ? 2 : 0)
            if let ca = tls.caFile { qw_easy_setopt_ptr(h, CURLOPT_CAINFO, ca) }
        }
        client.add(h)
    }

    override var watchesIdleConnection: Bool { !connectOnly }
    override var connectsToOneAddress: Bool { toOneAddress }

    func append(_ bytes: UnsafeRawBufferPointer) -> Bool {
        guard body.count + bytes.count <= maxBody else { return false }
        body.append(contentsOf: bytes)
        return true
    }

    override func finished(_ code: CURLcode) {
        guard let h = easy else { return }
        var status = 0
        qw_easy_getinfo_long(h, CURLINFO_RESPONSE_CODE, &status)
        var seconds = 0.0
        qw_easy_getinfo_double(h, connectOnly ? CURLINFO_CONNECT_TIME : CURLINFO_STARTTRANSFER_TIME, &seconds)
        // Curl reported the transfer done (outside its callbacks), so removal works; if it
        // ever does not, curl still points at the handle and at this fetch: keep both.
        let removed = client.remove(h)
        if removed { curl_easy_cleanup(h) }
        easy = nil
        let result = Result(code: code, status: status, latencyMillis: seconds * 1000, body: body)
        done(result)
        if removed { letGo() }
    }
}
