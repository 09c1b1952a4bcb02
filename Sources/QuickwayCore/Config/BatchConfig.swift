/// A route's `batch` section (spec/config.md, spec/batch.md): the route takes a `POST`
/// of a JSON envelope of calls, runs each through the routes as an internal exchange,
/// and answers with their results.
public struct BatchConfig: Sendable, Equatable {
    /// `max_calls`: the most calls one envelope may carry.
    public var maxCalls = 20
    /// `timeout`: a call still running this long after the batch began gets its own 504.
    public var timeoutMillis: Int64 = 5_000
    public init() {}
}
