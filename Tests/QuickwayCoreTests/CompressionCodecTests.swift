import CBrotli
import CZlib
import CZstd
import XCTest
@testable import QuickwayCore

/// The decoders of each library (not the code under test): a codec's output must read
/// back as its input through them.
enum ReferenceDecoders {
    static func decode(_ coding: ContentCoding, _ data: [UInt8]) -> [UInt8]? {
        switch coding {
        case .gzip: gunzip(data)
        case .br: unbrotli(data)
        case .zstd: unzstd(data)
        }
    }

    static func gunzip(_ data: [UInt8]) -> [UInt8]? {
        var s = z_stream()
        guard qw_inflate_init_auto(&s) == Z_OK else { return nil }
        defer { inflateEnd(&s) }
        var out: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        return data.withUnsafeBytes { input -> [UInt8]? in
            s.next_in = UnsafeMutablePointer(mutating: input.baseAddress?.assumingMemoryBound(to: Bytef.self))
            s.avail_in = UInt32(input.count)
            while true {
                let rc = chunk.withUnsafeMutableBytes { c -> Int32 in
                    s.next_out = c.baseAddress!.assumingMemoryBound(to: Bytef.self)
                    s.avail_out = UInt32(c.count)
                    return inflate(&s, Z_NO_FLUSH)
                }
                out.append(contentsOf: chunk[0..<(chunk.count - Int(s.avail_out))])
                if rc == Z_STREAM_END { return out }
                // Input used up without the stream's end: what a flush made so far.
                if rc == Z_BUF_ERROR || (rc == Z_OK && s.avail_in == 0 && s.avail_out > 0) { return partial ? out : nil }
                guard rc == Z_OK else { return nil }
            }
        }
    }

    nonisolated(unsafe) static var lastError = ""

    /// Set by a test that decodes a stream cut after a flush (not ended).
    nonisolated(unsafe) static var partial = false

    static func unbrotli(_ data: [UInt8]) -> [UInt8]? {
        guard let st = BrotliDecoderCreateInstance(nil, nil, nil) else { return nil }
        defer { BrotliDecoderDestroyInstance(st) }
        var out: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        return data.withUnsafeBytes { input -> [UInt8]? in
            var availIn = input.count
            var nextIn = input.baseAddress?.assumingMemoryBound(to: UInt8.self)
            while true {
                var availOut = chunk.count
                let rc = chunk.withUnsafeMutableBytes { c -> BrotliDecoderResult in
                    var nextOut: UnsafeMutablePointer<UInt8>? = c.baseAddress!.assumingMemoryBound(to: UInt8.self)
                    return BrotliDecoderDecompressStream(st, &availIn, &nextIn, &availOut, &nextOut, nil)
                }
                out.append(contentsOf: chunk[0..<(chunk.count - availOut)])
                switch rc {
                case BROTLI_DECODER_RESULT_SUCCESS: return availIn == 0 ? out : nil
                case BROTLI_DECODER_RESULT_NEEDS_MORE_OUTPUT: continue
                case BROTLI_DECODER_RESULT_NEEDS_MORE_INPUT: return partial ? out : nil
                default: return nil
                }
            }
        }
    }

    static func unzstd(_ data: [UInt8]) -> [UInt8]? {
        partial ? unzstdStream(data) : unzstdWhole(data)
    }

    /// A complete frame, in one call (fails on a frame cut short); up to 16 MiB.
    static func unzstdWhole(_ data: [UInt8]) -> [UInt8]? {
        var out = [UInt8](repeating: 0, count: 16 << 20)
        let n = out.withUnsafeMutableBytes { o in data.withUnsafeBytes { ZSTD_decompress(o.baseAddress, o.count, $0.baseAddress, $0.count) } }
        guard ZSTD_isError(n) == 0 else { lastError = String(cString: ZSTD_getErrorName(n)); return nil }
        return Array(out[0..<n])
    }

    /// What a stream cut after a flush decodes to so far.
    static func unzstdStream(_ data: [UInt8]) -> [UInt8]? {
        guard let d = ZSTD_createDCtx() else { return nil }
        defer { ZSTD_freeDCtx(d) }
        var out: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        return data.withUnsafeBytes { input -> [UInt8]? in
            var inBuf = ZSTD_inBuffer(src: input.baseAddress, size: input.count, pos: 0)
            var last = 0
            while true {
                let (rc, pos) = chunk.withUnsafeMutableBytes { c -> (Int, Int) in
                    var o = ZSTD_outBuffer(dst: c.baseAddress, size: c.count, pos: 0)
                    let r = ZSTD_decompressStream(d, &o, &inBuf)
                    return (r, o.pos)
                }
                guard ZSTD_isError(rc) == 0 else { lastError = String(cString: ZSTD_getErrorName(rc)); return nil }
                out.append(contentsOf: chunk[0..<pos])
                last = rc
                if inBuf.pos == inBuf.size && pos < chunk.count { break }
            }
            if last != 0 && !partial { lastError = "zstd: frame not ended, hint \(last), \(out.count) bytes" }
            return last == 0 || partial ? out : nil
        }
    }
}

final class CompressionCodecTests: XCTestCase {
    let scratch = CompressionScratch()

