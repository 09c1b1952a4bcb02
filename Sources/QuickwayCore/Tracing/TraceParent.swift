/// W3C Trace Context `traceparent` (https://www.w3.org/TR/trace-context/, section 3.2),
/// read strictly and written in version `00`. Pure byte work, tested against the
/// spec's examples (`TraceContextTests`).
///
/// Reading: `version "-" trace-id "-" parent-id "-" trace-flags`, lowercase hex only.
/// Version `00` is exactly 55 bytes. Version `ff` is invalid. A higher version (a future
/// one) is read by the spec's rule: at least 55 bytes, the first four fields as version
/// `00` defines them, and if longer, a `-` at byte 55 before whatever the future version
/// adds (which is ignored). An all-zero trace id or parent id is invalid. Of the flags
/// only `sampled` (bit 0) is read; the gateway's own header carries only that bit.
struct TraceParent: Equatable {
    /// The 16-byte trace id as two big-endian words (`hi` first on the wire).
    var traceHi: UInt64
    var traceLo: UInt64
    /// The caller's span id (the parent of the gateway's span).
    var parentId: UInt64
    var sampled: Bool

    /// The header's length in version `00`.
    static let length = 55

    /// The header as the client sent it, or nil if it is not a valid one.
    static func parse(_ v: UnsafeRawBufferPointer) -> TraceParent? {
        guard v.count >= length else { return nil }
        guard let version = hexByte(v, 0), v[2] == dash, v[35] == dash, v[52] == dash else { return nil }
        if version == 0xff { return nil }
        if version == 0 {
            guard v.count == length else { return nil }
        } else if v.count > length {
            guard v[length] == dash else { return nil }
        }
        guard let hi = hexWord(v, 3), let lo = hexWord(v, 19), let parent = hexWord(v, 36), let flags = hexByte(v, 53) else { return nil }
        if hi == 0 && lo == 0 { return nil }
        if parent == 0 { return nil }
        return TraceParent(traceHi: hi, traceLo: lo, parentId: parent, sampled: flags & 1 == 1)
    }

    static func parse(_ s: String) -> TraceParent? {
        var s = s
        return s.withUTF8 { parse(UnsafeRawBufferPointer($0)) }
    }

    /// `00-<trace>-<span>-<flags>`: the header the gateway sends for span `spanId` of the
    /// trace `hi`/`lo`.
    static func write(traceHi hi: UInt64, traceLo lo: UInt64, spanId: UInt64, sampled: Bool, into w: inout BufferWriter) {
        // Stored in place a word at a time (unaligned stores): one bounds check, no copy.
        store(traceHi: hi, traceLo: lo, spanId: spanId, sampled: sampled, at: w.take(length))
    }

    /// The 55 bytes of the header at `b`.
    @inline(__always)
    static func store(traceHi hi: UInt64, traceLo lo: UInt64, spanId: UInt64, sampled: Bool, at b: UnsafeMutableRawPointer) {
        b.storeBytes(of: UInt8(ascii: "0"), toByteOffset: 0, as: UInt8.self)
        b.storeBytes(of: UInt8(ascii: "0"), toByteOffset: 1, as: UInt8.self)
        b.storeBytes(of: UInt8(ascii: "-"), toByteOffset: 2, as: UInt8.self)
        store(hi, b, 3); store(lo, b, 19)
        b.storeBytes(of: UInt8(ascii: "-"), toByteOffset: 35, as: UInt8.self)
        store(spanId, b, 36)
        b.storeBytes(of: UInt8(ascii: "-"), toByteOffset: 52, as: UInt8.self)
        b.storeBytes(of: UInt8(ascii: "0"), toByteOffset: 53, as: UInt8.self)
        b.storeBytes(of: sampled ? UInt8(ascii: "1") : UInt8(ascii: "0"), toByteOffset: 54, as: UInt8.self)
    }

    /// The sixteen hex digits of `x` at `offset`.
    @inline(__always)
    static func store(_ x: UInt64, _ b: UnsafeMutableRawPointer, _ offset: Int) {
        store(hexWords(x), b, offset)
    }

