import ArgumentParser
import Foundation
import QuickwayCore

/// `quickway sign`: signs a request the way a client SDK must (spec/signature.md) and
/// prints the Authorization value, or a curl command that sends the signed request.
struct SignCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sign",
        abstract: "Print the QW1 Authorization value for a request (--curl: a ready curl command instead).")

    @Option(help: ArgumentHelp("The key id.", valueName: "ID")) var key: String
    @Option(name: .customLong("secret-env"), help: ArgumentHelp("The environment variable holding the key's secret.", valueName: "VAR"))
    var secretEnv: String
    @Option(help: ArgumentHelp("The gateway's salt (auth.salt).", valueName: "S")) var salt: String
    @Option(help: ArgumentHelp("The request method.", valueName: "M")) var method = "GET"
    @Option(help: ArgumentHelp("The absolute request URL (http://host/path?query).", valueName: "URL")) var url: String
    @Option(name: .customLong("body-file"), help: ArgumentHelp("A file holding the request body.", valueName: "F"))
    var bodyFile: String?
    @Option(help: ArgumentHelp("The Unix time to sign at (default: now).", valueName: "UNIX")) var timestamp: Int64?
    @Option(help: ArgumentHelp("The nonce (default: 16 random bytes in hex).", valueName: "N")) var nonce: String?
    @Flag(help: "Print a curl command that sends the signed request.") var curl = false

    func run() throws {
        guard let secret = ProcessInfo.processInfo.environment[secretEnv], !secret.isEmpty else {
            throw CommandFailure(message: "sign: environment variable \(secretEnv) is not set", code: CommandFailure.usageCode)
        }
        let method = method.uppercased()
        guard let schemeEnd = url.range(of: "://") else {
            throw CommandFailure(message: "sign: --url must be absolute (http://host/path)", code: CommandFailure.usageCode)
        }
        let afterScheme = url[schemeEnd.upperBound...]
        let target = afterScheme.firstIndex(of: "/").map { String(afterScheme[$0...]) } ?? "/"
        // What the gateway would refuse (400), refused here with the same words rather
        // than signed: spec/signature.md.
        let query = target.split(separator: "#", maxSplits: 1).first.flatMap { t in t.firstIndex(of: "?").map { String(t[t.index(after: $0)...]) } } ?? ""
        if query.contains("+") {
            throw CommandFailure(message: "sign: a raw + in the query of a signed call is ambiguous: send %2B for a plus, %20 for a space",
                                 code: CommandFailure.usageCode)
        }
        if !CanonicalQuery.repeatedNamesInCanonicalOrder(query) {
            throw CommandFailure(message: "sign: a signed query must send the values of a repeated name in canonical order (spec/signature.md), as they were signed",
                                 code: CommandFailure.usageCode)
        }
        var body: [UInt8] = []
        if let file = bodyFile {
            guard let data = FileManager.default.contents(atPath: file) else {
                throw CommandFailure(message: "sign: cannot read \(file)", code: CommandFailure.usageCode)
            }
            body = Array(data)
        }
        let nonce = nonce ?? (0..<16).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
        let auth = QW1Signer.authorization(keyId: key, secret: secret, salt: salt, method: method,
                                           target: target.split(separator: "#", maxSplits: 1).first.map(String.init) ?? target,
                                           timestamp: timestamp ?? Int64(Date().timeIntervalSince1970), nonce: nonce, body: body)
        guard curl else { return print(auth) }
        var cmd = "curl -sS -X \(method) -H 'Authorization: \(auth)'"
        if let file = bodyFile { cmd += " --data-binary @'\(file)'" }
        print(cmd + " '\(url)'")
    }
}
