/// A JSON value as `StrictJSON` reads it: strings are kept as their UTF-8 bytes (checked),
/// numbers only as "a number" (the envelope has none it reads), and an object's members
/// in the order written.
indirect enum JSONValue {
    case object([(key: String, value: JSONValue)])
    case array([JSONValue])
    case string([UInt8])
    case number
    case bool(Bool)
    case null

    /// What a message calls the value's type.
    var typeName: String {
        switch self {
        case .object: return "an object"
        case .array: return "an array"
        case .string: return "a string"
        case .number: return "a number"
        case .bool: return "a boolean"
        case .null: return "null"
        }
    }
}

/// Where and why a JSON text was refused.
struct JSONSyntaxError: Error, Equatable {
    let offset: Int
    let message: String
}

/// A strict reader of one JSON text (RFC 8259), pure. Refused: anything but one value and
/// whitespace, a trailing comma, a control byte or bad escape in a string, a lone
/// surrogate, bytes that are not UTF-8, a number outside the grammar (`01`, `1.`, `NaN`),
/// a member name given twice in one object (two readers could take either value), and
/// nesting deeper than `maxDepth` (the reader recurses once per level).
///
/// `validate` checks a text without building anything: a batch call's JSON answer is
/// passed on as its own bytes once they are known to be one JSON value.
struct StrictJSON {
    private let b: UnsafeRawBufferPointer
    private var i = 0
    private let maxDepth: Int
    private let build: Bool

    private init(_ bytes: UnsafeRawBufferPointer, maxDepth: Int, build: Bool) {
        b = bytes
        self.maxDepth = maxDepth
        self.build = build
    }

    /// The value `bytes` hold.
    static func parse(_ bytes: UnsafeRawBufferPointer, maxDepth: Int = 16) throws(JSONSyntaxError) -> JSONValue {
        var r = StrictJSON(bytes, maxDepth: maxDepth, build: true)
        return try r.document()
    }

    /// Whether `bytes` are exactly one JSON value (with whitespace around it), as `parse`
    /// reads them, duplicate member names aside (an answer's JSON is the backend's to
    /// shape; it is passed on as it is, not read).
    static func validate(_ bytes: UnsafeRawBufferPointer, maxDepth: Int = 128) -> Bool {
        var r = StrictJSON(bytes, maxDepth: maxDepth, build: false)
        return (try? r.document()) != nil
    }

    private mutating func document() throws(JSONSyntaxError) -> JSONValue {
        skipSpace()
        let v = try value(depth: 0)
        skipSpace()
        guard i == b.count else { throw fail("unexpected bytes after the JSON value") }
        return v
    }

    private func fail(_ message: String) -> JSONSyntaxError { JSONSyntaxError(offset: i, message: message) }

    @inline(__always) private mutating func skipSpace() {
        while i < b.count, b[i] == 0x20 || b[i] == 0x0A || b[i] == 0x0D || b[i] == 0x09 { i += 1 }
    }

