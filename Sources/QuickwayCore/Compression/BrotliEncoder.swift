import CBrotli

/// `br` (RFC 7932) through the brotli encoder's streaming API. Window 2^19 (512 KiB, as
/// nginx's brotli module): a larger one compresses large answers a little better but
/// costs each concurrent answer its memory. Brotli has no reset: a new instance per answer.
final class BrotliEncoder: StreamingEncoder {
    let coding = ContentCoding.br
    private let state: OpaquePointer

    init?(level: Int, sizeHint: Int?) {
        guard let s = BrotliEncoderCreateInstance(nil, nil, nil) else { return nil }
        state = s
        BrotliEncoderSetParameter(s, BROTLI_PARAM_QUALITY, UInt32(level))
        BrotliEncoderSetParameter(s, BROTLI_PARAM_LGWIN, 19)
        BrotliEncoderSetParameter(s, BROTLI_PARAM_MODE, BROTLI_MODE_TEXT.rawValue)
        if let sizeHint, sizeHint > 0 { BrotliEncoderSetParameter(s, BROTLI_PARAM_SIZE_HINT, UInt32(min(sizeHint, 1 << 30))) }
    }

    deinit { BrotliEncoderDestroyInstance(state) }

    func reset() -> Bool { false }

    func encode(_ input: UnsafeRawBufferPointer, _ step: EncodeStep, scratch: UnsafeMutableRawBufferPointer,
                output: (UnsafeRawBufferPointer) -> Void) -> Bool {
        let op: BrotliEncoderOperation = switch step {
        case .more: BROTLI_OPERATION_PROCESS
        case .flush: BROTLI_OPERATION_FLUSH
        case .finish: BROTLI_OPERATION_FINISH
        }
        var availIn = input.count
        var nextIn = input.baseAddress?.assumingMemoryBound(to: UInt8.self)
        while true {
            var availOut = scratch.count
            var nextOut: UnsafeMutablePointer<UInt8>? = scratch.baseAddress!.assumingMemoryBound(to: UInt8.self)
            guard BrotliEncoderCompressStream(state, op, &availIn, &nextIn, &availOut, &nextOut, nil) == BROTLI_TRUE else { return false }
            let produced = scratch.count - availOut
            if produced > 0 { output(UnsafeRawBufferPointer(rebasing: scratch[0..<produced])) }
            if availIn == 0 && BrotliEncoderHasMoreOutput(state) == BROTLI_FALSE {
                if step != .finish || BrotliEncoderIsFinished(state) == BROTLI_TRUE { return true }
            }
        }
    }
}
