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
}
