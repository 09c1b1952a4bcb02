/// Reads WebSocket frames (RFC 6455 section 5) from one side of a relayed connection,
/// incrementally: feed it whatever bytes are buffered, as often as more arrive; each call
/// returns one event and how many bytes it used, whatever the split (a header cut after
/// any byte, a payload in any number of pieces). Pure; the relay owns one per side.
///
/// Data frames are not assembled: their header is reported, then their payload as it
/// arrives (still masked, as on the wire, so the relay forwards it untouched), then their
/// end. A data frame that is all in the input at once is reported as one event
/// (`dataFrame`): the common case of small messages, in a third of the steps. Control
/// frames (at most 125 bytes) are reported whole, unmasked.
///
/// What it refuses, with the close code for the side at fault:
/// - 1002: an unknown opcode; reserved bits, except RSV1 on the first frame of a data
///   message when `permessage-deflate` was negotiated; a masked frame from the server
///   side or an unmasked one from the client side; a control frame longer than 125 bytes
///   or fragmented; a continuation with no message begun, or a new message inside one; a
///   64-bit length with its top bit set; a close frame with a 1-byte payload or a code
///   not allowed on the wire.
/// - 1007: a text message (or a close reason) that is not UTF-8. Checked across
///   fragments as the bytes pass; not for compressed messages (`permessage-deflate`),
///   whose text the gateway does not inflate.
/// - 1009: a message whose fragments add up to more than `maxMessageBytes`, refused at
///   the header of the frame that would cross it; a compressed message (`permessage-deflate`)
///   that inflates to more, refused at the bytes that cross it (`MessageInflater`), so the
///   limit holds on what the receiver will hold in memory. Compressed bytes that are not
///   DEFLATE are 1007.
public struct WebSocketFrameParser: Sendable {
    public enum Event: Equatable, Sendable {
        /// Everything given was used; feed more bytes.
        case needMore
        /// A data frame (text, binary or continuation) begins; its payload follows.
        case dataHeader(WebSocketFrameHeader)
        /// Payload bytes of the current data frame, as on the wire: a range of the input.
        case dataPayload(Range<Int>)
        /// The data frame ended; `messageEnd` when it was its message's last (FIN).
        case dataEnd(messageEnd: Bool)
        /// A whole data frame at once, header and payload (a range of the input, as on
        /// the wire): the same as `dataHeader`, `dataPayload` and `dataEnd` in a row.
        case dataFrame(WebSocketFrameHeader, Range<Int>, messageEnd: Bool)
        /// A whole control frame, its payload unmasked.
        case control(opcode: UInt8, payload: [UInt8])
    }

    /// Frames from a client must be masked, frames from a server must not (RFC 6455 5.1).
    public let expectMasked: Bool
    /// `permessage-deflate` was negotiated: RSV1 marks a compressed message.
    public let compressionNegotiated: Bool
    public let maxMessageBytes: UInt64

    /// Header bytes of a frame whose header came split.
    private var headerBytes: [UInt8] = []
    private var frame: WebSocketFrameHeader?
    private var remaining: UInt64 = 0
    /// Offset in the current frame's payload (for its mask).
    private var offset: UInt64 = 0
    private var controlPayload: [UInt8] = []
    // The data message in progress, if any.
    private var messageOpen = false
    private var messageBytes: UInt64 = 0
    private var messageChecksUTF8 = false
    private var utf8 = UTF8Validator()
    /// The message in progress is compressed (RSV1 on its first frame).
    private var messageCompressed = false
    /// Made at the first compressed message (`permessage-deflate`).
    private var inflater: MessageInflater?

    public init(expectMasked: Bool, compressionNegotiated: Bool = false, maxMessageBytes: Int) {
        self.expectMasked = expectMasked
        self.compressionNegotiated = compressionNegotiated
        self.maxMessageBytes = UInt64(max(0, maxMessageBytes))
    }

    /// Nothing is half-read: no partial header, frame or message (a relay may release its buffers).
    public var isBetweenMessages: Bool { frame == nil && headerBytes.isEmpty && !messageOpen }

