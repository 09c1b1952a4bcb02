import CQuickwayShims

/// Counts what a `permessage-deflate` message (RFC 7692) inflates to, so that
/// `websocket.max_message_bytes` holds on the decompressed size: a small compressed
/// frame must not reach the backend as gigabytes. The relayed bytes stay as they were
/// sent; zlib inflates them into a scratch buffer that is dropped, and stops as soon as
/// the count passes the limit (a bomb costs at most the limit's worth of work).
///
/// One per relayed direction, made at the first compressed message. It keeps zlib's
/// window across messages (context takeover, RFC 7692's default); a sender that starts
/// afresh each message needs nothing of it. Owns its zlib state (freed in `deinit`).
final class MessageInflater: @unchecked Sendable {
    private let state: OpaquePointer
    /// What the current message inflated to so far.
    private(set) var produced: UInt64 = 0

    init?() {
        guard let s = qw_inflater_new() else { return nil }
        state = s
    }

    deinit { qw_inflater_free(state) }

    /// Feeds a message's compressed (unmasked) bytes; false when they are not DEFLATE.
    func feed(_ bytes: UnsafeRawBufferPointer, limit: UInt64) -> Bool {
        guard bytes.count > 0 else { return true }
        return qw_inflater_feed(state, bytes.baseAddress!.assumingMemoryBound(to: UInt8.self), bytes.count, &produced, limit) == 0
    }

    /// The message's end: the 4 bytes the sender removed (RFC 7692 7.2.2) are fed.
    func endMessage(limit: UInt64) -> Bool {
        let tail: [UInt8] = [0x00, 0x00, 0xFF, 0xFF]
        return tail.withUnsafeBytes { feed($0, limit: limit) }
    }

    /// The count starts again for the next message.
    func nextMessage() { produced = 0 }
}