    /// JSON-like text with some variety (compresses, but not to nothing).
    func sampleJSON(bytes: Int, seed: UInt64 = 7) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(bytes + 200)
        var x = seed
        var i = 0
        while out.count < bytes {
            x = x &* 6364136223846793005 &+ 1442695040888963407
            out.append(contentsOf: "{\"id\":\(i),\"name\":\"item-\(x >> 40)\",\"price\":\(x % 10000),\"tags\":[\"a\",\"b\"]},".utf8)
            i += 1
        }
        return Array(out.prefix(bytes))
    }

    func encode(_ e: StreamingEncoder, _ pieces: [ArraySlice<UInt8>], step: EncodeStep) -> [UInt8] {
        var out: [UInt8] = []
        for p in pieces {
            XCTAssertTrue(Array(p).withUnsafeBytes { e.encode($0, step, scratch: scratch.buffer) { out.append(contentsOf: $0) } })
        }
        XCTAssertTrue(e.encode(UnsafeRawBufferPointer(start: nil, count: 0), .finish, scratch: scratch.buffer) { out.append(contentsOf: $0) })
        return out
    }

    func testEachCodecRoundTripsThroughItsOwnDecoder() throws {
        let body = sampleJSON(bytes: 20_000)
        for coding in ContentCoding.allCases {
            let e = try XCTUnwrap(StreamingEncoders.make(coding, level: coding.defaultLevel))
            let out = encode(e, [body[...]], step: .more)
            XCTAssertLessThan(out.count, body.count / 2, "\(coding.token) compresses JSON")
            XCTAssertEqual(ReferenceDecoders.decode(coding, out), body, coding.token)
        }
    }

    func testTheEmptyBodyIsAValidStream() throws {
        for coding in ContentCoding.allCases {
            let e = try XCTUnwrap(StreamingEncoders.make(coding, level: coding.defaultLevel))
            let out = encode(e, [], step: .more)
            XCTAssertFalse(out.isEmpty, "\(coding.token): a stream header and end even for no bytes")
            XCTAssertEqual(ReferenceDecoders.decode(coding, out), [], coding.token)
        }
    }

    /// 8 MiB in pieces of uneven sizes (1 byte to 64 KiB), flushed after each as a
    /// streamed answer is: larger than the scratch buffer, the window and every piece.
    func testLargeInputsInManyFlushedPieces() throws {
        let body = sampleJSON(bytes: 8 << 20, seed: 11)
        var pieces: [ArraySlice<UInt8>] = []
        var at = 0
        var n = 1
        while at < body.count {
            let len = min(body.count - at, n)
            pieces.append(body[at..<(at + len)])
            at += len
            n = n >= 65536 ? 1 : n * 3 + 1
        }
        XCTAssertGreaterThan(pieces.count, 100)
        for coding in ContentCoding.allCases {
            for step in [EncodeStep.flush, .more] {
                let e = try XCTUnwrap(StreamingEncoders.make(coding, level: coding.defaultLevel))
                let out = encode(e, pieces, step: step)
                let decoded = ReferenceDecoders.decode(coding, out)
                XCTAssertTrue(decoded == body, "\(coding.token) \(step): \(decoded?.count ?? -1) bytes back of \(body.count), \(ReferenceDecoders.lastError)")
            }
        }
    }

    /// A flush passes on everything given so far: a decoder reads it all before the
    /// stream ends (what lets a slow backend's first bytes reach the client).
    func testAFlushMakesEverythingSoFarReadable() throws {
        ReferenceDecoders.partial = true
        defer { ReferenceDecoders.partial = false }
        let first = Array("{\"first\": \"piece of a slow answer\"".utf8)
        for coding in ContentCoding.allCases {
            let e = try XCTUnwrap(StreamingEncoders.make(coding, level: coding.defaultLevel))
            var out: [UInt8] = []
            XCTAssertTrue(first.withUnsafeBytes { e.encode($0, .flush, scratch: scratch.buffer) { out.append(contentsOf: $0) } })
            XCTAssertEqual(ReferenceDecoders.decode(coding, out), first, "\(coding.token): the flushed bytes decode before the end")
        }
    }

    func testPooledEncodersAreResetAndReused() throws {
        let pool = EncoderPool(levels: [.gzip: 6, .br: 5, .zstd: 3], keep: 1)
        let a = sampleJSON(bytes: 5000, seed: 1), b = sampleJSON(bytes: 7000, seed: 2)
        for coding in ContentCoding.allCases {
            let e1 = try XCTUnwrap(pool.take(coding, sizeHint: a.count))
            let out1 = encode(e1, [a[...]], step: .flush)
            pool.give(e1)
            let e2 = try XCTUnwrap(pool.take(coding, sizeHint: b.count))
            if coding == .br {
                XCTAssertFalse(e1 === e2, "brotli cannot be reset: a new one")
            } else {
                XCTAssertTrue(e1 === e2, "\(coding.token): the idle encoder is taken again")
            }
            let out2 = encode(e2, [b[...]], step: .flush)
            XCTAssertEqual(ReferenceDecoders.decode(coding, out1), a)
            XCTAssertEqual(ReferenceDecoders.decode(coding, out2), b, "\(coding.token): a reset stream starts afresh")
            let other = try XCTUnwrap(pool.take(coding, sizeHint: nil))
            pool.give(e2)
            pool.give(other)
            XCTAssertLessThanOrEqual(pool.idleCount(coding), 1, "at most `keep` idle encoders")
        }
    }

    func testLevelsChangeTheOutput() throws {
        let body = sampleJSON(bytes: 200_000)
        for coding in ContentCoding.allCases {
            let fast = encode(try XCTUnwrap(StreamingEncoders.make(coding, level: coding.levels.lowerBound + 1)), [body[...]], step: .more)
            let best = encode(try XCTUnwrap(StreamingEncoders.make(coding, level: coding.levels.upperBound)), [body[...]], step: .more)
            XCTAssertLessThan(best.count, fast.count, coding.token)
            XCTAssertEqual(ReferenceDecoders.decode(coding, best), body)
        }
    }
}