    /// The next event from `input` and how many of its bytes were used.
    public mutating func next(_ input: UnsafeRawBufferPointer) throws(WebSocketViolation) -> (Event, Int) {
        if frame == nil {
            if input.isEmpty { return (.needMore, 0) }
            if headerBytes.isEmpty && !messageOpen,
               let whole = try Self.wholeMessage(input, expectMasked: expectMasked, maxMessageBytes: maxMessageBytes) {
                return whole
            }
        }
        var i = 0
        while true {
            guard let h = frame else {
                // A header: straight from the input when it is all there, else gathered.
                var parsed: (WebSocketFrameHeader, Int)?
                if headerBytes.isEmpty {
                    parsed = Self.parseHeader(UnsafeRawBufferPointer(rebasing: input[i...]))
                    if let (_, size) = parsed { i += size }
                }
                if parsed == nil {
                    // Not all there: gathered byte by byte (at most 14).
                    while i < input.count {
                        headerBytes.append(input[i])
                        i += 1
                        let p = headerBytes.withUnsafeBytes { Self.parseHeader($0) }
                        if p != nil { parsed = p; headerBytes.removeAll(keepingCapacity: true); break }
                    }
                }
                guard let (header, _) = parsed else { return (.needMore, i) }
                try begin(header)
                if !WebSocketOpcode.isControl(header.opcode) {
                    // The whole payload is here: header, payload and end in one event.
                    if UInt64(input.count - i) >= header.length {
                        let n = Int(header.length)
                        try checkPayload(header, UnsafeRawBufferPointer(rebasing: input[i..<(i + n)]))
                        try endFrame(header)
                        return (.dataFrame(header, i..<(i + n), messageEnd: header.fin), i + n)
                    }
                    return (.dataHeader(header), i)
                }
                continue
            }
            if WebSocketOpcode.isControl(h.opcode) {
                let take = Int(min(remaining, UInt64(input.count - i)))
                for k in 0..<take {
                    let b = input[i + k]
                    controlPayload.append(h.mask.map { b ^ WebSocketFrameHeader.maskByte($0, offset + UInt64(k)) } ?? b)
                }
                i += take
                offset += UInt64(take)
                remaining -= UInt64(take)
                if remaining > 0 { return (.needMore, i) }
                frame = nil
                let payload = controlPayload
                controlPayload = []
                if h.opcode == WebSocketOpcode.close { try Self.checkClose(payload) }
                return (.control(opcode: h.opcode, payload: payload), i)
            }
            if remaining == 0 {
                try endFrame(h)
                return (.dataEnd(messageEnd: h.fin), i)
            }
            if i == input.count { return (.needMore, i) }
            let take = Int(min(remaining, UInt64(input.count - i)))
            try checkPayload(h, UnsafeRawBufferPointer(rebasing: input[i..<(i + take)]))
            remaining -= UInt64(take)
            offset += UInt64(take)
            return (.dataPayload(i..<(i + take)), i + take)
        }
    }

    /// The usual case on its own short path: a whole message in one frame (FIN, no
    /// reserved bits, text or binary, a 7-bit length, masked as the side must), all in
    /// `input`, and within the size limit. Nil when `input` does not start with one (the
    /// general path then reads it). Leaves no state behind: the message begins and ends
    /// here, so the caller may take it only with nothing else half-read.
    @inline(__always)
    private static func wholeMessage(_ input: UnsafeRawBufferPointer, expectMasked: Bool,
                                     maxMessageBytes: UInt64) throws(WebSocketViolation) -> (Event, Int)? {
        guard input.count >= 2 else { return nil }
        let b0 = input[0], b1 = input[1]
        let op = b0 & 0x0F
        let length = Int(b1 & 0x7F)
        let masked = b1 & 0x80 != 0
        let start = masked ? 6 : 2
        guard b0 & 0xF0 == 0x80, op == WebSocketOpcode.binary || op == WebSocketOpcode.text, length < 126,
              masked == expectMasked, UInt64(length) <= maxMessageBytes, input.count - start >= length else { return nil }
        var mask: UInt32?
        if masked { mask = UInt32(input[2]) << 24 | UInt32(input[3]) << 16 | UInt32(input[4]) << 8 | UInt32(input[5]) }
        if op == WebSocketOpcode.text {
            var utf8 = UTF8Validator()
            var ok = true
            for j in 0..<length {
                let b = mask.map { input[start + j] ^ WebSocketFrameHeader.maskByte($0, UInt64(j)) } ?? input[start + j]
                if !utf8.feed(b) { ok = false; break }
            }
            if !ok || !utf8.isComplete { throw WebSocketViolation(WebSocketCloseCode.invalidPayload, "text message is not valid UTF-8") }
        }
        let h = WebSocketFrameHeader(fin: true, rsv: 0, opcode: op, mask: mask, length: UInt64(length))
        return (.dataFrame(h, start..<(start + length), messageEnd: true), start + length)
    }

