/// Request bodies decoded before they go upstream, on routes with
/// `decompress_requests: true`: a body sent with one `Content-Encoding` of `gzip`,
/// `deflate`, `br` or `zstd` is inflated (`BodyInflater`) within `limits.max_body_bytes`
/// and a ratio bound, and forwarded without the field (its `Content-Length` is the
/// decoded size). Past the bounds: 413 `body_too_large`; a stream that does not decode:
/// 400 `bad_request`. Other codings, or several, go as they came. Runs after
/// authentication (a signature covers the bytes as sent) and just before forwarding;
/// left out when no route asks for it. Routes without it never inflate anything.
final class DecompressRequestStage: RequestStage {
    var needsBody: Bool { true }
    private let maxBodyBytes: Int
    /// Per route (by counter slot): its request rules plus the removal of
    /// `Content-Encoding`, used for a body this stage decoded.
    private let decodedRules: [Int: HeaderRules]

    private static let contentEncoding = Array("content-encoding".utf8)

    init(config: GatewayConfig, routes: RouteSnapshot) {
        maxBodyBytes = config.limits.maxBodyBytes
        var rules: [Int: HeaderRules] = [:]
        for r in routes.routes where r.config.decompressRequests {
            rules[r.statSlot] = r.config.requestHeaders?.alsoDropping("content-encoding") ?? HeaderRules(remove: ["content-encoding"], set: [])
        }
        decodedRules = rules
    }

    func run(_ ctx: ProxyContext, _ route: Route) -> StageResult {
        guard route.config.decompressRequests, !ctx.body.isEmpty else { return .next }
        // Every `Content-Encoding` value, each followed by `,`: one coding only is decoded
        // (a body in several would otherwise go on read as the ones left undone).
        var values: [UInt8] = []
        ctx.withHead { $0.appendValues(ofLowercaseName: Self.contentEncoding, to: &values) }
        guard !values.isEmpty, values.firstIndex(of: UInt8(ascii: ",")) == values.count - 1 else { return .next }
        let token = String(decoding: values.dropLast(), as: UTF8.self).trimmingSpaces.lowercased()
        guard let coding = BodyInflater.coding(token) else { return .next }
        switch BodyInflater.inflate(ctx.body, coding, maxBytes: maxBodyBytes) {
        case .success(let decoded):
            ctx.body = decoded
            ctx.inflatedRequestRules = decodedRules[route.statSlot]
            return .next
        case .failure(.tooLarge):
            return .refuse(.bodyTooLarge, "the body inflates past the limit (\(maxBodyBytes) bytes, or \(BodyInflater.maxRatio) times its size)")
        case .failure(.malformed):
            return .refuse(.badRequest, "the body is not valid \(token)")
        }
    }
}
