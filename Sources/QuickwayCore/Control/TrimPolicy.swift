/// When the gateway gives freed heap memory back to the system (`MemoryGiveBack`): read
/// once a second, it says "now" when load has dropped since the last time:
/// - quiet: no request finished during the last second, none is running, the count of
///   open connections did not change, and something came or went since the last trim;
/// - fell: open connections, or requests in flight, are at most half of their peak since
///   the last trim, with that peak at least `minPeak` (a burst that ended while other
///   traffic goes on), and at least `minReadingsBetweenFallTrims` readings since the last
///   trim: a trim holds the heap's locks for milliseconds while workers run, so a client
///   that opens and drops connections in waves must not be able to set one off every
///   two seconds.
/// Never under steady load: what a busy gateway frees it takes again, and a trim of a big
/// heap takes milliseconds (BENCHMARKS.md, "Memory after a burst").
/// Pure logic; the admin loop feeds it.
struct TrimPolicy {
    static let minPeak = 256
    /// Readings (seconds) between two trims set off by a fall under load.
    static let minReadingsBetweenFallTrims = 30
    private var readingsSinceTrim = Int.max / 2

    private var peakConnections = 0
    private var peakInFlight = 0
    private var lastConnections = -1
    private var lastFinished: Int64 = -1
    /// Requests or connections came or went since the last trim.
    private var changed = false

    /// One reading (once a second): open client connections, requests in flight, and
    /// requests finished so far. True: trim now (the peaks start again from here).
    mutating func shouldTrim(connections: Int, inFlight: Int, finished: Int64) -> Bool {
        readingsSinceTrim += 1
        let quiet = finished == lastFinished && inFlight == 0 && connections == lastConnections
        if !quiet { changed = true }
        lastFinished = finished
        lastConnections = connections
        peakConnections = max(peakConnections, connections)
        peakInFlight = max(peakInFlight, inFlight)
        let fell = readingsSinceTrim >= Self.minReadingsBetweenFallTrims
            && ((peakConnections >= Self.minPeak && connections <= peakConnections / 2)
                || (peakInFlight >= Self.minPeak && inFlight <= peakInFlight / 2))
        guard changed, quiet || fell else { return false }
        changed = false
        readingsSinceTrim = 0
        peakConnections = connections
        peakInFlight = inFlight
        return true
    }
}