    /// Checks the next payload bytes of data frame `h` (the UTF-8 of a text message,
    /// unmasked as it goes). The message's last bytes must end on a whole character:
    /// checked before they are handed out, so the relay forwards nothing of a bad end.
    private mutating func checkPayload(_ h: WebSocketFrameHeader, _ bytes: UnsafeRawBufferPointer) throws(WebSocketViolation) {
        if messageCompressed { return try countInflated(h, bytes) }
        guard messageChecksUTF8 else { return }
        var ok = true
        if let k = h.mask {
            for j in 0..<bytes.count where !utf8.feed(bytes[j] ^ WebSocketFrameHeader.maskByte(k, offset + UInt64(j))) { ok = false; break }
        } else {
            ok = utf8.feed(bytes)
        }
        if !ok || (h.fin && UInt64(bytes.count) == remaining && !utf8.isComplete) {
            throw WebSocketViolation(WebSocketCloseCode.invalidPayload, "text message is not valid UTF-8")
        }
    }

    /// Feeds a compressed message's bytes (unmasked here) to its inflater and refuses the
    /// message once it inflates past the limit.
    private func countInflated(_ h: WebSocketFrameHeader, _ bytes: UnsafeRawBufferPointer) throws(WebSocketViolation) {
        guard let inflater else { throw WebSocketViolation(WebSocketCloseCode.internalError, "cannot inflate a compressed message") }
        let ok: Bool
        if let k = h.mask {
            ok = withUnsafeTemporaryAllocation(byteCount: bytes.count, alignment: 1) { plain in
                for j in 0..<bytes.count { plain[j] = bytes[j] ^ WebSocketFrameHeader.maskByte(k, offset + UInt64(j)) }
                return inflater.feed(UnsafeRawBufferPointer(plain), limit: maxMessageBytes)
            }
        } else {
            ok = inflater.feed(bytes, limit: maxMessageBytes)
        }
        try checkInflated(ok, inflater)
    }

    /// The limit first: what was inflated before bad data is the same however the bytes
    /// came split, but whether the bad data is reached in the same call is not (a call
    /// stops once past the limit), so a message past the limit is 1009 either way.
    private func checkInflated(_ ok: Bool, _ inflater: MessageInflater) throws(WebSocketViolation) {
        if inflater.produced > maxMessageBytes {
            throw WebSocketViolation(WebSocketCloseCode.messageTooBig, "message inflates to more than \(maxMessageBytes) bytes")
        }
        if !ok { throw WebSocketViolation(WebSocketCloseCode.invalidPayload, "compressed message is not valid DEFLATE data") }
    }

    /// Data frame `h` has had all its payload: the next bytes are a header; its FIN ends the message.
    private mutating func endFrame(_ h: WebSocketFrameHeader) throws(WebSocketViolation) {
        frame = nil
        remaining = 0
        guard h.fin else { return }
        if messageCompressed, let inflater {
            try checkInflated(inflater.endMessage(limit: maxMessageBytes), inflater)
            messageCompressed = false
        }
        if messageChecksUTF8 && !utf8.isComplete { throw WebSocketViolation(WebSocketCloseCode.invalidPayload, "text message is not valid UTF-8") }
        messageOpen = false
        messageBytes = 0
        utf8 = UTF8Validator()
    }

