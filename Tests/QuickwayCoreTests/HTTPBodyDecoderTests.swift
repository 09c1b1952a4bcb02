import XCTest
@testable import QuickwayCore

final class HTTPBodyDecoderTests: XCTestCase {
    /// Decodes `input` fed in pieces of `step` bytes; returns body and bytes consumed.
    func decode(_ framing: HTTPBodyFraming, _ input: String, step: Int = Int.max, max: Int = 1 << 20) throws -> (String, Int, Bool) {
        var d = HTTPBodyDecoder(framing: framing, maxBodyBytes: max)
        let bytes = Array(input.utf8)
        var out: [UInt8] = []
        var pos = 0
        var buffered: [UInt8] = []
        while pos < bytes.count && !d.isComplete {
            let end = Swift.min(bytes.count, pos + step)
            buffered.append(contentsOf: bytes[pos..<end])
            pos = end
            let used = try buffered.withUnsafeBytes { raw -> Int in
                let r = Result { () throws(HTTPParseError) -> Int in try d.decode(raw, into: &out) }
                return try r.get()
            }
            buffered.removeFirst(used)
        }
        return (String(decoding: out, as: UTF8.self), pos - buffered.count, d.isComplete)
    }

    func testContentLength() throws {
        let (body, used, done) = try decode(.contentLength(5), "helloGET /next")
        XCTAssertEqual(body, "hello")
        XCTAssertEqual(used, 5)
        XCTAssertTrue(done)
    }

    func testChunkedAtEveryStep() throws {
        let wire = "5;ext=1\r\nhello\r\n6\r\n world\r\nA\r\n0123456789\r\n0\r\nTrailer-X: 1\r\n\r\nNEXT"
        for step in 1...wire.utf8.count {
            let (body, used, done) = try decode(.chunked, wire, step: step)
            XCTAssertEqual(body, "hello world0123456789", "step \(step)")
            XCTAssertEqual(used, wire.utf8.count - 4, "step \(step)")
            XCTAssertTrue(done)
        }
    }

    func testUpperAndLowerHex() throws {
        XCTAssertEqual(try decode(.chunked, "a\r\n0123456789\r\nA\r\n0123456789\r\n0\r\n\r\n").0.count, 20)
    }

    func testMalformedChunks() {
        let bad = [
            "zz\r\nhello\r\n0\r\n\r\n",          // not hex
            "\r\nhello\r\n0\r\n\r\n",            // empty size
            "5\nhello\r\n0\r\n\r\n",             // bare LF after size
            "5\r\nhelloX\r\n0\r\n\r\n",          // data longer than size
            "5\r\nhello\n0\r\n\r\n",             // bare LF after data
            "0\r\nX: y\n\r\n",                   // bare LF in trailer
            "fffffffffffffffff\r\n",             // overflow
            "-5\r\nhello\r\n0\r\n\r\n",
            "5\r\nhello\r\n0\r\n\r",
        ]
        for wire in bad {
            var failed = false
            do {
                let (_, _, done) = try decode(.chunked, wire)
                failed = !done && wire.hasSuffix("\r") // incomplete is not an error
            } catch { failed = true }
            XCTAssertTrue(failed, wire.debugDescription)
        }
    }

    func testChunkedBodyLimit() {
        XCTAssertThrowsError(try decode(.chunked, "400\r\n" + String(repeating: "a", count: 1024) + "\r\n0\r\n\r\n", max: 1000)) {
            XCTAssertEqual($0 as? HTTPParseError, .bodyTooLarge)
        }
        XCTAssertThrowsError(try decode(.chunked, "200\r\n" + String(repeating: "a", count: 512) + "\r\n200\r\n" + String(repeating: "a", count: 512) + "\r\n0\r\n\r\n", max: 1000)) {
            XCTAssertEqual($0 as? HTTPParseError, .bodyTooLarge)
        }
    }

    // MARK: bounds on chunk-size lines, trailers, and framing overhead (issue: request integrity)
    //
    // The expected caps come from the issue, not from the decoder: a chunk-size line
    // (size digits plus extensions, without its CRLF) may be 4096 bytes; the trailer
    // section's field lines (each with its CRLF, not counting the final empty line) may
    // total 8192 bytes; and extension and trailer bytes count toward the body limit.

    static let lineCap = 4096
    static let trailerCap = 8192

