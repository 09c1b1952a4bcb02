import Foundation

/// One `jwt.providers` entry at run time: its verifier and its current keys, shared by
/// every worker and kept across reloads while its config is unchanged.
///
/// Keys change only when a fetch (or a read of `jwks_file`) yields a set with at least
/// one usable key: a failed or malformed fetch keeps the keys there were. A token with
/// an unknown `kid` asks for one early fetch (`unknownKey`), at most one every
/// `earlyFetchIntervalNanos` per provider, so made-up kids cannot make the gateway
/// hammer the identity provider.
/// `@unchecked Sendable`: the keys, their generation and the early-fetch state are
/// under `lock`; the rest is immutable.
public final class JWTProvider: @unchecked Sendable {
    public let config: JWTProviderConfig
    let verifier: JWTVerifier
    private let lock = NSLock()
    private var current: JWKSet?
    /// Bumped with every new key set: cached tokens verified under another generation
    /// are verified again (a key removed at the identity provider stops working).
    private var generationValue = 0
    private var lastEarlyFetchNanos: UInt64?
    private var fetchTrigger: (@Sendable () -> Void)?
    /// Figures for logs and tests: fetches asked early, and refused by the rate limit.
    private(set) var earlyFetches = 0
    private(set) var earlyFetchesSkipped = 0

    /// At most one early fetch per provider this often.
    static let earlyFetchIntervalNanos: UInt64 = 10_000_000_000

    init(config: JWTProviderConfig, dropped: [String] = []) {
        self.config = config
        verifier = JWTVerifier(provider: config, dropped: dropped)
        // Keys known before any fetch: the file, or the last good set kept from the URL.
        if let file = config.jwksFile ?? config.cacheFile, let set = JWKSFile.load(file) { install(set) }
    }

    /// The current keys and their generation (nil: none yet).
    var keys: (set: JWKSet?, generation: Int) {
        lock.lock(); defer { lock.unlock() }
        return (current, generationValue)
    }

    var generation: Int { lock.lock(); defer { lock.unlock() }; return generationValue }

    func install(_ set: JWKSet) {
        lock.lock()
        current = set
        generationValue += 1
        lock.unlock()
    }

    /// Who fetches when a token names an unknown kid (the control loop's refresher).
    func setFetchTrigger(_ trigger: (@Sendable () -> Void)?) {
        lock.lock(); fetchTrigger = trigger; lock.unlock()
    }

    /// A token named a kid the keys lack: one early fetch, unless one was asked less than
    /// `earlyFetchIntervalNanos` ago. Returns whether a fetch was asked.
    @discardableResult
    func unknownKey(nowNanos: UInt64 = Clock.monotonicNanos()) -> Bool {
        lock.lock()
        if let last = lastEarlyFetchNanos, nowNanos &- last < Self.earlyFetchIntervalNanos {
            earlyFetchesSkipped += 1
            lock.unlock()
            return false
        }
        lastEarlyFetchNanos = nowNanos
        earlyFetches += 1
        let trigger = fetchTrigger
        lock.unlock()
        trigger?()
        return trigger != nil
    }
}

/// The providers of the running config, kept across reloads per unchanged provider (its
/// keys with it). Thread-safe: every worker's pipeline asks for the same config's set.
final class JWTProviderRegistry: @unchecked Sendable {
    private let lock = NSLock()
    private var byName: [String: JWTProvider] = [:]

    /// The runtime providers for `config`: the same objects for the same config.
    func providers(for config: JWTConfig?) -> [String: JWTProvider] {
        lock.lock(); defer { lock.unlock() }
        var out: [String: JWTProvider] = [:]
        let dropped = config?.forwardedHeaderNames ?? []
        for p in config?.providers ?? [] {
            if let old = byName[p.name], old.config == p, old.verifier.dropped == dropped { out[p.name] = old } else {
                out[p.name] = JWTProvider(config: p, dropped: dropped)
            }
        }
        byName = out
        return out
    }
}

/// A JWKS on disk: `jwks_file`, or the last good set fetched from `jwks_url`
/// (`cache_file`), written atomically like IP lists' cache files.
enum JWKSFile {
    /// The most a JWKS may hold (file or fetched).
    static let maxBytes = 1 << 20

    static func load(_ path: String) -> JWKSet? {
        guard let data = FileManager.default.contents(atPath: path), data.count <= maxBytes else { return nil }
        return JWKSet.parse(Array(data))
    }

    /// Why `path` cannot serve as a `jwks_file` (nil: it can).
    static func problem(_ path: String) -> String? {
        guard let data = FileManager.default.contents(atPath: path) else { return "cannot read \(path)" }
        if data.count > maxBytes { return "\(path) is larger than 1MiB" }
        guard JWKSet.parse(Array(data)) != nil else { return "\(path) is not a JWK set with a usable signature key (RSA, EC P-256/P-384, Ed25519)" }
        return nil
    }

    /// Writes the set's JSON as fetched (temporary file, then rename).
    static func save(_ body: [UInt8], to path: String) throws {
        let url = URL(fileURLWithPath: path)
        try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        let tmp = path + ".tmp"
        try Data(body).write(to: URL(fileURLWithPath: tmp))
        guard rename(tmp, path) == 0 else { throw CocoaError(.fileWriteUnknown) }
    }
}