    private mutating func value(depth: Int) throws(JSONSyntaxError) -> JSONValue {
        guard i < b.count else { throw fail("a value is missing") }
        switch b[i] {
        case UInt8(ascii: "{"): return try object(depth: depth + 1)
        case UInt8(ascii: "["): return try array(depth: depth + 1)
        case UInt8(ascii: "\""): return .string(try string())
        case UInt8(ascii: "t"): try literal("true"); return .bool(true)
        case UInt8(ascii: "f"): try literal("false"); return .bool(false)
        case UInt8(ascii: "n"): try literal("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): try number(); return .number
        default: throw fail("not a JSON value")
        }
    }

    private mutating func literal(_ word: StaticString) throws(JSONSyntaxError) {
        let n = word.utf8CodeUnitCount
        guard i + n <= b.count else { throw fail("not a JSON value") }
        for k in 0..<n where b[i + k] != word.utf8Start[k] { throw fail("not a JSON value") }
        i += n
    }

    private mutating func object(depth: Int) throws(JSONSyntaxError) -> JSONValue {
        guard depth <= maxDepth else { throw fail("nested deeper than \(maxDepth) levels") }
        i += 1
        var members: [(key: String, value: JSONValue)] = []
        var names: Set<[UInt8]> = []
        skipSpace()
        if i < b.count, b[i] == UInt8(ascii: "}") { i += 1; return .object(members) }
        while true {
            skipSpace()
            guard i < b.count, b[i] == UInt8(ascii: "\"") else { throw fail("an object member must start with its name in quotes") }
            let at = i
            let name = try string()
            skipSpace()
            guard i < b.count, b[i] == UInt8(ascii: ":") else { throw fail("a ':' must follow a member name") }
            i += 1
            skipSpace()
            let v = try value(depth: depth)
            if build {
                guard names.insert(name).inserted else {
                    throw JSONSyntaxError(offset: at, message: "member \"\(String(decoding: name, as: UTF8.self))\" appears twice")
                }
                members.append((String(decoding: name, as: UTF8.self), v))
            }
            skipSpace()
            guard i < b.count else { throw fail("an object is not closed") }
            if b[i] == UInt8(ascii: ",") { i += 1; continue }
            guard b[i] == UInt8(ascii: "}") else { throw fail("expected ',' or '}'") }
            i += 1
            return .object(members)
        }
    }

    private mutating func array(depth: Int) throws(JSONSyntaxError) -> JSONValue {
        guard depth <= maxDepth else { throw fail("nested deeper than \(maxDepth) levels") }
        i += 1
        var items: [JSONValue] = []
        skipSpace()
        if i < b.count, b[i] == UInt8(ascii: "]") { i += 1; return .array(items) }
        while true {
            skipSpace()
            let v = try value(depth: depth)
            if build { items.append(v) }
            skipSpace()
            guard i < b.count else { throw fail("an array is not closed") }
            if b[i] == UInt8(ascii: ",") { i += 1; continue }
            guard b[i] == UInt8(ascii: "]") else { throw fail("expected ',' or ']'") }
            i += 1
            return .array(items)
        }
    }

    /// RFC 8259 6: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`.
    private mutating func number() throws(JSONSyntaxError) {
        @inline(__always) func digit(_ at: Int) -> Bool { at < b.count && b[at] >= 0x30 && b[at] <= 0x39 }
        if b[i] == UInt8(ascii: "-") { i += 1 }
        guard digit(i) else { throw fail("malformed number") }
        if b[i] == 0x30 { i += 1 } else { while digit(i) { i += 1 } }
        if i < b.count, b[i] == UInt8(ascii: ".") {
            i += 1
            guard digit(i) else { throw fail("malformed number") }
            while digit(i) { i += 1 }
        }
        if i < b.count, b[i] == UInt8(ascii: "e") || b[i] == UInt8(ascii: "E") {
            i += 1
            if i < b.count, b[i] == UInt8(ascii: "+") || b[i] == UInt8(ascii: "-") { i += 1 }
            guard digit(i) else { throw fail("malformed number") }
            while digit(i) { i += 1 }
        }
        if digit(i) { throw fail("malformed number") }
    }

    /// A string's content as UTF-8 (escapes decoded); `i` is at its opening quote.
    private mutating func string() throws(JSONSyntaxError) -> [UInt8] {
        i += 1
        var out: [UInt8] = []
        var utf8 = UTF8Validator()
        while i < b.count {
            let c = b[i]
            if c == UInt8(ascii: "\"") {
                guard utf8.isComplete else { throw fail("a string is not UTF-8") }
                i += 1
                return out
            }
            if c < 0x20 { throw fail("a control byte in a string (escape it)") }
            if c == UInt8(ascii: "\\") {
                guard utf8.isComplete else { throw fail("a string is not UTF-8") }
                i += 1
                guard i < b.count else { break }
                let e = b[i]
                i += 1
                switch e {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): if build { out.append(e) }
                case UInt8(ascii: "b"): if build { out.append(0x08) }
                case UInt8(ascii: "f"): if build { out.append(0x0C) }
                case UInt8(ascii: "n"): if build { out.append(0x0A) }
                case UInt8(ascii: "r"): if build { out.append(0x0D) }
                case UInt8(ascii: "t"): if build { out.append(0x09) }
                case UInt8(ascii: "u"):
                    var scalar = try hex4()
                    if scalar >= 0xD800 && scalar <= 0xDBFF {
                        guard i + 1 < b.count, b[i] == UInt8(ascii: "\\"), b[i + 1] == UInt8(ascii: "u") else {
                            throw fail("a lone surrogate in a string")
                        }
                        i += 2
                        let low = try hex4()
                        guard low >= 0xDC00 && low <= 0xDFFF else { throw fail("a lone surrogate in a string") }
                        scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                    } else if scalar >= 0xDC00 && scalar <= 0xDFFF {
                        throw fail("a lone surrogate in a string")
                    }
                    if build, let u = Unicode.Scalar(scalar) { out.append(contentsOf: UTF8.encode(u)!) }
                default:
                    throw fail("a bad escape in a string")
                }
                continue
            }
            guard utf8.feed(c) else { throw fail("a string is not UTF-8") }
            if build { out.append(c) }
            i += 1
        }
        throw fail("a string is not closed")
    }

