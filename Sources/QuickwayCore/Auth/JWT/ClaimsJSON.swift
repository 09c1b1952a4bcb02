/// A small strict JSON reader (RFC 8259) for JWS headers, JWT claims and JWK sets.
/// Stricter than Foundation's on purpose: a member name repeated in one object is
/// refused (RFC 7515 4: a JOSE header with duplicate names must be rejected, and two
/// readers could otherwise pick different copies), nesting is bounded, and numbers
/// are read as `Double` (claims' times fit exactly below 2^53).
enum ClaimsJSON: Sendable, Equatable {
    case null
    case bool(Bool)
    case number(Double)
    case string(String)
    case array([ClaimsJSON])
    case object([String: ClaimsJSON])

    var string: String? { if case .string(let s) = self { return s }; return nil }
    var number: Double? { if case .number(let d) = self { return d }; return nil }
    var object: [String: ClaimsJSON]? { if case .object(let o) = self { return o }; return nil }
    var array: [ClaimsJSON]? { if case .array(let a) = self { return a }; return nil }

    static let maxDepth = 16

    /// The value `bytes` hold (whitespace around it allowed), or nil.
    static func parse(_ bytes: [UInt8]) -> ClaimsJSON? {
        var r = Reader(bytes: bytes)
        guard let v = r.value(depth: 0) else { return nil }
        r.skipSpace()
        return r.i == bytes.count ? v : nil
    }

    private struct Reader {
        let bytes: [UInt8]
        var i = 0

        mutating func skipSpace() {
            while i < bytes.count, bytes[i] == 0x20 || bytes[i] == 0x09 || bytes[i] == 0x0A || bytes[i] == 0x0D { i += 1 }
        }

        mutating func literal(_ word: String) -> Bool {
            let w = Array(word.utf8)
            guard i + w.count <= bytes.count, Array(bytes[i..<(i + w.count)]) == w else { return false }
            i += w.count
            return true
        }

        mutating func value(depth: Int) -> ClaimsJSON? {
            guard depth <= ClaimsJSON.maxDepth else { return nil }
            skipSpace()
            guard i < bytes.count else { return nil }
            switch bytes[i] {
            case UInt8(ascii: "{"): return object(depth: depth)
            case UInt8(ascii: "["): return array(depth: depth)
            case UInt8(ascii: "\""): return string().map(ClaimsJSON.string)
            case UInt8(ascii: "t"): return literal("true") ? .bool(true) : nil
            case UInt8(ascii: "f"): return literal("false") ? .bool(false) : nil
            case UInt8(ascii: "n"): return literal("null") ? .null : nil
            default: return number()
            }
        }

        mutating func object(depth: Int) -> ClaimsJSON? {
            i += 1
            var members: [String: ClaimsJSON] = [:]
            skipSpace()
            if i < bytes.count, bytes[i] == UInt8(ascii: "}") { i += 1; return .object(members) }
            while true {
                skipSpace()
                guard i < bytes.count, bytes[i] == UInt8(ascii: "\""), let name = string() else { return nil }
                skipSpace()
                guard i < bytes.count, bytes[i] == UInt8(ascii: ":") else { return nil }
                i += 1
                guard let v = value(depth: depth + 1) else { return nil }
                guard members.updateValue(v, forKey: name) == nil else { return nil }   // a duplicate name
                skipSpace()
                guard i < bytes.count else { return nil }
                if bytes[i] == UInt8(ascii: ",") { i += 1; continue }
                if bytes[i] == UInt8(ascii: "}") { i += 1; return .object(members) }
                return nil
            }
        }

        mutating func array(depth: Int) -> ClaimsJSON? {
            i += 1
            var items: [ClaimsJSON] = []
            skipSpace()
            if i < bytes.count, bytes[i] == UInt8(ascii: "]") { i += 1; return .array(items) }
            while true {
                guard let v = value(depth: depth + 1) else { return nil }
                items.append(v)
                skipSpace()
                guard i < bytes.count else { return nil }
                if bytes[i] == UInt8(ascii: ",") { i += 1; continue }
                if bytes[i] == UInt8(ascii: "]") { i += 1; return .array(items) }
                return nil
            }
        }

        mutating func hex4() -> UInt32? {
            guard i + 4 <= bytes.count else { return nil }
            var v: UInt32 = 0
            for _ in 0..<4 {
                let c = bytes[i]
                let d: UInt32
                switch c {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): d = UInt32(c - UInt8(ascii: "0"))
                case UInt8(ascii: "a")...UInt8(ascii: "f"): d = UInt32(c - UInt8(ascii: "a") + 10)
                case UInt8(ascii: "A")...UInt8(ascii: "F"): d = UInt32(c - UInt8(ascii: "A") + 10)
                default: return nil
                }
                v = v << 4 | d
                i += 1
            }
            return v
        }

        /// A string starting at the quote; its text must be valid UTF-8.
        mutating func string() -> String? {
            i += 1
            var out: [UInt8] = []
            while i < bytes.count {
                let c = bytes[i]
                if c == UInt8(ascii: "\"") {
                    i += 1
                    return String(validating: out, as: UTF8.self)
                }
                if c < 0x20 { return nil }
                if c != UInt8(ascii: "\\") { out.append(c); i += 1; continue }
                i += 1
                guard i < bytes.count else { return nil }
                let e = bytes[i]
                i += 1
                switch e {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): out.append(e)
                case UInt8(ascii: "b"): out.append(0x08)
                case UInt8(ascii: "f"): out.append(0x0C)
                case UInt8(ascii: "n"): out.append(0x0A)
                case UInt8(ascii: "r"): out.append(0x0D)
                case UInt8(ascii: "t"): out.append(0x09)
                case UInt8(ascii: "u"):
                    guard var cp = hex4() else { return nil }
                    if (0xD800..<0xDC00).contains(cp) {
                        guard i + 2 <= bytes.count, bytes[i] == UInt8(ascii: "\\"), bytes[i + 1] == UInt8(ascii: "u") else { return nil }
                        i += 2
                        guard let low = hex4(), (0xDC00..<0xE000).contains(low) else { return nil }
                        cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00)
                    } else if (0xDC00..<0xE000).contains(cp) {
                        return nil
                    }
                    guard let scalar = Unicode.Scalar(cp) else { return nil }
                    out.append(contentsOf: Array(String(Character(scalar)).utf8))
                default: return nil
                }
            }
            return nil
        }

        mutating func number() -> ClaimsJSON? {
            let start = i
            if i < bytes.count, bytes[i] == UInt8(ascii: "-") { i += 1 }
            let digits = { (r: inout Reader) -> Int in
                let s = r.i
                while r.i < r.bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(r.bytes[r.i]) { r.i += 1 }
                return r.i - s
            }
            let intStart = i
            let n = digits(&self)
            guard n > 0, !(n > 1 && bytes[intStart] == UInt8(ascii: "0")) else { return nil }
            if i < bytes.count, bytes[i] == UInt8(ascii: ".") {
                i += 1
                guard digits(&self) > 0 else { return nil }
            }
            if i < bytes.count, bytes[i] == UInt8(ascii: "e") || bytes[i] == UInt8(ascii: "E") {
                i += 1
                if i < bytes.count, bytes[i] == UInt8(ascii: "+") || bytes[i] == UInt8(ascii: "-") { i += 1 }
                guard digits(&self) > 0 else { return nil }
            }
            guard let d = Double(String(decoding: bytes[start..<i], as: UTF8.self)), d.isFinite else { return nil }
            return .number(d)
        }
    }
}
