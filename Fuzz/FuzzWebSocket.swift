// libFuzzer harness: the WebSocket frame parser and the UTF-8 validator. Built by
// scripts/dev/fuzz.sh with `swiftc -sanitize=fuzzer,address` together with their own source
// files.
//
// The input is a flags byte (bit 0: frames from a client, masked; bit 1: permessage-deflate
// negotiated; bits 2-3: the message limit, 0, 125, 1000 or 1 MiB; bits 4-7: the piece size
// for the incremental read, 1 to 16 bytes), then the bytes of one side of a connection.
//
// UTF8Validator is checked against the standard library's decoder, an independent reading
// of the same rules: it accepts exactly what `String(validating:as:)` accepts (and such
// bytes round-trip through `String(decoding:as:)`); fed byte by byte it refuses at the byte
// where the standard library's parser first sees an ill-formed sequence, and not before.
//
// The frame parser reads the input as a relay does, in one piece and in pieces: both give
// the same frames (header, unmasked payload, message end), control frames and violation,
// whatever the split. Every reported range lies in the bytes given; every text message
// that ends, not compressed, is valid UTF-8 by the standard library; a control payload is
// at most 125 bytes and a close payload is empty or has an allowed code and UTF-8 reason.

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzWebSocket(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    guard size >= 1 else { return 0 }
    let flags = data[0]
    let input = Array(UnsafeBufferPointer(start: data + 1, count: size - 1))
    checkUTF8(input)
    let masked = flags & 1 != 0, deflate = flags & 2 != 0
    let limit = [0, 125, 1000, 1 << 20][Int(flags >> 2) & 3]
    let step = Int(flags >> 4) + 1
    let whole = read(input, step: input.count, masked: masked, deflate: deflate, limit: limit)
    let pieces = read(input, step: step, masked: masked, deflate: deflate, limit: limit)
    if whole != pieces {
        fatalError("whole and in pieces of \(step) disagree:\n  whole  \(whole)\n  pieces \(pieces)")
    }
    return 0
}

func checkUTF8(_ input: [UInt8]) {
    let ours = input.withUnsafeBytes { UTF8Validator.isValid($0) }
    let std = String(validating: input, as: UTF8.self)
    precondition(ours == (std != nil), "UTF8Validator says \(ours), the standard library \(std != nil): \(input)")
    if let std { precondition(Array(String(decoding: input, as: UTF8.self).utf8) == input && Array(std.utf8) == input) }
    // Where the standard library's parser first meets an ill-formed sequence: at its
    // first byte when that cannot start a character, else at the byte after its longest
    // valid beginning (nil: only when that beginning runs to the end of the input).
    var expectedFailure: Int?
    var expectIncomplete = false
    var parser = Unicode.UTF8.ForwardParser()
    var it = input.makeIterator()
    var at = 0
    loop: while true {
        switch parser.parseScalar(from: &it) {
        case .valid(let s): at += s.count
        case .emptyInput: break loop
        case .error(let length):
            let lead = input[at]
            if (0xC2...0xF4).contains(lead) {
                if at + length == input.count { expectIncomplete = true } else { expectedFailure = at + length }
            } else {
                expectedFailure = at
            }
            break loop
        }
    }
    var v = UTF8Validator()
    var failedAt: Int?
    for (k, b) in input.enumerated() where !v.feed(b) { failedAt = k; break }
    precondition(failedAt == expectedFailure, "UTF8Validator refuses at \(failedAt.map(String.init) ?? "none"), the standard library at \(expectedFailure.map(String.init) ?? "none"): \(input)")
    if failedAt == nil { precondition(v.isComplete == !expectIncomplete, "UTF8Validator complete \(v.isComplete) for \(input)") }
}

