/// Compresses one answer on its way to the client (`ResponseBodyFilter`), set on the
/// exchange by `CompressionStage` for routes with `compression: true`. The client's
/// coding is chosen from the request when the filter is made; whether the answer is
/// compressed is decided from its head (`CompressionPolicy`) when the head goes out.
///
/// A body is compressed piece by piece as it comes, each streamed piece flushed (a slow
/// backend's first bytes reach the client); a whole answer is compressed in one call.
/// The output goes through the worker's scratch buffer (`EncoderPool`), so at most a
/// piece's worth of compressed bytes exists at a time. Backpressure: the sink's `.pause`
/// for any output of a piece is returned to the producer.
///
/// Stored answers (hits, merged waiters, stale) go through `respondStored`, which serves
/// the entry's encoding made once (`EncodedVariants`) with no compression work.
/// Loop thread only.
final class CompressionFilter: ResponseBodyFilter {
    private let config: CompressionConfig
    private let pool: EncoderPool
    private let cache: ResponseCache
    /// The coding the client accepts best of the configured ones (nil: identity).
    let coding: ContentCoding?
    private var encoder: StreamingEncoder?
    /// The body given is already in `coding` (a stored encoding): passed through as is.
    private var preEncoded = false
    /// Whether the head went out compressed (for the tests and the log).
    private(set) var compressed = false

    init(config: CompressionConfig, pool: EncoderPool, cache: ResponseCache, coding: ContentCoding?) {
        self.config = config
        self.pool = pool
        self.cache = cache
        self.coding = coding
    }

    func willSend(_ head: inout ResponseHead) -> [UInt8]? { nil }

    func headLines(_ head: inout ResponseHead) -> [UInt8]? {
        let none = UnsafeRawBufferPointer(start: nil, count: 0)
        let lines = head.headerLines ?? none
        if preEncoded {
            compressed = true
            return CompressionPolicy.rewrite(lines, coding: coding)
        }
        let length: Int? = if case .known(let n) = head.length { n } else { nil }
        guard CompressionPolicy.eligible(status: head.status, carriesBody: head.carriesBody, length: length, lines: lines, config: config) else {
            return nil
        }
        guard let coding, let encoder = pool.take(coding, sizeHint: length) else {
            return CompressionPolicy.rewrite(lines, coding: nil)
        }
        self.encoder = encoder
        compressed = true
        head.length = .unknown
        return CompressionPolicy.rewrite(lines, coding: coding)
    }

    func filter(_ bytes: UnsafeRawBufferPointer, emit: (UnsafeRawBufferPointer) -> BodyWrite) -> BodyWrite {
        guard let encoder else { return emit(bytes) }
        var result = BodyWrite.accepted
        // A streamed piece is flushed; a whole answer is one piece followed by `finish`,
        // where the flush costs a few bytes at most.
        let ok = encoder.encode(bytes, .flush, scratch: pool.scratch.buffer) { out in
            if emit(out) == .pause { result = .pause }
        }
        if !ok { self.encoder = nil }
        return result
    }

    func finish(emit: (UnsafeRawBufferPointer) -> BodyWrite) {
        guard let encoder else { return }
        self.encoder = nil
        let empty = UnsafeRawBufferPointer(start: nil, count: 0)
        if encoder.encode(empty, .finish, scratch: pool.scratch.buffer, output: { _ = emit($0) }) { pool.give(encoder) }
    }

    /// Answers from a stored response in the client's coding, from the entry's encoding
    /// if one was made, else made now (whole, in one call) and kept with the entry if the
    /// cache still holds it. False: the answer is not to be compressed for this client
    /// (the caller answers as usual, and `headLines` adds `Vary` if it could have been).
    func respondStored(_ exchange: Exchange, _ r: CachedResponse) -> Bool {
        guard let coding, !exchange.isHeadRequest else { return false }
        let eligible = r.headerLines.withUnsafeBytes { lines in
            CompressionPolicy.eligible(status: r.status, carriesBody: HTTPSyntax.responseHasBody(toHead: false, status: r.status),
                                       length: r.body.count, lines: lines, config: config)
        }
        guard eligible else { return false }
        let encoded: [UInt8]
        if let made = r.encodings.get(coding) {
            encoded = made
        } else {
            guard let encoder = pool.take(coding, sizeHint: r.body.count),
                  let made = r.body.withUnsafeBytes({ encoder.encodeWhole($0, scratch: pool.scratch.buffer) }) else { return false }
            pool.give(encoder)
            encoded = made
            cache.attachEncoding(made, coding: coding, to: r)
        }
        preEncoded = true
        r.reason.withUnsafeBytes { reason in
            r.headerLines.withUnsafeBytes { lines in
                encoded.withUnsafeBytes { b in exchange.respond(status: r.status, reason: reason, headerLines: lines, body: b) }
            }
        }
        return true
    }
}
