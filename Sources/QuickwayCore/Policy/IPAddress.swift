import Glibc

/// An IP address as two integers, for matching against CIDR blocks with masks
/// (`IPBlock`, `IPBlockList`): no text is looked at once it is read. An IPv4-mapped IPv6
/// address (`::ffff:192.0.2.1`, what a dual-stack socket reports for an IPv4 peer) is
/// read as the IPv4 address it carries, so rules written for IPv4 apply to it.
public enum IPAddress: Sendable, Equatable {
    case v4(UInt32)
    /// High and low 64 bits, in network order.
    case v6(UInt64, UInt64)

    /// Reads `192.0.2.1` or `2001:db8::1` (no brackets, no zone); nil otherwise.
    public static func parse(_ text: String) -> IPAddress? {
        var t = text
        return t.withUTF8 { parse(UnsafeRawBufferPointer($0)) }
    }

    /// The same from bytes (at most 45: the longest IPv6 text form), with `inet_pton`.
    public static func parse(_ bytes: UnsafeRawBufferPointer) -> IPAddress? {
        guard bytes.count > 0, bytes.count <= 45 else { return nil }
        // A NUL-terminated copy on the stack for inet_pton.
        return withUnsafeTemporaryAllocation(of: CChar.self, capacity: 46) { buf -> IPAddress? in
            var colon = false
            for i in 0..<bytes.count {
                let c = bytes[i]
                if c == 0 { return nil }
                if c == UInt8(ascii: ":") { colon = true }
                buf[i] = CChar(bitPattern: c)
            }
            buf[bytes.count] = 0
            if !colon {
                var a4 = in_addr()
                guard inet_pton(AF_INET, buf.baseAddress!, &a4) == 1 else { return nil }
                return .v4(UInt32(bigEndian: a4.s_addr))
            }
            var a6 = in6_addr()
            guard inet_pton(AF_INET6, buf.baseAddress!, &a6) == 1 else { return nil }
            return withUnsafeBytes(of: &a6) { raw in
                let hi = UInt64(bigEndian: raw.loadUnaligned(fromByteOffset: 0, as: UInt64.self))
                let lo = UInt64(bigEndian: raw.loadUnaligned(fromByteOffset: 8, as: UInt64.self))
                // ::ffff:a.b.c.d
                if hi == 0 && lo >> 32 == 0xFFFF { return .v4(UInt32(truncatingIfNeeded: lo)) }
                return .v6(hi, lo)
            }
        }
    }
}

/// One CIDR block of a rule (`203.0.113.0/24`, `2001:db8::/32`, or one address: /32 or
/// /128). An IPv4 block matches only IPv4 clients (IPv4-mapped ones included) and an
/// IPv6 block only IPv6 ones: `::/0` does not take in every IPv4 address.
public struct IPBlock: Sendable, Equatable, CustomStringConvertible {
    enum Family: Sendable, Equatable { case v4, v6 }
    let family: Family
    /// The network, already masked; IPv4 in `lo`'s low 32 bits.
    let hi: UInt64, lo: UInt64
    let maskHi: UInt64, maskLo: UInt64
    public let prefixBits: Int
    public let text: String
    public var description: String { text }

    /// Reads a block from the config. Host bits set below the prefix
    /// (`10.0.0.1/8`) are an error, not masked silently: the writer most likely meant
    /// another block (Python's `ip_network` is as strict).
    public static func parse(_ text: String) -> Result<IPBlock, IPBlockError> {
        let parts = text.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        guard let address = IPAddress.parse(String(parts[0])) else {
            return .failure(IPBlockError("not an IP address or CIDR block"))
        }
        let isV4Text = !parts[0].contains(":")
        var bits: Int
        switch address {
        case .v4: bits = 32
        case .v6: bits = 128
        }
        if parts.count == 2 {
            guard !parts[1].isEmpty, parts[1].utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), let b = Int(parts[1]) else { return .failure(IPBlockError("the prefix length is not a number")) }
            let max = isV4Text ? 32 : 128
            guard (0...max).contains(b) else { return .failure(IPBlockError("the prefix length must be 0 to \(max)")) }
            bits = b
            // An IPv4-mapped IPv6 block (::ffff:10.0.0.0/104) is the IPv4 block it maps.
            if !isV4Text, case .v4 = address {
                guard b >= 96 else { return .failure(IPBlockError("an IPv4-mapped block needs a prefix of at least 96 bits")) }
                bits = b - 96
            }
        }
        let block: IPBlock
        switch address {
        case .v4(let a):
            let mask: UInt64 = bits == 0 ? 0 : (UInt64(0xFFFF_FFFF) << UInt64(32 - bits)) & 0xFFFF_FFFF
            guard UInt64(a) & ~mask == 0 else {
                return .failure(IPBlockError("has host bits set below the /\(bits) prefix (the block's network is \(Self.v4Text(UInt32(UInt64(a) & mask)))/\(bits))"))
            }
            block = IPBlock(family: .v4, hi: 0, lo: UInt64(a), maskHi: 0, maskLo: mask, prefixBits: bits, text: text)
        case .v6(let h, let l):
            let mh: UInt64 = bits == 0 ? 0 : bits >= 64 ? ~0 : ~0 << UInt64(64 - bits)
            let ml: UInt64 = bits <= 64 ? 0 : bits == 128 ? ~0 : ~0 << UInt64(128 - bits)
            guard h & ~mh == 0 && l & ~ml == 0 else { return .failure(IPBlockError("has host bits set below the /\(bits) prefix")) }
            block = IPBlock(family: .v6, hi: h, lo: l, maskHi: mh, maskLo: ml, prefixBits: bits, text: text)
        }
        return .success(block)
    }

    static func v4Text(_ a: UInt32) -> String { "\(a >> 24).\((a >> 16) & 255).\((a >> 8) & 255).\(a & 255)" }

    @inline(__always)
    public func contains(_ a: IPAddress) -> Bool {
        switch (family, a) {
        case (.v4, .v4(let x)): return UInt64(x) & maskLo == lo
        case (.v6, .v6(let h, let l)): return h & maskHi == hi && l & maskLo == lo
        default: return false
        }
    }
}

/// Why a config value is not a CIDR block.
public struct IPBlockError: Error, Sendable {
    public let message: String
    init(_ message: String) { self.message = message }
}
