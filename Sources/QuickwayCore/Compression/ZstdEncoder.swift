import CZstd

/// `zstd` (RFC 8878) through `ZSTD_compressStream2`. The window is capped at 2^21 bytes
/// (2 MiB): RFC 9659 asks encoders for HTTP to stay within 8 MiB, so every browser's
/// decoder takes it. The context is reset (session only: the level stays) for reuse.
final class ZstdEncoder: StreamingEncoder {
    let coding = ContentCoding.zstd
    private let context: OpaquePointer

    init?(level: Int) {
        guard let c = ZSTD_createCCtx() else { return nil }
        context = c
        ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, Int32(level))
        ZSTD_CCtx_setParameter(c, ZSTD_c_windowLog, 21)
        ZSTD_CCtx_setParameter(c, ZSTD_c_checksumFlag, 1)
    }

    deinit { ZSTD_freeCCtx(context) }

    func reset() -> Bool { ZSTD_isError(ZSTD_CCtx_reset(context, ZSTD_reset_session_only)) == 0 }

    func encode(_ input: UnsafeRawBufferPointer, _ step: EncodeStep, scratch: UnsafeMutableRawBufferPointer,
                output: (UnsafeRawBufferPointer) -> Void) -> Bool {
        let directive: ZSTD_EndDirective = switch step {
        case .more: ZSTD_e_continue
        case .flush: ZSTD_e_flush
        case .finish: ZSTD_e_end
        }
        var inBuf = ZSTD_inBuffer(src: input.baseAddress, size: input.count, pos: 0)
        while true {
            var outBuf = ZSTD_outBuffer(dst: scratch.baseAddress, size: scratch.count, pos: 0)
            let remaining = ZSTD_compressStream2(context, &outBuf, &inBuf, directive)
            guard ZSTD_isError(remaining) == 0 else { return false }
            if outBuf.pos > 0 { output(UnsafeRawBufferPointer(rebasing: scratch[0..<outBuf.pos])) }
            // `continue`: done once the input is taken; flush and end: once nothing remains.
            if step == .more ? inBuf.pos == inBuf.size : remaining == 0 { return true }
        }
    }
}
