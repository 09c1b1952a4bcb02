/// When a service's probe rounds run (issue 16): the first after a small random offset,
/// so that IPs and gateways started together are not probed in lockstep, and each next
/// one after the configured interval give or take 10%. Pure: the random draw is passed
/// in (a closure given the range to draw from), so tests can check bounds and values.
enum ProbeSchedule {
    /// Draws a value in the range it is given; the default is the system generator.
    typealias Draw = (ClosedRange<Int64>) -> Int64

    static func systemDraw(_ range: ClosedRange<Int64>) -> Int64 { Int64.random(in: range) }

    /// Milliseconds before a service's first probe round: drawn from
    /// `0...min(interval / 4, 500)`.
    static func firstDelay(intervalMillis: Int64, random: Draw = systemDraw) -> Int64 {
        random(0...min(intervalMillis / 4, 500))
    }

    /// Milliseconds from one probe round to the next: the interval plus a jitter drawn
    /// from `-interval / 10 ... interval / 10`.
    static func nextDelay(intervalMillis: Int64, random: Draw = systemDraw) -> Int64 {
        let jitter = intervalMillis / 10
        return intervalMillis + random(-jitter...jitter)
    }
}
