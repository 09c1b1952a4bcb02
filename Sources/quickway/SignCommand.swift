import Foundation
import QuickwayCore

/// `quickway sign`: signs a request the way a client SDK must (spec/signature.md) and
/// prints the Authorization value, or a curl command that sends the signed request.
enum SignCommand {
    static func run(_ args: [String]) -> String {
        var opts: [String: String] = [:]
        var curl = false
        var rest = args[...]
        while let a = rest.popFirst() {
            if a == "--curl" { curl = true; continue }
            guard a.hasPrefix("--"), let v = rest.popFirst() else { fail("sign: unexpected \(a); see quickway --help") }
            opts[String(a.dropFirst(2))] = v
        }
        let known: Set = ["key", "secret-env", "salt", "method", "url", "body-file", "timestamp", "nonce"]
        if let unknown = opts.keys.first(where: { !known.contains($0) }) { fail("sign: unknown option --\(unknown)") }
        guard let key = opts["key"], let env = opts["secret-env"], let salt = opts["salt"], let url = opts["url"] else {
            fail("sign: --key, --secret-env, --salt and --url are required")
        }
        guard let secret = ProcessInfo.processInfo.environment[env], !secret.isEmpty else {
            fail("sign: environment variable \(env) is not set")
        }
        let method = (opts["method"] ?? "GET").uppercased()
        guard let schemeEnd = url.range(of: "://") else { fail("sign: --url must be absolute (http://host/path)") }
        let afterScheme = url[schemeEnd.upperBound...]
        let target = afterScheme.firstIndex(of: "/").map { String(afterScheme[$0...]) } ?? "/"
        var body: [UInt8] = []
        if let file = opts["body-file"] {
            guard let data = FileManager.default.contents(atPath: file) else { fail("sign: cannot read \(file)") }
            body = Array(data)
        }
        let timestamp = opts["timestamp"].flatMap { Int64($0) } ?? Int64(Date().timeIntervalSince1970)
        let nonce = opts["nonce"] ?? (0..<16).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
        let auth = QW1Signer.authorization(keyId: key, secret: secret, salt: salt, method: method,
                                           target: target.split(separator: "#", maxSplits: 1).first.map(String.init) ?? target,
                                           timestamp: timestamp, nonce: nonce, body: body)
        guard curl else { return auth }
        var cmd = "curl -sS -X \(method) -H 'Authorization: \(auth)'"
        if let file = opts["body-file"] { cmd += " --data-binary @'\(file)'" }
        return cmd + " '\(url)'"
    }
}
