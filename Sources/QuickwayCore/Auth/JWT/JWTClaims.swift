/// What a verified token says, as the stage uses it: the subject (the caller's identity
/// for limits, the cache and the log), when it expires, its claims for each route's
/// `required_claims`, and the header lines `forward_claims` sends upstream. Immutable;
/// one per verified token, kept in the worker's token cache.
final class JWTClaims {
    let subject: String
    /// `exp`, Unix seconds.
    let expires: Int64
    let claims: [String: ClaimsJSON]
    /// The provider's `forward_claims` for this token: the names every request on the
    /// route drops, and the lines of the claims it carries.
    let forwarded: HeaderRules

    init(subject: String, expires: Int64, claims: [String: ClaimsJSON], forwarded: HeaderRules) {
        self.subject = subject
        self.expires = expires
        self.claims = claims
        self.forwarded = forwarded
    }

    /// The first of `required` the token does not satisfy (nil: all hold). A string claim
    /// must equal the value; `scope` (space-separated, RFC 8693 4.2) and list claims
    /// must contain it.
    func unmet(_ required: [String: String]) -> String? {
        for (name, want) in required.sorted(by: { $0.key < $1.key }) {
            switch claims[name] {
            case .string(let s)?:
                if s == want { continue }
                if name == "scope" || name == "scp", s.split(separator: " ").contains(Substring(want)) { continue }
            case .array(let items)?:
                if items.contains(.string(want)) { continue }
            case .bool(let b)?:
                if (b ? "true" : "false") == want { continue }
            default:
                break
            }
            return name == "scope" ? "the token's scope does not include \(want)" : "the token's \(name) claim is not \(want)"
        }
        return nil
    }

    /// A claim as a header value: a string, a number or a boolean; a list of strings
    /// joined by commas. Nil for other kinds, and for text a header cannot carry
    /// (control bytes: the header would be cut or a new one injected).
    static func headerValue(_ v: ClaimsJSON) -> String? {
        let text: String
        switch v {
        case .string(let s): text = s
        case .bool(let b): text = b ? "true" : "false"
        case .number(let d):
            text = d == d.rounded(.towardZero) && abs(d) < 1e15 ? String(Int64(d)) : String(d)
        case .array(let items):
            let strings = items.compactMap(\.string)
            guard strings.count == items.count else { return nil }
            text = strings.joined(separator: ",")
        default: return nil
        }
        guard text.utf8.count <= 1024, text.utf8.allSatisfy({ HTTPSyntax.isFieldValueByte($0) }) else { return nil }
        return text.trimmingSpaces
    }
}

extension String {
    /// Without spaces and tabs at either end (a field value cannot keep them).
    var trimmingSpaces: String {
        var s = Substring(self)
        while let f = s.first, f == " " || f == "\t" { s = s.dropFirst() }
        while let l = s.last, l == " " || l == "\t" { s = s.dropLast() }
        return String(s)
    }
}
