/// `compression` (spec/config.md): how answers of routes with `compression: true` are
/// compressed. The defaults are the spec's example, used too when a route asks for
/// compression and the file has no section.
public struct CompressionConfig: Sendable, Equatable {
    /// Codings offered, most preferred first (`encodings`); ties in the client's
    /// `Accept-Encoding` weights go to the earlier one.
    var encodings: [ContentCoding] = [.br, .zstd, .gzip]
    /// Answers whose length is known and smaller than this go as they are.
    public var minBytes = 1024
    /// Media types compressed, lower case: `type/subtype`, or `type/*` for a whole type.
    public var types: [String] = ["application/json", "text/*", "application/javascript"]
    /// Level per coding (`level: {gzip: 5, br: 4, zstd: 3}`).
    var levels: [ContentCoding: Int] = [.gzip: 5, .br: 4, .zstd: 3]

    public init() {}
}