    /// Decodes `wire` at every split size (1...count, or the given steps) and checks it
    /// always completes with `body`.
    func assertDecodes(_ wire: String, body: String, max: Int = 1 << 20, steps: [Int]? = nil,
                       file: StaticString = #filePath, line: UInt = #line) {
        for step in steps ?? Array(1...wire.utf8.count) {
            do {
                let (got, used, done) = try decode(.chunked, wire, step: step, max: max)
                XCTAssertEqual(got, body, "step \(step)", file: file, line: line)
                XCTAssertEqual(used, wire.utf8.count, "step \(step)", file: file, line: line)
                XCTAssertTrue(done, "step \(step)", file: file, line: line)
            } catch {
                XCTFail("step \(step): \(error)", file: file, line: line)
                return
            }
        }
    }

    /// Checks that decoding `wire` fails with `expected` at every split size; for
    /// `.badRequest`, the reason must contain the expected one.
    func assertFails(_ wire: String, _ expected: HTTPParseError, max: Int = 1 << 20, steps: [Int]? = nil,
                     file: StaticString = #filePath, line: UInt = #line) {
        for step in steps ?? Array(1...wire.utf8.count) {
            do {
                let (_, _, done) = try decode(.chunked, wire, step: step, max: max)
                XCTFail("step \(step): no error (complete: \(done))", file: file, line: line)
                return
            } catch let error as HTTPParseError {
                switch (error, expected) {
                case let (.badRequest(got), .badRequest(want)):
                    XCTAssertTrue(got.contains(want), "step \(step): \(got)", file: file, line: line)
                default: XCTAssertEqual(error, expected, "step \(step)", file: file, line: line)
                }
            } catch {
                XCTFail("step \(step): \(error)", file: file, line: line)
            }
        }
    }

    /// Steps for long inputs: every small split plus a spread of larger ones, and the
    /// splits landing right at and around the cap.
    func steps(around cap: Int, count: Int) -> [Int] {
        Array(Set(Array(1...64) + [cap - 3, cap - 2, cap - 1, cap, cap + 1, cap + 2, count - 1, count, 1000, 4095, 4097]
            .filter { $0 >= 1 && $0 <= count })).sorted()
    }

    func testChunkSizeLineAtCapPasses() {
        // "1" + ";" + padding = exactly 4096 bytes before the CRLF.
        let line = "1;e=" + String(repeating: "v", count: Self.lineCap - 4)
        XCTAssertEqual(line.utf8.count, Self.lineCap)
        assertDecodes(line + "\r\nx\r\n0\r\n\r\n", body: "x")
    }

    func testChunkSizeLineOverCapFails() {
        let line = "1;e=" + String(repeating: "v", count: Self.lineCap - 3)
        XCTAssertEqual(line.utf8.count, Self.lineCap + 1)
        assertFails(line + "\r\nx\r\n0\r\n\r\n", .badRequest("chunk extension too long"))
        // Refused as soon as the line passes the cap, without waiting for its end.
        assertFails("1;" + String(repeating: "v", count: 64 * 1024), .badRequest("chunk extension too long"), steps: [1, 7, 4096, 65536])
        // Whitespace before the extension counts too.
        assertFails("1" + String(repeating: " ", count: Self.lineCap) + ";a\r\nx\r\n0\r\n\r\n", .badRequest("chunk extension too long"),
                    steps: [1, 2, 3, 4095, 4096, 4097])
        // The cap applies to every size line, not only the first.
        let ok = "1;" + String(repeating: "v", count: Self.lineCap - 2)
        assertFails("1\r\na\r\n" + ok + "\r\nb\r\n" + ok + "v\r\nc\r\n0\r\n\r\n", .badRequest("chunk extension too long"), steps: [1, 3, 4096, 9000])
    }

    func testTrailerSectionAtCapPasses() {
        // 4 lines of 2048 bytes each, CRLF included: exactly 8192.
        let field = "X-T: " + String(repeating: "t", count: 2048 - 7) + "\r\n"
        XCTAssertEqual(field.utf8.count, 2048)
        let trailers = String(repeating: field, count: 4)
        XCTAssertEqual(trailers.utf8.count, Self.trailerCap)
        assertDecodes("3\r\nabc\r\n0\r\n" + trailers + "\r\n", body: "abc", steps: steps(around: Self.trailerCap, count: 8205))
        // One line of the whole budget.
        let one = "X-T: " + String(repeating: "t", count: Self.trailerCap - 7) + "\r\n"
        assertDecodes("0\r\n" + one + "\r\n", body: "", steps: [1, 2, 3, 8191, 8192, 8193, 8197])
    }

