import XCTest
@testable import QuickwayCore

/// The word-at-a-time scans agree with the byte-at-a-time definitions they stand for.
final class HTTPSyntaxWordTests: XCTestCase {
    func testHasByteBelowAndEqualAgreeWithEachByte() {
        var rng = SystemRandomNumberGenerator()
        // Bytes near the thresholds are the interesting ones (borrows between lanes).
        let interesting: [UInt8] = [0, 1, 9, 10, 13, 14, 0x1F, 0x20, 0x21, 0x7E, 0x7F, 0x80, 0x81, 0xFF]
        for _ in 0..<20_000 {
            let bytes = (0..<8).map { _ in Bool.random(using: &rng) ? interesting.randomElement(using: &rng)! : UInt8.random(in: 0...255, using: &rng) }
            let w = bytes.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) }
            for n: UInt8 in [1, 0x0E, 0x20, 0x80] {
                XCTAssertEqual(HTTPSyntax.hasByte(below: n, in: w), bytes.contains { $0 < n }, "\(bytes) below \(n)")
            }
            XCTAssertEqual(HTTPSyntax.hasByte(0x7F, in: w), bytes.contains(0x7F), "\(bytes)")
            // The first flagged byte is the first byte below the bound, exactly.
            for n: UInt8 in [1, 0x0E, 0x20, 0x80] {
                let m = HTTPSyntax.bytesBelow(n, in: w)
                if let first = bytes.firstIndex(where: { $0 < n }) { XCTAssertEqual(HTTPSyntax.firstFlagged(m), first, "\(bytes) below \(n)") }
            }
        }
    }

    func testPutLowercasedLowersExactlyTheCapitalsAtEveryLength() {
        var rng = SystemRandomNumberGenerator()
        for _ in 0..<3_000 {
            let bytes = (0..<Int.random(in: 0...40, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) }
            let expected = [0x5A] + bytes.map { $0 >= 0x41 && $0 <= 0x5A ? $0 + 0x20 : $0 }   // after a byte put before
            let got = withUnsafeTemporaryAllocation(byteCount: bytes.count + 1, alignment: 1) { buffer -> [UInt8] in
                var w = BufferWriter(buffer)
                w.put(byte: 0x5A)
                bytes.withUnsafeBytes { w.putLowercased($0) }
                return Array(w.written)
            }
            XCTAssertEqual(got, expected, "\(bytes)")
        }
    }

    /// `scan(raw, from, to)` against the first byte from `from` that `allowed` refuses, on
    /// random buffers of ordinary bytes (`plain`) with now and then `edge` (the byte at
    /// the class's border), a control byte, DEL or obs-text.
    private func checkScan(plain: ClosedRange<UInt8>, edge: UInt8, allowed: (UInt8) -> Bool,
                           _ scan: (UnsafeRawBufferPointer, Int, Int) -> Int) {
        var rng = SystemRandomNumberGenerator()
        for _ in 0..<5_000 {
            let count = Int.random(in: 0...40, using: &rng)
            let bytes: [UInt8] = (0..<count).map { _ in
                switch Int.random(in: 0..<35, using: &rng) {
                case 0: return edge
                case 1: return UInt8.random(in: 0...0x1F, using: &rng)
                case 2: return 0x7F
                case 3: return UInt8.random(in: 0x80...0xFF, using: &rng)
                default: return UInt8.random(in: plain, using: &rng)
                }
            }
            let from = count == 0 ? 0 : Int.random(in: 0...count, using: &rng)
            let expected = bytes[from...].firstIndex { !allowed($0) } ?? count
            bytes.withUnsafeBytes { raw in XCTAssertEqual(scan(raw, from, count), expected, "\(bytes) from \(from)") }
        }
    }

    func testTargetEndStopsAtTheFirstByteThatIsNotATargetByte() {
        checkScan(plain: 0x21...0x7E, edge: 0x20, allowed: HTTPSyntax.isTargetByte) { HTTPSyntax.targetEnd($0, from: $1, to: $2) }
    }

    func testFieldValueEndStopsAtTheFirstByteThatIsNotAFieldValueByte() {
        // Tab is allowed in a value, though below 0x20.
        checkScan(plain: 0x20...0x7E, edge: 0x09, allowed: HTTPSyntax.isFieldValueByte) { HTTPSyntax.fieldValueEnd($0, from: $1, to: $2) }
    }
}

/// `equalsLowercase` (a word at a time) against a byte-by-byte reference, for every
/// literal the gateway compares with and many mutations of them, every byte value included.
final class EqualsLowercaseTests: XCTestCase {
    static let literals: [StaticString] = ["host", "te", "content-length", "transfer-encoding", "connection", "keep-alive",
                                           "x-forwarded-for", "chunked", "100-continue", "websocket", "x-http-method-override", ""]

    func reference(_ bytes: [UInt8], _ literal: StaticString) -> Bool {
        let lit = Array(UnsafeBufferPointer(start: literal.utf8Start, count: literal.utf8CodeUnitCount))
        return bytes.count == lit.count && zip(bytes, lit).allSatisfy { a, b in (a >= 0x41 && a <= 0x5A ? a | 0x20 : a) == b }
    }

    func testMatchesTheByteByByteReference() {
        var rng = NonceTableTests.SplitMix(state: 3)
        for literal in Self.literals {
            let base = Array(UnsafeBufferPointer(start: literal.utf8Start, count: literal.utf8CodeUnitCount))
            var cases: [[UInt8]] = [base, base.map { $0 >= 0x61 && $0 <= 0x7A ? $0 - 0x20 : $0 }, Array(base.dropLast()), base + [0x61]]
            for pos in base.indices {
                for b in 0...255 {
                    var m = base
                    m[pos] = UInt8(b)
                    cases.append(m)
                }
            }
            for _ in 0..<200 where !base.isEmpty {
                cases.append(base.map { c in rng.next() % 2 == 0 ? c : UInt8(truncatingIfNeeded: rng.next()) })
            }
            for c in cases {
                // Inside a larger buffer, so that reading outside the range would show.
                let padded = [0x41, 0x42, 0x43] + c + [0x44, 0x45, 0x46, 0x47, 0x48, 0x49, 0x4A, 0x4B]
                let got = padded.withUnsafeBytes { HTTPSyntax.equalsLowercase($0, 3..<(3 + c.count), literal) }
                XCTAssertEqual(got, reference(c, literal), "\(c) against \(literal)")
            }
        }
    }

    func testLowercasedWord() {
        for b in 0...255 {
            let w = UInt64(b) * 0x0101_0101_0101_0101
            let expected = UInt64(b >= 0x41 && b <= 0x5A ? b | 0x20 : b) * 0x0101_0101_0101_0101
            XCTAssertEqual(HTTPSyntax.lowercased(w), expected, "byte \(b)")
        }
    }
}
