/// What an encoder is asked to do with the input it is given.
enum EncodeStep {
    /// Compress; output may be held back until more input comes (best ratio).
    case more
    /// Compress and pass on everything so far, the stream staying open (a streamed
    /// answer's piece: a slow backend's first bytes reach the client).
    case flush
    /// The input is complete: the stream's end.
    case finish
}

/// One content coding's streaming compressor: fed input in pieces, it hands its output
/// in pieces, written into a scratch buffer the caller owns (the worker's: one per loop,
/// reused by every answer) and passed on before the next piece overwrites it. A whole
/// body is never held. Loop thread only (one exchange at a time); `reset` readies it for
/// another answer where the library allows (`EncoderPool`).
protocol StreamingEncoder: AnyObject {
    var coding: ContentCoding { get }
    /// Feeds `input` (may be empty) and calls `output` with each piece produced.
    /// False if the library failed (the answer cannot be completed).
    func encode(_ input: UnsafeRawBufferPointer, _ step: EncodeStep, scratch: UnsafeMutableRawBufferPointer,
                output: (UnsafeRawBufferPointer) -> Void) -> Bool
    /// Ready for a new stream (false: this encoder cannot be reused).
    func reset() -> Bool
}

/// The output buffer every encoder on a worker writes into: what the encoder produced is
/// passed to the sink (which copies it) before the next call, so one buffer per loop
/// serves every answer.
final class CompressionScratch {
    static let size = 32 * 1024
    let buffer: UnsafeMutableRawBufferPointer

    init() { buffer = .allocate(byteCount: Self.size, alignment: 16) }
    deinit { buffer.deallocate() }
}

/// Makes encoders; `level` is within `coding.levels` (the config loader checks it).
enum StreamingEncoders {
    static func make(_ coding: ContentCoding, level: Int, sizeHint: Int? = nil) -> StreamingEncoder? {
        switch coding {
        case .gzip: GzipEncoder(level: level)
        case .br: BrotliEncoder(level: level, sizeHint: sizeHint)
        case .zstd: ZstdEncoder(level: level)
        }
    }
}

extension StreamingEncoder {
    /// Compresses a whole body into one array (a cached answer's encoding, made once).
    func encodeWhole(_ input: UnsafeRawBufferPointer, scratch: UnsafeMutableRawBufferPointer) -> [UInt8]? {
        var out: [UInt8] = []
        out.reserveCapacity(input.count / 4 + 64)
        guard encode(input, .finish, scratch: scratch, output: { out.append(contentsOf: $0) }) else { return nil }
        return out
    }
}
