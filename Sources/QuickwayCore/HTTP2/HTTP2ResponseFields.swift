#if canImport(Glibc)
import Glibc
#endif
/// A response head as HTTP/2 header fields: `:status`, the head's `Name: value` lines
/// with lower-case names, the gateway's own fields (`x-request-id`, `x-cache`, `age`) and
/// `content-length` when the length is known. Fields that mean nothing in HTTP/2
/// (RFC 9113 8.2.2: `connection`, `keep-alive`, `proxy-connection`, `transfer-encoding`,
/// `upgrade`) are left out, and so is any `content-length` in the lines (the one the
/// pipeline states is the one sent). Pure: the fields are written into one flat buffer
/// as (name, value) ranges, which the codec hands nghttp2 as pointers.
struct HTTP2ResponseFields {
    /// Names and values, back to back.
    private(set) var bytes: [UInt8] = []
    /// (name, value) ranges into `bytes`.
    private(set) var fields: [(name: Range<Int>, value: Range<Int>)] = []
    /// Index in `fields` of `x-request-id`, whose value never repeats: it is sent
    /// without HPACK indexing, or every answer would add an entry that is never used and
    /// lengthen the encoder's search chain, which each later field is looked up along
    /// (docs/benchmarks-history.md, "sent without HPACK indexing").
    private(set) var uniqueValueField = -1

    init(head: ResponseHead) {
        let (requestId, cacheStatus, age) = (head.requestId, head.cacheStatus, head.age)
        // Everything is written through one pointer into an array sized once: names and
        // values never take more than their lines, plus the gateway's own fields (an
        // append per byte checks the array's uniqueness and capacity for every byte).
        let lines = head.headerLines
        let capacity = (lines?.count ?? 0) + requestId.countBound + (cacheStatus?.utf8CodeUnitCount ?? 0) + 128
        var fields: [(name: Range<Int>, value: Range<Int>)] = []
        fields.reserveCapacity(16)
        var unique = -1
        bytes = ByteArrays.make(capacity: capacity) { buffer in
            var w = Writer(out: buffer)
            w.add(":status", decimal: head.status, to: &fields)
            if let lines { w.addLines(lines, to: &fields) }
            unique = fields.count
            requestId.withBytes { w.add("x-request-id", $0, to: &fields) }
            if let cacheStatus { w.add("x-cache", UnsafeRawBufferPointer(start: cacheStatus.utf8Start, count: cacheStatus.utf8CodeUnitCount), to: &fields) }
            if let age { w.add("age", decimal: age, to: &fields) }
            // As for HTTP/1.1 (RFC 9110 8.6): none on 1xx and 204; a 304 or a HEAD answer
            // may state the length the GET would have had.
            if head.status >= 200 && head.status != 204, case .known(let n) = head.length {
                w.add("content-length", decimal: n, to: &fields)
            }
            return w.count
        }
        self.fields = fields
        uniqueValueField = unique
    }

    /// Whether the field list holds `name` (lower case), for tests.
    func value(of name: String) -> String? {
        for f in fields where bytes[f.name].elementsEqual(name.utf8) { return String(decoding: bytes[f.value], as: UTF8.self) }
        return nil
    }

    /// Writes names and values into the array's storage (sized by the caller to hold them).
    private struct Writer {
        let out: UnsafeMutableRawBufferPointer
        var count = 0

        mutating func copy(_ b: UnsafeRawBufferPointer) {
            guard b.count > 0 else { return }
            precondition(count + b.count <= out.count)
            (out.baseAddress! + count).copyMemory(from: b.baseAddress!, byteCount: b.count)
            count += b.count
        }

        mutating func add(_ name: StaticString, _ value: UnsafeRawBufferPointer, to fields: inout [(name: Range<Int>, value: Range<Int>)]) {
            let start = count
            copy(UnsafeRawBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount))
            let mid = count
            copy(value)
            fields.append((start..<mid, mid..<count))
        }

        mutating func add(_ name: StaticString, decimal: Int, to fields: inout [(name: Range<Int>, value: Range<Int>)]) {
            var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)   // 24 bytes: any Int in decimal
            let n = withUnsafeMutableBytes(of: &digits) { d -> Int in
                var v = UInt64(max(0, decimal))
                var i = d.count
                repeat { i -= 1; d[i] = UInt8(ascii: "0") + UInt8(v % 10); v /= 10 } while v > 0
                return d.count - i
            }
            withUnsafeBytes(of: &digits) { d in add(name, UnsafeRawBufferPointer(rebasing: d[(d.count - n)...]), to: &fields) }
        }

        /// The head's `Name: value` lines: names lower-cased, values trimmed, the fields
        /// that mean nothing in HTTP/2 and any `content-length` left out.
        mutating func addLines(_ lines: UnsafeRawBufferPointer, to fields: inout [(name: Range<Int>, value: Range<Int>)]) {
            guard let base = lines.baseAddress else { return }
            let n = lines.count
            let dest = out.baseAddress!
            var i = 0
            while i < n {
                // Line and name ends found with memchr, bytes copied through pointers: a
                // byte-at-a-time walk pays a bounds check on every byte of every line.
                let end = memchr(base + i, 0x0A, n - i).map { UnsafeRawPointer($0) - base } ?? n
                var lineEnd = end
                if lineEnd > i && base.load(fromByteOffset: lineEnd - 1, as: UInt8.self) == 0x0D { lineEnd -= 1 }
                let colon = memchr(base + i, Int32(UInt8(ascii: ":")), lineEnd - i).map { UnsafeRawPointer($0) - base } ?? lineEnd
                if colon < lineEnd && colon > i {
                    var vStart = colon + 1
                    while vStart < lineEnd, case let c = base.load(fromByteOffset: vStart, as: UInt8.self), c == 0x20 || c == 0x09 { vStart += 1 }
                    var vEnd = lineEnd
                    while vEnd > vStart, case let c = base.load(fromByteOffset: vEnd - 1, as: UInt8.self), c == 0x20 || c == 0x09 { vEnd -= 1 }
                    let name = UnsafeRawBufferPointer(start: base + i, count: colon - i)
                    if !HTTP2ResponseFields.isDropped(name) {
                        let start = count
                        precondition(count + name.count <= out.count)
                        for k in 0..<name.count {
                            dest.storeBytes(of: HTTPSyntax.lower(base.load(fromByteOffset: i + k, as: UInt8.self)), toByteOffset: start + k, as: UInt8.self)
                        }
                        count += name.count
                        let mid = count
                        copy(UnsafeRawBufferPointer(start: base + vStart, count: vEnd - vStart))
                        fields.append((start..<mid, mid..<count))
                    }
                }
                i = end + 1
            }
        }
    }

    fileprivate static func isDropped(_ name: UnsafeRawBufferPointer) -> Bool {
        let r = 0..<name.count
        switch name.count {
        case 7: return HTTPSyntax.equalsLowercase(name, r, "upgrade")
        case 10: return HTTPSyntax.equalsLowercase(name, r, "connection") || HTTPSyntax.equalsLowercase(name, r, "keep-alive")
        case 14: return HTTPSyntax.equalsLowercase(name, r, "content-length")
        case 16: return HTTPSyntax.equalsLowercase(name, r, "proxy-connection")
        case 17: return HTTPSyntax.equalsLowercase(name, r, "transfer-encoding")
        default: return false
        }
    }
}
