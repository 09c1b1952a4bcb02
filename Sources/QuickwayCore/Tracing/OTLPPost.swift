import CCurl
import CQuickwayShims

/// One OTLP/HTTP export: a `POST` of a protobuf `ExportTraceServiceRequest`
/// (`Content-Type: application/x-protobuf`) on the control loop's multi handle, as
/// probes and IP-list refreshes are (`CurlFetch`), so it never blocks a worker nor the
/// admin loop. Reports the curl result and the HTTP status once; the collector's answer
/// body is not read. Ownership: keeps itself alive while curl holds it (`CurlTask`).
final class OTLPPost: CurlTask {
    private let client: UpstreamClient
    private var easy: UnsafeMutableRawPointer?
    private var headers: UnsafeMutablePointer<curl_slist>?
    private let done: (_ ok: Bool, _ detail: String, _ bodyFree: Bool) -> Void
    /// The body, lent to libcurl (`CURLOPT_POSTFIELDS`, not copied) until the post ends.
    private var body: OTLPPostBody?

    /// `done`: the outcome, and whether libcurl is done with the body (false: it may
    /// still hold its pointer, so the memory must not be written again).
    init(client: UpstreamClient, done: @escaping (_ ok: Bool, _ detail: String, _ bodyFree: Bool) -> Void) {
        self.client = client
        self.done = done
    }

    /// Sends `body` to `url` (curl reads it in place; it is kept until the post ends),
    /// within `timeoutMillis` in all.
    func start(url: String, body: OTLPPostBody, timeoutMillis: Int64) {
        self.body = body
        let bytes = body.postBytes
        let h = curl_easy_init()!
        easy = h
        attach(to: h)
        qw_easy_setopt_ptr(h, CURLOPT_URL, url)
        qw_easy_setopt_long(h, CURLOPT_NOSIGNAL, 1)
        qw_easy_setopt_ptr(h, CURLOPT_PROXY, "")
        qw_easy_setopt_long(h, CURLOPT_TIMEOUT_MS, Int(timeoutMillis))
        qw_easy_setopt_long(h, CURLOPT_CONNECTTIMEOUT_MS, Int(timeoutMillis))
        qw_easy_setopt_off(h, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(bytes.count))
        qw_easy_setopt_ptr(h, CURLOPT_POSTFIELDS, bytes.baseAddress)
        // No `Expect: 100-continue` round trip for a large batch.
        headers = curl_slist_append(curl_slist_append(nil, "Content-Type: application/x-protobuf"), "Expect:")
        qw_easy_setopt_ptr(h, CURLOPT_HTTPHEADER, headers)
        qw_easy_setopt_datafn(h, CURLOPT_WRITEFUNCTION, otlpDiscardBody)
        client.add(h) { [self] why in refused(h, why) }
    }

    override func finished(_ code: CURLcode) {
        guard let h = easy else { return }
        var status = 0
        qw_easy_getinfo_long(h, CURLINFO_RESPONSE_CODE, &status)
        let removed = client.remove(h)
        if removed { curl_easy_cleanup(h) }
        easy = nil
        curl_slist_free_all(headers)
        headers = nil
        if removed { body = nil }
        if code != CURLE_OK {
            done(false, String(cString: curl_easy_strerror(code)), removed)
        } else {
            done((200..<300).contains(status), "status \(status)", removed)
        }
        if removed { letGo() }
    }
}

extension OTLPPost {
    /// libcurl did not take the transfer: it never started, so the body is free again.
    fileprivate func refused(_ h: UnsafeMutableRawPointer, _ why: String) {
        guard easy == h else { return }
        curl_easy_cleanup(h)
        easy = nil
        curl_slist_free_all(headers)
        headers = nil
        body = nil
        done(false, "libcurl refused the transfer: \(why)", true)
        letGo()
    }
}

/// The collector's answer is not needed (a partial-success body is only advice).
private let otlpDiscardBody: curl_write_callback = { _, size, n, _ in size * n }
