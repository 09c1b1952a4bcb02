import Glibc

/// The fields of a `QW1-HMAC-SHA256` Authorization header, as byte ranges into the
/// header value. Parsing is strict: each of Key, Timestamp, Nonce and Signature
/// exactly once, in any order, separated by `,` and optional spaces; field names
/// case-sensitive; each value within its syntax.
public struct QW1Header: Equatable {
    public var key: Range<Int>
    public var timestamp: Int64
    /// The Timestamp digits as sent (they are signed verbatim).
    public var timestampText: Range<Int>
    public var nonce: Range<Int>
    public var signature: Range<Int>

    public enum ParseResult: Equatable {
        /// Not a QW1 header at all (another scheme): `auth_missing` where auth is required.
        case notQW1
        case malformed(String)
        case ok(QW1Header)
    }

    static let scheme: StaticString = "QW1-HMAC-SHA256"

    public static func parse(_ v: UnsafeRawBufferPointer) -> ParseResult {
        let sl = scheme.utf8CodeUnitCount
        guard v.count >= sl, memcmp(v.baseAddress!, scheme.utf8Start, sl) == 0,
              v.count == sl || v[sl] == 0x20 else { return .notQW1 }
        return byteClasses.withUnsafeBufferPointer { classes in parseFields(v, from: sl, classes: classes) }
    }

    /// The fields of the header, by name.
    private enum Field { case key, timestamp, nonce, signature }

    /// The fields after the scheme. A field's name is read first, so its value is scanned
    /// once with that field's own class bit (one table load and test a byte): the scan
    /// stops at the first byte outside the field's syntax, which must then be a separator
    /// (`,` or space) or the end.
    private static func parseFields(_ v: UnsafeRawBufferPointer, from start: Int, classes: UnsafeBufferPointer<UInt8>) -> ParseResult {
        var i = start
        var key: Range<Int>?, nonce: Range<Int>?, sig: Range<Int>?, ts: Range<Int>?
        let n = v.count
        while true {
            while i < n && v[i] == 0x20 { i += 1 }
            if i == n { break }
            let nameStart = i
            while i < n && classes[Int(v[i])] & (Class.separator | Class.equals) == 0 { i += 1 }
            guard i < n, v[i] == UInt8(ascii: "=") else { return .malformed("expected Name=value fields") }
            guard let field = Self.field(v, nameStart..<i) else {
                return .malformed("unknown field \(String(decoding: v[nameStart..<i], as: UTF8.self))")
            }
            i += 1
            let allowed: UInt8
            switch field {
            case .key: allowed = Class.keyByte
            case .timestamp: allowed = Class.digit
            case .nonce: allowed = Class.nonceByte
            case .signature: allowed = Class.lowerHex
            }
            let valueStart = i
            while i < n && classes[Int(v[i])] & allowed != 0 { i += 1 }
            if i < n && classes[Int(v[i])] & Class.separator == 0 { return .malformed(syntax(of: field)) }
            let value = valueStart..<i
            while i < n && v[i] == 0x20 { i += 1 }
            if i < n {
                guard v[i] == UInt8(ascii: ",") else { return .malformed("fields must be separated by commas") }
                i += 1
            }
            switch field {
            case .key:
                if key != nil { return .malformed("Key appears more than once") }
                key = value
            case .timestamp:
                if ts != nil { return .malformed("Timestamp appears more than once") }
                ts = value
            case .nonce:
                if nonce != nil { return .malformed("Nonce appears more than once") }
                nonce = value
            case .signature:
                if sig != nil { return .malformed("Signature appears more than once") }
                sig = value
            }
        }
        guard let key, let ts, let nonce, let sig else { return .malformed("Key, Timestamp, Nonce and Signature are all required") }
        // Every byte of each value is in its field's class (checked by the scans): only the lengths are left.
        guard (1...64).contains(key.count) else { return .malformed(syntax(of: .key)) }
        guard (8...64).contains(nonce.count) else { return .malformed(syntax(of: .nonce)) }
        guard sig.count == 64 else { return .malformed(syntax(of: .signature)) }
        guard (1...12).contains(ts.count) else { return .malformed(syntax(of: .timestamp)) }
        var t: Int64 = 0
        for d in v[ts] { t = t * 10 + Int64(d - 0x30) }
        return .ok(QW1Header(key: key, timestamp: t, timestampText: ts, nonce: nonce, signature: sig))
    }

    private static func syntax(of field: Field) -> String {
        switch field {
        case .key: return "Key must be 1-64 characters of A-Z a-z 0-9 . _ -"
        case .nonce: return "Nonce must be 8-64 characters of A-Z a-z 0-9 _ -"
        case .signature: return "Signature must be 64 lower-case hex characters"
        case .timestamp: return "Timestamp must be Unix seconds"
        }
    }

    /// The field named by `r` (case-sensitive), told apart by length first.
    private static func field(_ v: UnsafeRawBufferPointer, _ r: Range<Int>) -> Field? {
        switch r.count {
        case 3: return named(v, r, "Key") ? .key : nil
        case 5: return named(v, r, "Nonce") ? .nonce : nil
        case 9: return named(v, r, "Timestamp") ? .timestamp : named(v, r, "Signature") ? .signature : nil
        default: return nil
        }
    }

    /// Bits of `byteClasses`: which fields a byte may appear in, and the delimiters.
    enum Class {
        static let keyByte: UInt8 = 1, nonceByte: UInt8 = 2, lowerHex: UInt8 = 4, digit: UInt8 = 8
        /// Ends a value: `,` or space.
        static let separator: UInt8 = 16
        /// Ends a name (with `separator`): `=`.
        static let equals: UInt8 = 32
    }

    /// The class bits of every byte value, from the syntax rules below.
    static let byteClasses: [UInt8] = (0..<256).map { b -> UInt8 in
        let c = UInt8(b)
        var bits: UInt8 = 0
        if isKeyByte(c) { bits |= Class.keyByte }
        if isNonceByte(c) { bits |= Class.nonceByte }
        if isLowerHex(c) { bits |= Class.lowerHex }
        if c >= 0x30 && c <= 0x39 { bits |= Class.digit }
        if c == UInt8(ascii: ",") || c == 0x20 { bits |= Class.separator }
        if c == UInt8(ascii: "=") { bits |= Class.equals }
        return bits
    }

    private static func named(_ v: UnsafeRawBufferPointer, _ r: Range<Int>, _ label: StaticString) -> Bool {
        HTTPSyntax.equals(UnsafeRawBufferPointer(rebasing: v[r]), label)
    }

    @inline(__always) static func isKeyByte(_ c: UInt8) -> Bool { HTTPSyntax.isAlnum(c) || c == UInt8(ascii: ".") || c == UInt8(ascii: "_") || c == UInt8(ascii: "-") }
    @inline(__always) static func isNonceByte(_ c: UInt8) -> Bool { HTTPSyntax.isAlnum(c) || c == UInt8(ascii: "_") || c == UInt8(ascii: "-") }
    @inline(__always) static func isLowerHex(_ c: UInt8) -> Bool { (c >= 0x30 && c <= 0x39) || (c >= 0x61 && c <= 0x66) }
}
