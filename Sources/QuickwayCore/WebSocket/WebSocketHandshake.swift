import Foundation
import COpenSSL

/// The opening handshake (RFC 6455 section 4): the client's request is checked before
/// anything goes upstream, the backend's `101` is checked against the key the client
/// sent (the gateway forwards that key, so the backend's `Sec-WebSocket-Accept` is the
/// one the client expects), and the `101` to the client is built. Pure.
enum WebSocketHandshake {
    static let guid = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

    enum ClientCheck: Equatable {
        /// A valid handshake; `key` is the client's `Sec-WebSocket-Key` as sent.
        case valid(key: [UInt8])
        /// 400, with the reason.
        case invalid(String)
        /// 426 with `Sec-WebSocket-Version: 13`.
        case unsupportedVersion
    }

    /// RFC 6455 4.2.1: GET over HTTP/1.1 without a body, `Upgrade: websocket`,
    /// `Connection` naming `upgrade`, a `Sec-WebSocket-Key` that is 16 bytes in base64,
    /// `Sec-WebSocket-Version: 13`.
    static func checkClient(_ head: HTTPRequestHead) -> ClientCheck {
        guard head.methodIs("GET") else { return .invalid("a WebSocket handshake must be a GET") }
        guard head.minorVersion == 1 else { return .invalid("a WebSocket handshake needs HTTP/1.1") }
        guard head.body == .none else { return .invalid("a WebSocket handshake has no body") }
        guard head.upgradeWebSocket else { return .invalid("Upgrade must be websocket") }
        guard head.connectionUpgrade else { return .invalid("Connection must contain upgrade") }
        guard let k = head.value(of: "sec-websocket-key") else { return .invalid("Sec-WebSocket-Key is missing") }
        let key = Array(head.bytes[k])
        guard let decoded = Data(base64Encoded: Data(key)), decoded.count == 16 else {
            return .invalid("Sec-WebSocket-Key must be 16 bytes in base64")
        }
        guard let v = head.value(of: "sec-websocket-version") else { return .invalid("Sec-WebSocket-Version is missing") }
        guard head.bytes[v].elementsEqual("13".utf8) else { return .unsupportedVersion }
        return .valid(key: key)
    }

    /// `Sec-WebSocket-Accept` for `key`: base64(SHA-1(key + GUID)).
    static func acceptValue(key: [UInt8]) -> String {
        var input = key
        input.append(contentsOf: guid.utf8)
        var digest = [UInt8](repeating: 0, count: 20)
        input.withUnsafeBufferPointer { p in _ = SHA1(p.baseAddress, p.count, &digest) }
        return Data(digest).base64EncodedString()
    }

    /// What the backend's `101` settled.
    struct Agreement: Equatable {
        /// `permessage-deflate` is in force: RSV1 marks compressed messages.
        var deflate: Bool
    }

    /// The backend's `101`: `Upgrade: websocket`, the right `Sec-WebSocket-Accept`, and no
    /// extension but `permessage-deflate` (the only one the relay knows the bits of).
    static func checkBackend(upgradeWebSocket: Bool, headerLines: [UInt8], key: [UInt8]) -> Result<Agreement, WebSocketViolation> {
        let fail = { (why: String) in Result<Agreement, WebSocketViolation>.failure(WebSocketViolation(WebSocketCloseCode.internalError, why)) }
        guard upgradeWebSocket else { return fail("the backend's 101 does not upgrade to websocket") }
        guard let accept = headerValues(headerLines, "sec-websocket-accept").first else { return fail("the backend's 101 has no Sec-WebSocket-Accept") }
        guard accept == acceptValue(key: key) else { return fail("the backend's Sec-WebSocket-Accept does not match the key") }
        var deflate = false
        for value in headerValues(headerLines, "sec-websocket-extensions") {
            for ext in value.split(separator: ",") {
                let name = ext.split(separator: ";").first.map { $0.trimmingCharacters(in: .whitespaces).lowercased() } ?? ""
                if name == "permessage-deflate" { deflate = true } else if !name.isEmpty {
                    return fail("the backend negotiated the extension \(name), which the gateway cannot relay")
                }
            }
        }
        return .success(Agreement(deflate: deflate))
    }

    /// The values of the header `lowercaseName` in `Name: value\r\n` lines.
    static func headerValues(_ lines: [UInt8], _ lowercaseName: String) -> [String] {
        var out: [String] = []
        let text = String(decoding: lines, as: UTF8.self)
        for line in text.split(separator: "\r\n") {
            guard let colon = line.firstIndex(of: ":") else { continue }
            if line[..<colon].lowercased() == lowercaseName {
                out.append(line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces))
            }
        }
        return out
    }

    /// The `101` head lines to the client: the upgrade, then the backend's own lines
    /// (`Sec-WebSocket-Accept`, `-Protocol`, `-Extensions`, cookies ...).
    static func switchingLines(backendLines: [UInt8]) -> [UInt8] {
        Array("Upgrade: websocket\r\nConnection: Upgrade\r\n".utf8) + backendLines
    }
}
