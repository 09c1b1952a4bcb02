/// The `RateLimit-Policy` and `RateLimit` fields of a 429, as
/// draft-ietf-httpapi-ratelimit-headers-10 (September 2025; -11 of May 2026 keeps this
/// syntax) writes them: Structured Field lists whose members are a quoted policy name
/// with parameters, `RateLimit-Policy: "ip";q=40;w=2` (quota `q` per window of `w`
/// seconds) and `RateLimit: "ip";r=0;t=2` (`r` left, whole again in `t` seconds).
///
/// A rate limit is a bucket of `burst` calls refilled at the rate, so its policy is
/// `q` = burst per `w` = the seconds a whole bucket takes to refill (rounded up); a quota
/// is its limit per window. Only the refused limit is named (the one the client must wait
/// for). Successful answers carry none: two fields on every answer cost bytes and
/// instructions for clients that rarely read them, and `Retry-After` on the 429 says
/// when to come back.
enum RateLimitFields {
    /// Whole seconds, rounded up, at least 1 (`Retry-After` and `t`: never 0 while refused).
    static func secondsUp(_ nanos: Int64) -> Int64 { max(1, (nanos + 999_999_999) / 1_000_000_000) }

    /// Seconds for `t` (0 allowed: whole now).
    static func secondsUpOrZero(_ nanos: Int64) -> Int64 { nanos <= 0 ? 0 : (nanos + 999_999_999) / 1_000_000_000 }

    /// `Name: value\r\n` lines for a refused rate limit.
    static func rateLimit(name: String, gcra: GCRA, fullNanos: Int64) -> String {
        lines(name: name, quota: gcra.burst, window: secondsUp(gcra.tolerance), remaining: 0, reset: secondsUpOrZero(fullNanos))
    }

    /// `Name: value\r\n` lines for an exhausted quota.
    static func quota(name: String, limit: Int64, windowSeconds: Int64, resetSeconds: Int64) -> String {
        lines(name: name, quota: limit, window: windowSeconds, remaining: 0, reset: resetSeconds)
    }

    static func lines(name: String, quota: Int64, window: Int64, remaining: Int64, reset: Int64) -> String {
        "RateLimit-Policy: \"\(name)\";q=\(quota);w=\(window)\r\nRateLimit: \"\(name)\";r=\(remaining);t=\(reset)\r\n"
    }
}
