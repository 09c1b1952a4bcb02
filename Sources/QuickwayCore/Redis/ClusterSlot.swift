/// Which of Redis Cluster's 16384 hash slots a key lives in, as the cluster
/// specification defines it: `CRC16(key) mod 16384`, CRC16 being the XMODEM variant
/// (polynomial 0x1021, initial value 0, no reflection). When the key holds a hash tag,
/// the first `{` followed later by a `}` with at least one byte between them, only the
/// bytes between them are hashed, so keys that must share a node (the purge log's
/// `{purge}` keys) can be made to.
enum ClusterSlot {
    static let count = 16384

    static func slot(of key: [UInt8]) -> Int {
        key.withUnsafeBufferPointer { b in
            let tagged = hashTag(b)
            return Int(crc16(UnsafeBufferPointer(rebasing: b[tagged])) & 0x3FFF)
        }
    }

    /// The range of `key` that is hashed: the hash tag's content, or the whole key.
    static func hashTag(_ key: UnsafeBufferPointer<UInt8>) -> Range<Int> {
        guard let open = key.firstIndex(of: UInt8(ascii: "{")) else { return 0..<key.count }
        guard let close = key[(open + 1)...].firstIndex(of: UInt8(ascii: "}")), close > open + 1 else { return 0..<key.count }
        return (open + 1)..<close
    }

    /// CRC16/XMODEM ("123456789" gives 0x31C3).
    static func crc16(_ bytes: UnsafeBufferPointer<UInt8>) -> UInt16 {
        var crc: UInt16 = 0
        for b in bytes {
            crc = (crc << 8) ^ table[Int(UInt8(truncatingIfNeeded: crc >> 8) ^ b)]
        }
        return crc
    }

    static func crc16(_ bytes: [UInt8]) -> UInt16 { bytes.withUnsafeBufferPointer { crc16($0) } }

    private static let table: [UInt16] = (0..<256).map { i -> UInt16 in
        var c = UInt16(i) << 8
        for _ in 0..<8 { c = c & 0x8000 != 0 ? (c << 1) ^ 0x1021 : c << 1 }
        return c
    }
}
