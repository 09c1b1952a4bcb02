/// RFC 6455 section 5 frame facts shared by the parser and the relay: opcodes, close
/// codes, the header and how it is written. Pure.
public enum WebSocketOpcode {
    public static let continuation: UInt8 = 0x0
    public static let text: UInt8 = 0x1
    public static let binary: UInt8 = 0x2
    public static let close: UInt8 = 0x8
    public static let ping: UInt8 = 0x9
    public static let pong: UInt8 = 0xA

    public static func isControl(_ op: UInt8) -> Bool { op & 0x8 != 0 }
}

/// Close codes the gateway sends (RFC 6455 7.4.1).
public enum WebSocketCloseCode {
    public static let normal: UInt16 = 1000
    public static let goingAway: UInt16 = 1001
    public static let protocolError: UInt16 = 1002
    /// Not sent: no close frame came (counted for connections that ended without one).
    public static let abnormal: UInt16 = 1006
    public static let invalidPayload: UInt16 = 1007
    public static let messageTooBig: UInt16 = 1009
    public static let internalError: UInt16 = 1011

    /// Codes a peer may put in a close frame (7.4.1/7.4.2: 1004-1006 and 1015 are
    /// reserved; 3000-4999 are for libraries and applications).
    public static func isValidOnTheWire(_ code: UInt16) -> Bool {
        switch code {
        case 1000...1003, 1007...1014: return true
        case 3000...4999: return true
        default: return false
        }
    }
}

/// A protocol violation: the connection closes with `code` towards the side at fault.
public struct WebSocketViolation: Error, Equatable, Sendable {
    public let code: UInt16
    public let reason: String
    public init(_ code: UInt16, _ reason: String) {
        self.code = code
        self.reason = reason
    }
}

/// One frame's header (RFC 6455 5.2).
public struct WebSocketFrameHeader: Equatable, Sendable {
    public var fin: Bool
    /// RSV1-3 as they are in the first byte (0x40, 0x20, 0x10).
    public var rsv: UInt8
    public var opcode: UInt8
    /// The masking key (big-endian as on the wire), when the frame is masked.
    public var mask: UInt32?
    public var length: UInt64

    public init(fin: Bool, rsv: UInt8 = 0, opcode: UInt8, mask: UInt32? = nil, length: UInt64) {
        self.fin = fin
        self.rsv = rsv
        self.opcode = opcode
        self.mask = mask
        self.length = length
    }

    /// The header's size on the wire, with the shortest length encoding.
    public var encodedSize: Int { 2 + (length < 126 ? 0 : length <= 0xFFFF ? 2 : 8) + (mask == nil ? 0 : 4) }

    /// Writes the header with the shortest length encoding (RFC 6455 5.2 requires it).
    public func encode(into out: inout [UInt8]) {
        out.append((fin ? 0x80 : 0) | rsv | opcode)
        let m: UInt8 = mask == nil ? 0 : 0x80
        if length < 126 {
            out.append(m | UInt8(length))
        } else if length <= 0xFFFF {
            out.append(m | 126)
            out.append(UInt8(length >> 8))
            out.append(UInt8(length & 0xFF))
        } else {
            out.append(m | 127)
            for s in stride(from: 56, through: 0, by: -8) { out.append(UInt8((length >> UInt64(s)) & 0xFF)) }
        }
        if let k = mask {
            out.append(UInt8(k >> 24)); out.append(UInt8((k >> 16) & 0xFF)); out.append(UInt8((k >> 8) & 0xFF)); out.append(UInt8(k & 0xFF))
        }
    }

    /// The mask byte for payload offset `i`.
    @inline(__always) public static func maskByte(_ key: UInt32, _ i: UInt64) -> UInt8 {
        UInt8((key >> (24 - 8 * UInt32(i & 3))) & 0xFF)
    }
}

public enum WebSocketFrame {
    /// A whole frame (a control frame the gateway sends), masked with `mask` if given.
    public static func encode(opcode: UInt8, payload: [UInt8], mask: UInt32? = nil) -> [UInt8] {
        let h = WebSocketFrameHeader(fin: true, opcode: opcode, mask: mask, length: UInt64(payload.count))
        var out: [UInt8] = []
        out.reserveCapacity(h.encodedSize + payload.count)
        h.encode(into: &out)
        if let k = mask {
            for (i, b) in payload.enumerated() { out.append(b ^ WebSocketFrameHeader.maskByte(k, UInt64(i))) }
        } else {
            out.append(contentsOf: payload)
        }
        return out
    }

    /// A close frame's payload: the code, then a UTF-8 reason cut to fit 125 bytes.
    public static func closePayload(_ code: UInt16, _ reason: String) -> [UInt8] {
        var p: [UInt8] = [UInt8(code >> 8), UInt8(code & 0xFF)]
        var r = Array(reason.utf8.prefix(123))
        // Never cut inside a character.
        while !r.isEmpty && !r.withUnsafeBytes({ UTF8Validator.isValid($0) }) { r.removeLast() }
        p.append(contentsOf: r)
        return p
    }

    /// The code in a close frame's payload (1005, "no status", for an empty one).
    public static func closeCode(_ payload: [UInt8]) -> UInt16 {
        payload.count >= 2 ? UInt16(payload[0]) << 8 | UInt16(payload[1]) : 1005
    }
}
