#if canImport(Glibc)
import Glibc
#endif
/// Byte classes of RFC 9110/9112, as comparisons and bitmasks so the parser's inner
/// loops are a few instructions per byte.
public enum HTTPSyntax {
    /// RFC 9110 tchar, the characters allowed in methods and header names
    /// (`!#$%&'*+-.^_`|~`, digits, letters): one load from `tokenTable`. A unit test
    /// checks every byte against the RFC's list.
    @inline(__always) public static func isTokenChar(_ c: UInt8) -> Bool {
        tokenTable.utf8Start[Int(c)] == UInt8(ascii: "1")
    }

    /// `1` for each tchar byte value (0 to 255; rows of 32: controls, ` ` to `?`, `@` to
    /// `_`, `` ` `` to DEL, then the four rows from 0x80, all `0`). A computed string
    /// literal, not a stored array: its bytes are constant data, read with no lazy
    /// initialiser (a global array's accessor ran on every byte).
    @inline(__always) static var tokenTable: StaticString {
        "0000000000000000000000000000000001011111001101101111111111000000011111111111111111111111111000111111111111111111111111111110101000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
    }

    @inline(__always) public static func isAlnum(_ c: UInt8) -> Bool {
        (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A)
    }
    /// Field value bytes: visible ASCII, obs-text, space and tab; no CTLs (NUL, bare CR, DEL).
    @inline(__always) static func isFieldValueByte(_ c: UInt8) -> Bool {
        c == 0x09 || (c >= 0x20 && c != 0x7F)
    }
    /// Whether any byte of `w` is below `n` (at most 128): "hasless" from Bit Twiddling
    /// Hacks. The answer (any or none) is exact; it tests eight bytes in a few
    /// instructions, so the scanning loops skip runs of ordinary text a word at a time.
    @inline(__always) static func hasByte(below n: UInt8, in w: UInt64) -> Bool {
        bytesBelow(n, in: w) != 0
    }

    /// High bits flagging bytes of `w` below `n` (at most 128). The lowest flag is exact
    /// (a false flag can only sit above a true one, through a borrow), so on a
    /// little-endian machine `firstFlagged` of it is the index of the first such byte.
    /// Callers look at the byte they land on before acting on it, so a false flag (on a
    /// big-endian machine) costs only a step.
    @inline(__always) static func bytesBelow(_ n: UInt8, in w: UInt64) -> UInt64 {
        let ones: UInt64 = 0x0101_0101_0101_0101
        return (w &- ones &* UInt64(n)) & ~w & (ones &* 0x80)
    }

    /// The index (0-7, in memory order) of the first byte a non-zero flag mask marks.
    @inline(__always) static func firstFlagged(_ mask: UInt64) -> Int {
        #if _endian(little)
        return mask.trailingZeroBitCount >> 3
        #else
        return mask.leadingZeroBitCount >> 3
        #endif
    }

    /// Whether any byte of `w` equals `b`.
    @inline(__always) static func hasByte(_ b: UInt8, in w: UInt64) -> Bool {
        hasByte(below: 1, in: w ^ (0x0101_0101_0101_0101 &* UInt64(b)))
    }

    /// The index of the first byte in `raw[from..<to]` that is not a field-value byte
    /// (`isFieldValueByte`: a control other than tab, or DEL; CR and LF included), or
    /// `to`. Eight bytes at a time while none of them needs a closer look.
    @inline(__always) static func fieldValueEnd(_ raw: UnsafeRawBufferPointer, from: Int, to: Int) -> Int {
        var i = from
        while true {
            while i + 8 <= to {
                let flagged = belowOrDel(0x20, raw.loadUnaligned(fromByteOffset: i, as: UInt64.self))
                if flagged != 0 {
                    // Straight to the first control byte or DEL (or tab, which is allowed).
                    i += firstFlagged(flagged)
                    break
                }
                i += 8
            }
            if i + 8 > to && i < to && to - from >= 8 {
                // The tail, as the last eight bytes (overlapping bytes already looked at,
                // which are clean): one word instead of up to seven bytes.
                let flagged = belowOrDel(0x20, raw.loadUnaligned(fromByteOffset: to - 8, as: UInt64.self))
                if flagged == 0 { return to }
                i = max(i, to - 8 + firstFlagged(flagged))
            }
            // A word that needs a look (or a short tail): one byte, then words again.
            guard i < to, isFieldValueByte(raw[i]) else { return i }
            i += 1
        }
    }

    /// High bits flagging the bytes of `w` below `bound` (0x20 for field values, tab
    /// included; 0x21 for targets, space included) or DEL; the lowest flag is exact
    /// (`bytesBelow`).
    @inline(__always) static func belowOrDel(_ bound: UInt8, _ w: UInt64) -> UInt64 {
        bytesBelow(bound, in: w) | bytesBelow(1, in: w ^ (0x0101_0101_0101_0101 &* 0x7F))
    }

    /// Request-target bytes: visible ASCII and obs-text only, no spaces or controls.
    @inline(__always) static func isTargetByte(_ c: UInt8) -> Bool { c > 0x20 && c != 0x7F }

    /// The index of the first byte in `raw[from..<to]` that is not a target byte
    /// (`isTargetByte`), or `to`: eight bytes at a time, then straight to the first
    /// flagged one.
    @inline(__always) static func targetEnd(_ raw: UnsafeRawBufferPointer, from: Int, to: Int) -> Int {
        var i = from
        while i + 8 <= to {
            let w = raw.loadUnaligned(fromByteOffset: i, as: UInt64.self)
            let flagged = belowOrDel(0x21, w)
            if flagged != 0 {
                // To the first flagged byte, then byte by byte: exact on little-endian
                // machines, and on big-endian ones (where a flag can be false) too.
                i += firstFlagged(flagged)
                break
            }
            i += 8
        }
        while i < to && isTargetByte(raw[i]) { i += 1 }
        return i
    }