    private mutating func hex4() throws(JSONSyntaxError) -> UInt32 {
        guard i + 4 <= b.count else { throw fail("a bad \\u escape") }
        var v: UInt32 = 0
        for _ in 0..<4 {
            let c = b[i]
            let d: UInt32
            switch c {
            case 0x30...0x39: d = UInt32(c - 0x30)
            case 0x41...0x46: d = UInt32(c - 0x41 + 10)
            case 0x61...0x66: d = UInt32(c - 0x61 + 10)
            default: throw fail("a bad \\u escape")
            }
            v = v << 4 | d
            i += 1
        }
        return v
    }
}

/// Writes JSON text into a byte array: strings from UTF-8 bytes or from any bytes.
enum JSONWriter {
    private static let hex: [UInt8] = Array("0123456789abcdef".utf8)

    /// A JSON string of `bytes`, which must be UTF-8: `"` `\` and control bytes escaped,
    /// everything else as it is.
    static func appendString(_ bytes: UnsafeRawBufferPointer, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        for c in bytes {
            switch c {
            case UInt8(ascii: "\""): out.append(UInt8(ascii: "\\")); out.append(c)
            case UInt8(ascii: "\\"): out.append(UInt8(ascii: "\\")); out.append(c)
            case 0x0A: out.append(UInt8(ascii: "\\")); out.append(UInt8(ascii: "n"))
            case 0x0D: out.append(UInt8(ascii: "\\")); out.append(UInt8(ascii: "r"))
            case 0x09: out.append(UInt8(ascii: "\\")); out.append(UInt8(ascii: "t"))
            case 0..<0x20, 0x7F:
                out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "u"), 0x30, 0x30, hex[Int(c >> 4)], hex[Int(c & 15)]])
            default: out.append(c)
            }
        }
        out.append(UInt8(ascii: "\""))
    }

    static func appendString(_ s: String, to out: inout [UInt8]) {
        var s = s
        s.withUTF8 { appendString(UnsafeRawBufferPointer($0), to: &out) }
    }

    /// A JSON string of bytes that may not be UTF-8 (a header value's obs-text): valid
    /// UTF-8 passes as it is, any other byte is read as Latin-1 (`\u00XX`).
    static func appendLatin1OrUTF8(_ bytes: UnsafeRawBufferPointer, to out: inout [UInt8]) {
        if UTF8Validator.isValid(bytes) { return appendString(bytes, to: &out) }
        out.append(UInt8(ascii: "\""))
        for c in bytes {
            if c >= 0x80 {
                out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "u"), 0x30, 0x30, hex[Int(c >> 4)], hex[Int(c & 15)]])
            } else {
                withUnsafeBytes(of: c) { one in
                    var piece: [UInt8] = []
                    appendString(one, to: &piece)
                    out.append(contentsOf: piece[1..<(piece.count - 1)])
                }
            }
        }
        out.append(UInt8(ascii: "\""))
    }
}
