import CBrotli
import CZlib
import CZstd

/// Decodes a request body sent with `Content-Encoding` (routes with
/// `decompress_requests: true`), bounded: decoding stops as soon as the output passes
/// `maxBytes` (the route's body limit) or, past `ratioFloor` bytes, `maxRatio` times the
/// compressed size. A bomb costs at most the limit's worth of output and work, never the
/// size it would inflate to. Output goes through a 32 KiB buffer into the result. Pure.
enum BodyInflater {
    enum Failure: Error, Equatable {
        /// Past the size or ratio limit.
        case tooLarge
        /// Not a valid stream of the coding (or cut short).
        case malformed
    }

    /// The codings read: `gzip` (and `x-gzip`), `deflate` (the zlib format, RFC 9110
    /// 8.4.1.2), `br`, `zstd`. Lower case.
    static func coding(_ token: String) -> Coding? {
        switch token {
        case "gzip", "x-gzip", "deflate": .zlib
        case "br": .br
        case "zstd": .zstd
        default: nil
        }
    }

    enum Coding { case zlib, br, zstd }

    /// Bodies inflating to less than this are never refused for their ratio.
    static let ratioFloor = 1 << 20
    static let maxRatio = 100

    static func inflate(_ input: [UInt8], _ coding: Coding, maxBytes: Int) -> Result<[UInt8], Failure> {
        let limit = min(maxBytes, max(ratioFloor, input.count * maxRatio))
        var out: [UInt8] = []
        // Appends a piece; false once the output would pass the limit.
        func take(_ piece: ArraySlice<UInt8>) -> Bool {
            guard out.count + piece.count <= limit else { return false }
            out.append(contentsOf: piece)
            return true
        }
        var chunk = [UInt8](repeating: 0, count: 32 * 1024)
        let outcome: Failure? = input.withUnsafeBytes { raw in
            switch coding {
            case .zlib: return zlib(raw, &chunk, take)
            case .br: return brotli(raw, &chunk, take)
            case .zstd: return zstd(raw, &chunk, take)
            }
        }
        if let outcome { return .failure(outcome) }
        return .success(out)
    }

    private static func zlib(_ input: UnsafeRawBufferPointer, _ chunk: inout [UInt8], _ take: (ArraySlice<UInt8>) -> Bool) -> Failure? {
        var s = z_stream()
        guard qw_inflate_init_auto(&s) == Z_OK else { return .malformed }
        defer { inflateEnd(&s) }
        s.next_in = UnsafeMutablePointer(mutating: input.baseAddress?.assumingMemoryBound(to: Bytef.self))
        s.avail_in = UInt32(input.count)
        while true {
            let rc = chunk.withUnsafeMutableBytes { c -> Int32 in
                s.next_out = c.baseAddress!.assumingMemoryBound(to: Bytef.self)
                s.avail_out = UInt32(c.count)
                return CZlib.inflate(&s, Z_NO_FLUSH)
            }
            guard take(chunk[0..<(chunk.count - Int(s.avail_out))]) else { return .tooLarge }
            if rc == Z_STREAM_END { return s.avail_in == 0 ? nil : .malformed }
            guard rc == Z_OK else { return .malformed }
            if s.avail_in == 0 && s.avail_out > 0 { return .malformed }   // cut short
        }
    }

    private static func brotli(_ input: UnsafeRawBufferPointer, _ chunk: inout [UInt8], _ take: (ArraySlice<UInt8>) -> Bool) -> Failure? {
        guard let st = BrotliDecoderCreateInstance(nil, nil, nil) else { return .malformed }
        defer { BrotliDecoderDestroyInstance(st) }
        var availIn = input.count
        var nextIn = input.baseAddress?.assumingMemoryBound(to: UInt8.self)
        while true {
            var availOut = chunk.count
            let rc = chunk.withUnsafeMutableBytes { c -> BrotliDecoderResult in
                var nextOut: UnsafeMutablePointer<UInt8>? = c.baseAddress!.assumingMemoryBound(to: UInt8.self)
                return BrotliDecoderDecompressStream(st, &availIn, &nextIn, &availOut, &nextOut, nil)
            }
            guard take(chunk[0..<(chunk.count - availOut)]) else { return .tooLarge }
            switch rc {
            case BROTLI_DECODER_RESULT_SUCCESS: return availIn == 0 ? nil : .malformed
            case BROTLI_DECODER_RESULT_NEEDS_MORE_OUTPUT: continue
            default: return .malformed
            }
        }
    }

    private static func zstd(_ input: UnsafeRawBufferPointer, _ chunk: inout [UInt8], _ take: (ArraySlice<UInt8>) -> Bool) -> Failure? {
        guard let d = ZSTD_createDCtx() else { return .malformed }
        defer { ZSTD_freeDCtx(d) }
        // A frame asking for a window over 8 MiB is refused (RFC 9659's bound for HTTP).
        ZSTD_DCtx_setParameter(d, ZSTD_d_windowLogMax, 23)
        var inBuf = ZSTD_inBuffer(src: input.baseAddress, size: input.count, pos: 0)
        var hint = 1
        while true {
            let produced: Int? = chunk.withUnsafeMutableBytes { c in
                var o = ZSTD_outBuffer(dst: c.baseAddress, size: c.count, pos: 0)
                let r = ZSTD_decompressStream(d, &o, &inBuf)
                if ZSTD_isError(r) != 0 { return nil }
                hint = r
                return o.pos
            }
            guard let produced else { return .malformed }
            guard take(chunk[0..<produced]) else { return .tooLarge }
            if inBuf.pos == inBuf.size && produced < chunk.count { return hint == 0 ? nil : .malformed }
        }
    }
}