    /// Sixteen hex digits (`hexWords`) at `offset`.
    @inline(__always)
    static func store(_ digits: (UInt64, UInt64), _ b: UnsafeMutableRawPointer, _ offset: Int) {
        b.storeBytes(of: digits.0, toByteOffset: offset, as: UInt64.self)
        b.storeBytes(of: digits.1, toByteOffset: offset + 8, as: UInt64.self)
    }

    /// The sixteen hex digits of `x` as two words, in memory order (stored as they are,
    /// they read left to right).
    @inline(__always)
    static func hexWords(_ x: UInt64) -> (UInt64, UInt64) {
        (hex8(UInt32(truncatingIfNeeded: x >> 32)).bigEndian, hex8(UInt32(truncatingIfNeeded: x)).bigEndian)
    }

    /// The trace id as 32 lowercase hex digits (the access log, tests).
    static func traceIdHex(_ hi: UInt64, _ lo: UInt64) -> String {
        var out = [UInt8](repeating: 0, count: 32)
        fillHex(hi, &out, 0); fillHex(lo, &out, 16)
        return String(decoding: out, as: UTF8.self)
    }

    static func spanIdHex(_ id: UInt64) -> String {
        var out = [UInt8](repeating: 0, count: 16)
        fillHex(id, &out, 0)
        return String(decoding: out, as: UTF8.self)
    }

    // MARK: hex

    private static let dash = UInt8(ascii: "-")
    static let digits: StaticString = "0123456789abcdef"

    /// A lowercase hex digit's value; 0xff for anything else (upper case included: the
    /// spec allows lowercase only).
    @inline(__always)
    static func nibble(_ b: UInt8) -> UInt8 {
        switch b {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return b &- UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return b &- UInt8(ascii: "a") &+ 10
        default: return 0xff
        }
    }

    @inline(__always)
    private static func hexByte(_ v: UnsafeRawBufferPointer, _ at: Int) -> UInt8? {
        let a = nibble(v[at]), b = nibble(v[at + 1])
        guard a < 16, b < 16 else { return nil }
        return a << 4 | b
    }

    /// Sixteen hex digits at `at` as a word.
    @inline(__always)
    private static func hexWord(_ v: UnsafeRawBufferPointer, _ at: Int) -> UInt64? {
        var x: UInt64 = 0
        for i in at..<(at + 16) {
            let n = nibble(v[i])
            guard n < 16 else { return nil }
            x = x << 4 | UInt64(n)
        }
        return x
    }

    /// Sixteen lowercase hex digits of `x`, most significant first.
    @inline(__always)
    static func putHex(_ x: UInt64, _ w: inout BufferWriter) {
        var digits = (hex8(UInt32(truncatingIfNeeded: x >> 32)).bigEndian, hex8(UInt32(truncatingIfNeeded: x)).bigEndian)
        withUnsafeBytes(of: &digits) { w.put($0) }
    }

    /// The eight hex digits of `x` as the bytes of a word, the first digit in its most
    /// significant byte (a word at a time: each nibble spread to a byte, then `0`-`9`
    /// or `a`-`f` added without a branch). Every request's `traceparent` is three of these.
    @inline(__always)
    static func hex8(_ x: UInt32) -> UInt64 {
        var v = UInt64(x)
        v = (v | v << 16) & 0x0000_FFFF_0000_FFFF
        v = (v | v << 8) & 0x00FF_00FF_00FF_00FF
        v = (v | v << 4) & 0x0F0F_0F0F_0F0F_0F0F
        let letters = ((v &+ 0x0606_0606_0606_0606) >> 4) & 0x0101_0101_0101_0101
        return v &+ 0x3030_3030_3030_3030 &+ letters &* 0x27
    }

    static func fillHex(_ x: UInt64, _ out: inout [UInt8], _ at: Int) {
        let digits = (hex8(UInt32(truncatingIfNeeded: x >> 32)).bigEndian, hex8(UInt32(truncatingIfNeeded: x)).bigEndian)
        withUnsafeBytes(of: digits) { for i in 0..<16 { out[at + i] = $0[i] } }
    }
}