    func testTrailerSectionOverCapFails() {
        let field = "X-T: " + String(repeating: "t", count: 2048 - 7) + "\r\n"
        // One byte over, in the last line.
        let over = String(repeating: field, count: 3) + "X-T: " + String(repeating: "t", count: 2048 - 6) + "\r\n"
        XCTAssertEqual(over.utf8.count, Self.trailerCap + 1)
        assertFails("3\r\nabc\r\n0\r\n" + over + "\r\n", .badRequest("trailer"), steps: steps(around: Self.trailerCap, count: 8206))
        // Many short lines (each well under any per-line cap): the line count is bounded
        // through their bytes, CRLFs included.
        let many = String(repeating: "a: b\r\n", count: 2000)      // 12000 bytes
        assertFails("0\r\n" + many + "\r\n", .badRequest("trailer"), steps: [1, 2, 5, 6, 7, 100, 8192, 12005])
        // ... even with nothing after the colon (3 bytes a line).
        assertFails("0\r\n" + String(repeating: "a:\r\n", count: 3000) + "\r\n", .badRequest("trailer"), steps: [1, 4, 4096])
        // Refused before the end of the section arrives.
        assertFails("0\r\n" + String(repeating: "a: b\r\n", count: 100_000), .badRequest("trailer"), steps: [1, 4096, 65536])
    }

    func testExtensionBytesCountTowardBodyLimit() {
        // 500 data bytes + 500 extension bytes (";" and 499) = 1000 = the limit: accepted.
        let data = String(repeating: "d", count: 500)
        assertDecodes("1f4;" + String(repeating: "e", count: 499) + "\r\n" + data + "\r\n0\r\n\r\n", body: data, max: 1000,
                      steps: [1, 2, 3, 499, 500, 501, 503, 504, 505, 1000, 1010])
        // One more extension byte: 413.
        assertFails("1f4;" + String(repeating: "e", count: 500) + "\r\n" + data + "\r\n0\r\n\r\n", .bodyTooLarge, max: 1000,
                    steps: [1, 2, 3, 499, 500, 501, 503, 504, 505, 1000, 1010])
        // Many small chunks each with an extension under the line cap: the sum is bounded.
        let chunk = "1;" + String(repeating: "e", count: 99) + "\r\nx\r\n"   // 100 overhead + 1 data
        assertDecodes(String(repeating: chunk, count: 9) + "0\r\n\r\n", body: String(repeating: "x", count: 9), max: 909,
                      steps: [1, 2, 50, 105, 909])
        assertFails(String(repeating: chunk, count: 10) + "0\r\n\r\n", .bodyTooLarge, max: 1000, steps: [1, 2, 50, 105, 1000])
    }

    func testTrailerBytesCountTowardBodyLimit() {
        // 900 data bytes + one 100-byte trailer line (CRLF included) = 1000: accepted.
        let data = String(repeating: "d", count: 900)
        let trailer = "X-T: " + String(repeating: "t", count: 93) + "\r\n"
        XCTAssertEqual(trailer.utf8.count, 100)
        let wire = "384\r\n" + data + "\r\n0\r\n" + trailer + "\r\n"
        assertDecodes(wire, body: data, max: 1000, steps: [1, 2, 3, 100, 907, 908, 909, 910, 1000, 1009, 1010, 1011])
        let trailer101 = "X-T: " + String(repeating: "t", count: 94) + "\r\n"
        assertFails("384\r\n" + data + "\r\n0\r\n" + trailer101 + "\r\n", .bodyTooLarge, max: 1000,
                    steps: [1, 2, 3, 100, 907, 908, 909, 910, 1000, 1009, 1010, 1011])
        // A body exactly at the limit with neither extensions nor trailers still passes:
        // only extension and trailer bytes are overhead, not the size digits and CRLFs.
        assertDecodes("3e8\r\n" + String(repeating: "z", count: 1000) + "\r\n0\r\n\r\n", body: String(repeating: "z", count: 1000),
                      max: 1000, steps: [1, 2, 3, 5, 6, 7, 1000, 1005, 1010, 1012])
    }

    /// A `Content-Length` body is taken in place, piece by piece, up to its length and
    /// no further; other framings are not (their bytes need decoding).
    func testDelimitedBodyIsTakenInPlaceUpToItsLength() {
        var d = HTTPBodyDecoder(framing: .contentLength(10), maxBodyBytes: 100)
        XCTAssertEqual(d.takeDelimited(upTo: 4), 4)
        XCTAssertFalse(d.isComplete)
        XCTAssertEqual(d.takeDelimited(upTo: 50), 6, "bytes past the body are not taken")
        XCTAssertTrue(d.isComplete)
        XCTAssertEqual(d.bodyBytes, 10)
        XCTAssertNil(d.takeDelimited(upTo: 5))
        var c = HTTPBodyDecoder(framing: .chunked, maxBodyBytes: 100)
        XCTAssertNil(c.takeDelimited(upTo: 5))
    }
}
