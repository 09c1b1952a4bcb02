/// Compression: on a route with `compression: true`, chooses the client's coding from its
/// `Accept-Encoding` (`EncodingNegotiation`, the config's order breaking ties) and sets
/// a `CompressionFilter` on the exchange, which every answer of the request then passes:
/// upstream whole or streamed, hits, merged, stale, the gateway's own. Runs first after
/// the route, on the head alone, so no answer starts before the filter is set.
/// Left out of the pipeline when no route compresses.
final class CompressionStage: RequestStage {
    var needsBody: Bool { false }
    private let config: CompressionConfig
    /// This worker's scratch buffer and idle encoders (a pipeline is one worker's).
    let pool: EncoderPool
    private let cache: ResponseCache

    init(config: CompressionConfig, cache: ResponseCache) {
        self.config = config
        self.cache = cache
        pool = EncoderPool(levels: config.levels)
    }

    private static let acceptEncoding = Array("accept-encoding".utf8)

    func run(_ ctx: ProxyContext, _ route: Route) -> StageResult {
        // A batch call's answer goes into the envelope's JSON, not to a client that
        // decodes it: never compressed (the envelope's own answer may be).
        guard route.config.compression, ctx.batchOrigin == nil, !ctx.withHead({ $0.upgradeWebSocket }) else { return .next }
        var value: [UInt8] = []
        ctx.withHead { $0.appendValues(ofLowercaseName: Self.acceptEncoding, to: &value) }
        let coding = EncodingNegotiation.choose(value.isEmpty ? nil : value, order: config.encodings)
        ctx.exchange.bodyFilter = CompressionFilter(config: config, pool: pool, cache: cache, coding: coding)
        return .next
    }
}
