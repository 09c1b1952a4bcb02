/// How a cached response is stored as a Redis value: a small binary header, then the
/// reason, the header lines and the body, unchanged. The absolute expiry travels with
/// it, so a gateway that fills its local tier from Redis keeps the original TTL, and
/// `receivedAt` keeps `Age` right across gateways.
///
/// Layout (big-endian): `QWC2`, status u16, receivedAt (Float64 bits) u64,
/// expiresAt (wall ms) i64, reason length u16, header-lines length u32, then the bytes.
enum SharedCacheEntry {
    /// `QWC2` since answers never cross callers (issue 12): entries of older gateways
    /// (`QWC1`) may hold answers to credentialed requests, and read as misses.
    static let magic: [UInt8] = Array("QWC2".utf8)
    static let headerSize = 4 + 2 + 8 + 8 + 2 + 4

    static func encode(_ r: CachedResponse, expiresAtWallMillis: Int64) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(headerSize + r.size)
        out.append(contentsOf: magic)
        put(&out, UInt64(r.status), 2)
        put(&out, r.receivedAt.bitPattern, 8)
        put(&out, UInt64(bitPattern: expiresAtWallMillis), 8)
        put(&out, UInt64(r.reason.count), 2)
        put(&out, UInt64(r.headerLines.count), 4)
        out.append(contentsOf: r.reason)
        out.append(contentsOf: r.headerLines)
        out.append(contentsOf: r.body)
        return out
    }

    /// The response and its absolute expiry, or nil for anything malformed (a value some
    /// other program wrote under our prefix is treated as a miss, never trusted).
    static func decode(_ v: [UInt8]) -> (response: CachedResponse, expiresAtWallMillis: Int64)? {
        guard v.count >= headerSize, Array(v[0..<4]) == magic else { return nil }
        let status = Int(get(v, 4, 2))
        let receivedAt = Double(bitPattern: get(v, 6, 8))
        let expires = Int64(bitPattern: get(v, 14, 8))
        let reasonCount = Int(get(v, 22, 2))
        let linesCount = Int(get(v, 24, 4))
        // Times within a century of now: anything else would overflow the TTL or `Age`
        // arithmetic (a trap in the checked build) and is not ours.
        let nowMillis = Int64(Clock.wallSeconds() * 1000)
        let century: Int64 = 100 * 365 * 86_400_000
        guard (100...999).contains(status), receivedAt.isFinite, abs(receivedAt * 1000 - Double(nowMillis)) < Double(century),
              expires > nowMillis - century, expires < nowMillis + century,
              headerSize + reasonCount + linesCount <= v.count else { return nil }
        let reasonEnd = headerSize + reasonCount
        let linesEnd = reasonEnd + linesCount
        let r = CachedResponse(status: status, reason: Array(v[headerSize..<reasonEnd]), headerLines: Array(v[reasonEnd..<linesEnd]),
                               body: Array(v[linesEnd...]), receivedAt: receivedAt)
        return (r, expires)
    }

    private static func put(_ out: inout [UInt8], _ value: UInt64, _ width: Int) {
        for i in stride(from: width - 1, through: 0, by: -1) { out.append(UInt8(truncatingIfNeeded: value >> (8 * UInt64(i)))) }
    }

    private static func get(_ v: [UInt8], _ at: Int, _ width: Int) -> UInt64 {
        var x: UInt64 = 0
        for i in 0..<width { x = x << 8 | UInt64(v[at + i]) }
        return x
    }
}