    /// Checks a frame's header against the connection's rules and starts it.
    private mutating func begin(_ h: WebSocketFrameHeader) throws(WebSocketViolation) {
        let op = h.opcode
        let isControl = WebSocketOpcode.isControl(op)
        guard op <= WebSocketOpcode.binary || (op >= WebSocketOpcode.close && op <= WebSocketOpcode.pong) else {
            throw WebSocketViolation(WebSocketCloseCode.protocolError, "unknown opcode \(op)")
        }
        if h.length >> 63 != 0 { throw WebSocketViolation(WebSocketCloseCode.protocolError, "payload length with its top bit set") }
        if h.rsv & 0x30 != 0 { throw WebSocketViolation(WebSocketCloseCode.protocolError, "reserved bits set without a negotiated extension") }
        if h.rsv & 0x40 != 0 && !(compressionNegotiated && (op == WebSocketOpcode.text || op == WebSocketOpcode.binary)) {
            throw WebSocketViolation(WebSocketCloseCode.protocolError, compressionNegotiated ? "RSV1 set on a frame that is not a message's first"
                                                                                        : "reserved bits set without a negotiated extension")
        }
        if (h.mask != nil) != expectMasked {
            throw WebSocketViolation(WebSocketCloseCode.protocolError, expectMasked ? "client frames must be masked" : "server frames must not be masked")
        }
        if isControl {
            if !h.fin { throw WebSocketViolation(WebSocketCloseCode.protocolError, "fragmented control frame") }
            if h.length > 125 { throw WebSocketViolation(WebSocketCloseCode.protocolError, "control frame longer than 125 bytes") }
            controlPayload.reserveCapacity(Int(h.length))
        } else {
            if op == WebSocketOpcode.continuation {
                if !messageOpen { throw WebSocketViolation(WebSocketCloseCode.protocolError, "continuation frame without a message begun") }
            } else {
                if messageOpen { throw WebSocketViolation(WebSocketCloseCode.protocolError, "new message before the previous one ended") }
                messageOpen = true
                messageBytes = 0
                messageChecksUTF8 = op == WebSocketOpcode.text && h.rsv & 0x40 == 0
                utf8 = UTF8Validator()
                messageCompressed = h.rsv & 0x40 != 0
                if messageCompressed {
                    if inflater == nil { inflater = MessageInflater() }
                    inflater?.nextMessage()
                }
            }
            if h.length > maxMessageBytes || messageBytes + h.length > maxMessageBytes {
                throw WebSocketViolation(WebSocketCloseCode.messageTooBig, "message larger than \(maxMessageBytes) bytes")
            }
            messageBytes += h.length
        }
        frame = h
        remaining = h.length
        offset = 0
    }

    /// A header at the start of `b`, and its size; nil if `b` holds only part of it.
    static func parseHeader(_ b: UnsafeRawBufferPointer) -> (WebSocketFrameHeader, Int)? {
        guard b.count >= 2 else { return nil }
        let b0 = b[0], b1 = b[1]
        let masked = b1 & 0x80 != 0
        let len7 = b1 & 0x7F
        let extra = len7 == 126 ? 2 : len7 == 127 ? 8 : 0
        let size = 2 + extra + (masked ? 4 : 0)
        guard b.count >= size else { return nil }
        var length = UInt64(len7)
        if extra > 0 {
            length = 0
            for k in 0..<extra { length = length << 8 | UInt64(b[2 + k]) }
        }
        var mask: UInt32?
        if masked {
            let m = 2 + extra
            mask = UInt32(b[m]) << 24 | UInt32(b[m + 1]) << 16 | UInt32(b[m + 2]) << 8 | UInt32(b[m + 3])
        }
        return (WebSocketFrameHeader(fin: b0 & 0x80 != 0, rsv: b0 & 0x70, opcode: b0 & 0x0F, mask: mask, length: length), size)
    }

    /// RFC 6455 5.5.1 and 7.4: empty, or a code allowed on the wire and a UTF-8 reason.
    static func checkClose(_ p: [UInt8]) throws(WebSocketViolation) {
        if p.isEmpty { return }
        if p.count == 1 { throw WebSocketViolation(WebSocketCloseCode.protocolError, "close frame with a 1-byte payload") }
        let code = WebSocketFrame.closeCode(p)
        if !WebSocketCloseCode.isValidOnTheWire(code) { throw WebSocketViolation(WebSocketCloseCode.protocolError, "close code \(code) is not allowed") }
        if !p.withUnsafeBytes({ UTF8Validator.isValid(UnsafeRawBufferPointer(rebasing: $0[2...])) }) {
            throw WebSocketViolation(WebSocketCloseCode.invalidPayload, "close reason is not valid UTF-8")
        }
    }
}
