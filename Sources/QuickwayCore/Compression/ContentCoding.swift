/// The content codings the gateway compresses answers with (RFC 9110 8.4.1;
/// `compression.encodings`): each is one streaming encoder type.
enum ContentCoding: UInt8, CaseIterable, Sendable {
    case gzip, br, zstd

    /// The token as written in `Accept-Encoding`, `Content-Encoding` and the config.
    var token: String {
        switch self {
        case .gzip: "gzip"
        case .br: "br"
        case .zstd: "zstd"
        }
    }

    var tokenBytes: [UInt8] { Array(token.utf8) }

    /// The coding a config token names (lower case), nil for any other.
    init?(token: String) {
        switch token {
        case "gzip": self = .gzip
        case "br": self = .br
        case "zstd": self = .zstd
        default: return nil
        }
    }

    /// The levels each library takes, and the defaults (`compression.level`): about
    /// nginx's `gzip_comp_level` for gzip, and the fast end of brotli and zstd, where they
    /// compress JSON smaller than gzip at less CPU.
    var levels: ClosedRange<Int> {
        switch self {
        case .gzip: 1...9
        case .br: 0...11
        case .zstd: 1...19
        }
    }

    var defaultLevel: Int {
        switch self {
        case .gzip: 5
        case .br: 4
        case .zstd: 3
        }
    }
}
