import CCurl
import XCTest
@testable import QuickwayCore

/// The one classification of upstream failures, against spec/admin-and-errors.md (codes
/// and statuses) and the README's failover rules (what is retried, what counts as an
/// error for the IP's health).
final class UpstreamFailureTests: XCTestCase {
    private func failure(_ kind: UpstreamFailure.Kind) -> UpstreamFailure {
        UpstreamFailure(kind: kind, service: "catalog", address: "10.0.0.7")
    }

    func testEachKindMapsToItsCodeAndRetryRule() {
        // (kind, code, status, retried on another IP): "a connection failure, reset or
        // timeout before any answer is retried"; nothing after the answer began.
        let table: [(UpstreamFailure.Kind, String, Int, Bool)] = [
            (.connectFailed, "upstream_unreachable", 502, true),
            (.connectTimedOut(millis: 1000), "upstream_unreachable", 502, true),
            (.responseTimedOut(millis: 10_000), "upstream_timeout", 504, true),
            (.closedBeforeHead("Connection reset by peer"), "upstream_bad_response", 502, true),
            (.closedBeforeHead("no answer (closed the connection)"), "upstream_bad_response", 502, true),
            (.closedInBody("the response body was cut short (Connection reset by peer)"), "upstream_bad_response", 502, false),
            (.headTooLarge(bytes: 65536), "upstream_bad_response", 502, false),
            (.malformed("sent an invalid status line"), "upstream_bad_response", 502, false),
            (.tls("SSL peer certificate or SSH remote key was not OK"), "upstream_bad_response", 502, false),
            (.other("Failure when receiving data from the peer"), "upstream_bad_response", 502, false),
        ]
        for (kind, code, status, retried) in table {
            let f = failure(kind)
            XCTAssertEqual(f.code.rawValue, code, "\(kind)")
            XCTAssertEqual(f.code.status, status, "\(kind)")
            XCTAssertEqual(f.isConnectionError, retried, "\(kind)")
        }
    }

    func testMessages() {
        // The spec's example: `"code": "upstream_timeout", "message": "catalog did not answer within 10s"`.
        XCTAssertEqual(failure(.responseTimedOut(millis: 10_000)).message, "catalog did not answer within 10s")
        XCTAssertEqual(failure(.connectFailed).message, "catalog could not be connected at 10.0.0.7")
        XCTAssertEqual(failure(.connectTimedOut(millis: 1000)).message, "catalog did not accept a connection at 10.0.0.7 within 1s")
        XCTAssertEqual(failure(.headTooLarge(bytes: 65536)).message, "catalog at 10.0.0.7 sent a response head over 64 KiB")
        XCTAssertEqual(failure(.malformed("sent an invalid status line")).message, "catalog at 10.0.0.7 sent an invalid status line")
        XCTAssertEqual(failure(.closedInBody("x")).message, "catalog at 10.0.0.7: x")
    }

    private func curl(_ code: CURLcode, sent: Bool = true, head: Bool = false) -> UpstreamFailure.Kind? {
        UpstreamFailure.kind(curl: code, requestSent: sent, headComplete: head, connectTimeoutMillis: 1000, responseTimeoutMillis: 10_000)
    }

    func testCurlCodes() {
        XCTAssertNil(curl(CURLE_OK, head: true))
        XCTAssertEqual(curl(CURLE_OK, head: false), .malformed("sent no valid response head"))
        XCTAssertEqual(curl(CURLE_COULDNT_CONNECT, sent: false), .connectFailed)
        XCTAssertEqual(curl(CURLE_COULDNT_RESOLVE_HOST, sent: false), .connectFailed)
        // A timeout before anything was sent was the connect's, with the connect timeout.
        XCTAssertEqual(curl(CURLE_OPERATION_TIMEDOUT, sent: false), .connectTimedOut(millis: 1000))
        XCTAssertEqual(curl(CURLE_OPERATION_TIMEDOUT, sent: true), .responseTimedOut(millis: 10_000))
        for code in [CURLE_GOT_NOTHING, CURLE_SEND_ERROR, CURLE_RECV_ERROR] {
            guard case .closedBeforeHead = curl(code, head: false) else { return XCTFail("\(code)") }
            guard case .closedInBody = curl(code, head: true) else { return XCTFail("\(code)") }
        }
        for code in [CURLE_SSL_CONNECT_ERROR, CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_CACERT_BADFILE] {
            guard case .tls = curl(code) else { return XCTFail("\(code)") }
            XCTAssertFalse(failure(curl(code)!).isConnectionError, "a certificate does not get better on a retry")
        }
        guard case .other = curl(CURLE_TOO_MANY_REDIRECTS) else { return XCTFail() }
    }

    func testErrorStatusesAreRFC5861s() {
        // RFC 5861 section 4: "an error is any situation that would result in a 500, 502,
        // 503, or 504 HTTP response status code being returned"; the README counts the same
        // four against an IP.
        for s in [500, 502, 503, 504] { XCTAssertTrue(UpstreamFailure.isErrorStatus(s), "\(s)") }
        for s in [200, 204, 304, 404, 429, 499, 501, 505, 511, 599] { XCTAssertFalse(UpstreamFailure.isErrorStatus(s), "\(s)") }
    }
}
