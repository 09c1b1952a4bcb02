/// One worker's compression resources for one config snapshot: the scratch buffer every
/// encoder writes into, and encoders given back at an answer's end, reset and kept for
/// the next answer (zlib's 256 KiB and zstd's context are not allocated per answer).
/// Brotli cannot be reset and is made per answer. At most `keep` idle encoders per
/// coding. Loop thread only.
final class EncoderPool {
    let scratch = CompressionScratch()
    private let levels: [ContentCoding: Int]
    private var idle: [[StreamingEncoder]] = Array(repeating: [], count: ContentCoding.allCases.count)
    private let keep: Int

    init(levels: [ContentCoding: Int], keep: Int = 8) {
        self.levels = levels
        self.keep = keep
    }

    func level(_ coding: ContentCoding) -> Int { levels[coding] ?? coding.defaultLevel }

    /// An encoder for one answer (`sizeHint`: the body's length, when known).
    func take(_ coding: ContentCoding, sizeHint: Int?) -> StreamingEncoder? {
        if let e = idle[Int(coding.rawValue)].popLast() { return e }
        return StreamingEncoders.make(coding, level: level(coding), sizeHint: sizeHint)
    }

    /// An encoder whose stream ended: kept if it can be reset and there is room.
    func give(_ encoder: StreamingEncoder) {
        let i = Int(encoder.coding.rawValue)
        guard idle[i].count < keep, encoder.reset() else { return }
        idle[i].append(encoder)
    }

    /// How many idle encoders of a coding are kept (for the tests).
    func idleCount(_ coding: ContentCoding) -> Int { idle[Int(coding.rawValue)].count }
}