    /// Whether a response puts a body on the wire (RFC 9110 6.4.1): not to HEAD, not 1xx,
    /// 204 or 304.
    @inline(__always) static func responseHasBody(toHead: Bool, status: Int) -> Bool {
        !toHead && status >= 200 && status != 204 && status != 304
    }

    @inline(__always) static func lower(_ c: UInt8) -> UInt8 { (c >= 0x41 && c <= 0x5A) ? c | 0x20 : c }

    /// Case-insensitive comparison of bytes with a lower-case ASCII literal.
    /// `bytes` are exactly `literal` (byte for byte: for names already known to be lower
    /// case, as HTTP/2's are). One `memcmp`.
    @inline(__always)
    static func equals(_ bytes: UnsafeRawBufferPointer, _ literal: StaticString) -> Bool {
        bytes.count == literal.utf8CodeUnitCount && (bytes.count == 0 || memcmp(bytes.baseAddress!, literal.utf8Start, bytes.count) == 0)
    }

    @inline(__always)
    static func equalsLowercase(_ bytes: UnsafeRawBufferPointer, _ range: Range<Int>, _ literal: StaticString) -> Bool {
        let n = literal.utf8CodeUnitCount
        guard range.count == n else { return false }
        guard n > 0 else { return true }
        let p = bytes.baseAddress! + range.lowerBound
        let lit = UnsafeRawPointer(literal.utf8Start)
        if n < 8 {
            for i in 0..<n where lower(p.load(fromByteOffset: i, as: UInt8.self)) != lit.load(fromByteOffset: i, as: UInt8.self) {
                return false
            }
            return true
        }
        // Eight bytes at a time; the last word overlaps the one before it when `n` is not
        // a multiple of eight (no byte outside the range is read).
        var i = 0
        while true {
            let at = min(i, n - 8)
            if lowercased(p.loadUnaligned(fromByteOffset: at, as: UInt64.self)) != lit.loadUnaligned(fromByteOffset: at, as: UInt64.self) {
                return false
            }
            if at == n - 8 { return true }
            i += 8
        }
    }

    /// The same against a lower-case name held as bytes (a route's `vary` names).
    static func equalsLowercase(_ bytes: UnsafeRawBufferPointer, _ range: Range<Int>, _ lowercaseName: [UInt8]) -> Bool {
        range.count == lowercaseName.count && zip(bytes[range], lowercaseName).allSatisfy { lower($0) == $1 }
    }

    /// The eight bytes of `w` with `A`-`Z` made lower case and every other byte as it
    /// is (exact for all 256 values: bytes from 0x80 are left alone).
    @inline(__always) static func lowercased(_ w: UInt64) -> UInt64 {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let heptets = w & (ones &* 0x7F)
        // High bit set where a byte (below 0x80) is at least `A`, and where at least `[`.
        let atLeastA = heptets &+ ones &* (0x80 - 0x41)
        let pastZ = heptets &+ ones &* (0x80 - 0x5B)
        let upper = atLeastA & ~pastZ & ~w & (ones &* 0x80)
        return w | (upper >> 2)
    }

    @inline(__always) static func hexValue(_ c: UInt8) -> Int? {
        switch c {
        case 0x30...0x39: return Int(c - 0x30)
        case 0x41...0x46: return Int(c - 0x41 + 10)
        case 0x61...0x66: return Int(c - 0x61 + 10)
        default: return nil
        }
    }

    /// Letters, digits, `-`, `.`, `_`: one load from `hostNameTable`.
    @inline(__always) static func isHostNameByte(_ c: UInt8) -> Bool {
        hostNameTable.utf8Start[Int(c)] == UInt8(ascii: "1")
    }

    /// `1` for each host-name byte, 0 to 255 (laid out as `tokenTable`). A unit test
    /// checks every byte against the list above.
    @inline(__always) static var hostNameTable: StaticString {
        "0000000000000000000000000000000000000000000001101111111111000000011111111111111111111111111000010111111111111111111111111110000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
    }

    /// `Host` syntax (RFC 9110 7.2 with RFC 3986 3.2.2, kept to what names a server):
    /// empty, or a name of letters, digits, `-`, `.`, `_` (or an IPv4 address), or an
    /// IPv6 address in brackets; then an optional `:` port of 1-5 digits. Anything else
    /// (`/`, `@`, `%`, spaces...) would let two requests that name different hosts, or
    /// a host and a path, share a cache key.
    static func isValidHost(_ raw: UnsafeRawBufferPointer, _ r: Range<Int>) -> Bool {
        guard r.count <= 261 else { return false }
        var i = r.lowerBound
        let end = r.upperBound
        if i == end { return true }
        if raw[i] == UInt8(ascii: "[") {
            i += 1
            let start = i
            while i < end, raw[i] != UInt8(ascii: "]") {
                let c = raw[i]
                guard hexValue(c) != nil || c == UInt8(ascii: ":") || c == UInt8(ascii: ".") else { return false }
                i += 1
            }
            guard i < end, i > start else { return false }
            i += 1
        } else {
            let start = i
            // Host-name bytes (`:` is not one), then the port or the end.
            while i < end && isHostNameByte(raw[i]) { i += 1 }
            guard i > start else { return false }
        }
        if i == end { return true }
        guard raw[i] == UInt8(ascii: ":") else { return false }
        let digits = end - i - 1
        guard digits >= 1 && digits <= 5 else { return false }
        for p in (i + 1)..<end where !(raw[p] >= 0x30 && raw[p] <= 0x39) { return false }
        return true
    }
}