/// W3C `tracestate` (section 3.3): passed on as received, never grown by the gateway
/// (it adds no member of its own), and only when it is a valid list within the spec's
/// bounds: at most 32 list-members and 512 bytes. Anything else is dropped whole: the
/// spec lets a vendor that cannot read the header discard it, and a header the
/// gateway could read two ways is never passed on.
enum TraceState {
    static let maxMembers = 32
    static let maxBytes = 512

    /// Whether `v` (the combined field value) is a `tracestate` to pass on as it is.
    static func isValid(_ v: UnsafeRawBufferPointer) -> Bool {
        guard v.count <= maxBytes else { return false }
        var members = 0
        var keys: [Range<Int>] = []
        var i = 0
        while i <= v.count {
            // One list-member (or an empty one) up to the next comma.
            var end = i
            while end < v.count && v[end] != UInt8(ascii: ",") { end += 1 }
            var s = i, e = end
            while s < e && (v[s] == 0x20 || v[s] == 0x09) { s += 1 }
            while e > s && (v[e - 1] == 0x20 || v[e - 1] == 0x09) { e -= 1 }
            if s < e {
                guard let eq = (s..<e).first(where: { v[$0] == UInt8(ascii: "=") }),
                      isKey(v, s..<eq), isValue(v, (eq + 1)..<e) else { return false }
                members += 1
                guard members <= maxMembers else { return false }
                // Keys are unique within a list.
                for k in keys where k.count == eq - s && zip(v[k], v[s..<eq]).allSatisfy({ $0 == $1 }) { return false }
                keys.append(s..<eq)
            }
            i = end + 1
        }
        return true
    }

    /// `key = simple-key / multi-tenant-key`; `simple-key = lcalpha 0*255(lcalpha / DIGIT
    /// / "_" / "-"/ "*" / "/")`; `multi-tenant-key = tenant-id "@" system-id`, the tenant
    /// `(lcalpha / DIGIT) 0*240(...)`, the system `lcalpha 0*13(...)`.
    private static func isKey(_ v: UnsafeRawBufferPointer, _ r: Range<Int>) -> Bool {
        guard !r.isEmpty else { return false }
        if let at = r.first(where: { v[$0] == UInt8(ascii: "@") }) {
            let tenant = r.lowerBound..<at, system = (at + 1)..<r.upperBound
            guard (1...241).contains(tenant.count), (1...14).contains(system.count) else { return false }
            guard isLower(v[tenant.lowerBound]) || isDigit(v[tenant.lowerBound]), isLower(v[system.lowerBound]) else { return false }
            return tenant.dropFirst().allSatisfy { isKeyChar(v[$0]) } && system.dropFirst().allSatisfy { isKeyChar(v[$0]) }
        }
        guard r.count <= 256, isLower(v[r.lowerBound]) else { return false }
        return r.dropFirst().allSatisfy { isKeyChar(v[$0]) }
    }

    /// `value = 0*255(chr) nblk-chr`; `chr = %x20 / nblk-chr`; `nblk-chr = %x21-2B / %x2D-3C / %x3E-7E`.
    private static func isValue(_ v: UnsafeRawBufferPointer, _ r: Range<Int>) -> Bool {
        guard (1...256).contains(r.count) else { return false }
        for i in r {
            let b = v[i]
            if b == 0x20 { continue }
            guard b >= 0x21 && b <= 0x7e && b != UInt8(ascii: ",") && b != UInt8(ascii: "=") else { return false }
        }
        return v[r.upperBound - 1] != 0x20
    }

    @inline(__always) private static func isLower(_ b: UInt8) -> Bool { b >= UInt8(ascii: "a") && b <= UInt8(ascii: "z") }
    @inline(__always) private static func isDigit(_ b: UInt8) -> Bool { b >= UInt8(ascii: "0") && b <= UInt8(ascii: "9") }
    @inline(__always) private static func isKeyChar(_ b: UInt8) -> Bool {
        isLower(b) || isDigit(b) || b == UInt8(ascii: "_") || b == UInt8(ascii: "-") || b == UInt8(ascii: "*") || b == UInt8(ascii: "/")
    }
}
