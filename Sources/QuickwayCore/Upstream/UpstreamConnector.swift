import CCurl
import CQuickwayShims
import Glibc

/// Makes one upstream TCP connection with libcurl and hands its socket over: a
/// `CONNECT_ONLY` transfer on the worker's multi handle (so the connect is driven by the
/// same loop), sent to the member's IP with `CONNECT_TO`, bounded by the service's
/// connect timeout. Once connected, the close-socket callback is told to keep the socket
/// and the easy handle is removed: the socket then belongs to an `UpstreamConnection`.
///
/// Ownership: keeps itself alive (`CurlTask.attach`) until curl reports the
/// connect done; `done` runs once, on the loop thread. A failure is classified by
/// `UpstreamFailure` like any other.
final class UpstreamConnector: CurlTask {
    private let client: UpstreamClient
    private var easy: UnsafeMutableRawPointer?
    /// Read by the C close-socket callback: non-zero once the socket is ours.
    private let keepSocket = UnsafeMutablePointer<Int32>.allocate(capacity: 1)
    private var done: ((Result<Int32, UpstreamFailure.Kind>) -> Void)?
    private var connectTimeoutMillis: Int64 = 0
    private var url: [UInt8] = []

    init(client: UpstreamClient) {
        self.client = client
        keepSocket.initialize(to: 0)
    }

    deinit { keepSocket.deallocate() }

    func start(service: ServiceRuntime, member: UpstreamMember, _ done: @escaping (Result<Int32, UpstreamFailure.Kind>) -> Void) {
        self.done = done
        connectTimeoutMillis = service.config.connectTimeoutMillis
        let h = UpstreamClient.newEasyHandle()
        easy = h
        attach(to: h)
        qw_easy_setopt_long(h, CURLOPT_CONNECT_ONLY, 1)
        url = service.urlPrefix + Array("/".utf8) + [0]
        url.withUnsafeBufferPointer { qw_easy_setopt_ptr(h, CURLOPT_URL, $0.baseAddress) }
        qw_easy_setopt_ptr(h, CURLOPT_CONNECT_TO, member.connectTo)
        qw_easy_setopt_long(h, CURLOPT_CONNECTTIMEOUT_MS, Int(connectTimeoutMillis))
        _ = qw_easy_keep_socket_when_flagged(h, keepSocket)
        client.add(h)
    }

    override func finished(_ code: CURLcode) {
        guard let h = easy else { return }
        easy = nil
        var result: Result<Int32, UpstreamFailure.Kind>
        if code == CURLE_OK {
            var socket = -1
            qw_easy_getinfo_long(h, CURLINFO_LASTSOCKET, &socket)
            if socket >= 0 {
                keepSocket.pointee = 1
                result = .success(Int32(socket))
            } else {
                result = .failure(.other("libcurl connected but gave no socket"))
            }
        } else {
            // Nothing of the request is sent here: a timeout is the connect's.
            let kind = UpstreamFailure.kind(curl: code, requestSent: false, headComplete: false,
                                            connectTimeoutMillis: connectTimeoutMillis, responseTimeoutMillis: connectTimeoutMillis)
            result = .failure(kind ?? .other("libcurl reported no connection"))
        }
        // Removing a CONNECT_ONLY handle closes its connection: with keepSocket set, the
        // close-socket callback leaves the socket open for us.
        client.remove(h)
        curl_easy_cleanup(h)
        let d = done
        done = nil
        d?(result)
        letGo()
    }
}
