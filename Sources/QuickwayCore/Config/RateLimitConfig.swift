/// `rate_limits` (top level) and a route's `rate_limit` and `quota` (spec/config.md,
/// "Added for the next round"), as the loader checked them. The limiting itself is in
/// `Limits/`.

/// `rate_limits`: what every route's limits share.
public struct RateLimitSettings: Sendable, Equatable {
    /// `local`: each gateway limits on its own, exactly across its workers; `redis`: the
    /// gateways share counts through Redis every `sync_interval` (`LimitSync`).
    public enum Store: String, Sendable { case local, redis }
    public var store: Store = .local
    /// `sync_interval`: how often a gateway sends what it admitted and reads the others'.
    public var syncIntervalMillis: Int64 = 100
    /// Added field (`max_entries`): most clients (keys, IPs) one limit remembers at once.
    /// Past it the entries whose allowance is whole again go first (nothing is lost:
    /// such an entry equals a fresh one), then the live entries nearest to whole
    /// (`LimitTable`).
    public var maxEntries = 100_000
    public init() {}
}

/// Whose calls a limit counts together.
public enum LimitSubject: String, Sendable, Equatable {
    /// The verified key id; anonymous callers (auth `optional`) share one allowance.
    case key
    /// The client's IP (after `client_ip.trusted_proxies`); IPv6 by its /64.
    case ip
    /// Every call of the route.
    case route
}

/// `N/s`, `N/m`, `N/h` (rates) or `N/h`, `N/d` (quotas): `count` calls per `periodSeconds`.
public struct LimitRate: Sendable, Equatable, CustomStringConvertible {
    public var count: Int64
    public var periodSeconds: Int64

    public init(count: Int64, periodSeconds: Int64) { self.count = count; self.periodSeconds = periodSeconds }

    /// Parses `100/s`; `units` maps the letters allowed to their seconds. Nil on anything
    /// else (a count of 0, a fraction, a unit not in `units`, more than 1,000,000,000).
    public static func parse(_ text: String, units: [String: Int64]) -> LimitRate? {
        let parts = text.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2, let seconds = units[String(parts[1])],
              !parts[0].isEmpty, parts[0].utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }),
              parts[0].utf8.count <= 10, let n = Int64(parts[0]), n >= 1, n <= 1_000_000_000 else { return nil }
        return LimitRate(count: n, periodSeconds: seconds)
    }

    public static let rateUnits: [String: Int64] = ["s": 1, "m": 60, "h": 3600]
    public static let quotaUnits: [String: Int64] = ["h": 3600, "d": 86_400]

    public var description: String {
        "\(count)/" + (periodSeconds == 1 ? "s" : periodSeconds == 60 ? "m" : periodSeconds == 3600 ? "h" : "d")
    }
}

/// One entry of a route's `rate_limit` list.
public struct RateLimitRule: Sendable, Equatable {
    public var by: LimitSubject
    public var rate: LimitRate
    /// Calls admitted at once from a full allowance; default: the rate's count.
    public var burst: Int64

    /// What identifies the limit's counters across reloads (`RateLimitRegistry`): the
    /// same `by`, rate and burst on a route of the same name keep their counters.
    var identity: String { "\(by.rawValue) \(rate) \(burst)" }
}

/// A route's `quota`: calls per key in fixed windows aligned to UTC (`QuotaTable`).
public struct QuotaRule: Sendable, Equatable {
    public var by: LimitSubject = .key
    public var limit: LimitRate
    var identity: String { "quota \(by.rawValue) \(limit)" }
}