/// The events of reading `input` in pieces of `step` bytes, the way a relay does: the
/// unused bytes kept, more appended, the parser asked again until it needs more.
func read(_ input: [UInt8], step: Int, masked: Bool, deflate: Bool, limit: Int) -> [String] {
    var p = WebSocketFrameParser(expectMasked: masked, compressionNegotiated: deflate, maxMessageBytes: limit)
    var log: [String] = []
    var buffer: [UInt8] = []
    var at = 0
    // The frame being read: its header and payload so far (unmasked); the text message.
    var frame: WebSocketFrameHeader?
    var payload: [UInt8] = []
    var message: [UInt8] = []
    var messageIsText = false

    func unmask(_ h: WebSocketFrameHeader, _ bytes: ArraySlice<UInt8>, from offset: Int) -> [UInt8] {
        guard let k = h.mask else { return Array(bytes) }
        return bytes.enumerated().map { $0.element ^ WebSocketFrameHeader.maskByte(k, UInt64(offset + $0.offset)) }
    }
    func begin(_ h: WebSocketFrameHeader) {
        precondition(frame == nil, "a data frame began inside another")
        precondition(h.opcode <= WebSocketOpcode.binary && h.rsv & 0x30 == 0 && (h.mask != nil) == masked && h.length <= UInt64(limit))
        if h.opcode != WebSocketOpcode.continuation {
            message = []
            messageIsText = h.opcode == WebSocketOpcode.text && h.rsv & 0x40 == 0
        }
        frame = h
        payload = []
    }
    func end(_ messageEnd: Bool) {
        let h = frame!
        precondition(UInt64(payload.count) == h.length && messageEnd == h.fin)
        log.append("frame fin \(h.fin) rsv \(h.rsv) op \(h.opcode) length \(h.length) payload \(payload)")
        message += payload
        frame = nil
        if messageEnd && messageIsText {
            precondition(String(validating: message, as: UTF8.self) != nil, "a text message that is not UTF-8 passed: \(message)")
        }
    }

    while true {
        if at < input.count {
            let e = min(input.count, at + step)
            buffer += input[at..<e]
            at = e
        }
        var used = 0
        events: while true {
            let rest = Array(buffer[used...])
            let r = rest.withUnsafeBytes { raw in
                Result { () throws(WebSocketViolation) -> (WebSocketFrameParser.Event, Int) in try p.next(raw) }
            }
            switch r {
            case .failure(let v):
                // The payload of a frame cut short by the violation is left out: how much
                // of it was handed on depends on the split.
                log.append("violation \(v.code)")
                return log
            case .success(let (event, n)):
                precondition(n >= 0 && n <= rest.count, "used \(n) of \(rest.count)")
                switch event {
                case .needMore:
                    precondition(n == rest.count, "needs more with \(rest.count - n) bytes unused")
                case .dataHeader(let h):
                    begin(h)
                case .dataPayload(let range):
                    precondition(range.lowerBound >= 0 && range.upperBound <= n && !range.isEmpty, "payload \(range) outside \(n)")
                    payload += unmask(frame!, rest[range], from: payload.count)
                case .dataEnd(let messageEnd):
                    end(messageEnd)
                case .dataFrame(let h, let range, let messageEnd):
                    precondition(range.lowerBound >= 0 && range.upperBound <= n && UInt64(range.count) == h.length, "frame \(range) outside \(n)")
                    begin(h)
                    payload = unmask(h, rest[range], from: 0)
                    end(messageEnd)
                case .control(let opcode, let body):
                    precondition(body.count <= 125 && WebSocketOpcode.isControl(opcode) && opcode <= WebSocketOpcode.pong)
                    if opcode == WebSocketOpcode.close && !body.isEmpty {
                        precondition(body.count >= 2 && WebSocketCloseCode.isValidOnTheWire(WebSocketFrame.closeCode(body))
                                     && String(validating: body[2...], as: UTF8.self) != nil, "close frame passed: \(body)")
                    }
                    log.append("control \(opcode) \(body)")
                }
                used += n
                if case .needMore = event { break events }
            }
        }
        buffer.removeFirst(used)
        if at == input.count {
            // The unfinished frame, as far as it got (the same, whatever the split).
            if let h = frame { log.append("unfinished op \(h.opcode) length \(h.length) payload \(payload)") }
            log.append("end between messages \(p.isBetweenMessages)")
            return log
        }
    }
}
