/// The mutable state of one HTTP/2 connection, kept in a `UncheckedState` box so the codec
/// reads and writes it in place (its accessors are on `HTTP2Connection`, one per field).
/// Loop thread only; no access spans a call that could reach it again (the stream table
/// is changed by subscript, never while it is iterated).
struct HTTP2ConnectionState {
    /// Frames went through the frame buffer since its pages were last handed back.
    var framesSinceRelease: Bool = true
    var streams: [Int32: HTTP2Stream] = [:]
    /// The stream found last (`lookup`): a request's callbacks and its response's data
    /// reads come one after another for one stream. Cleared when it leaves `streams`.
    var lastStream: HTTP2Stream? = nil
    /// Inside `mem_recv` or `mem_send`: sends are deferred and nothing is freed.
    var inNghttp2: Bool = false
    var pumping: Bool = false
    var pumpNeeded: Bool = false
    /// Reading stopped because the outbound is full; resumes on drain.
    var readPaused: Bool = false
    /// Streams whose paused producers can go on (their `pending` drained).
    var writable: [HTTP2Stream] = []
    /// GOAWAY sent (drain or a protocol error): closes once no stream is open.
    var goingAway: Bool = false
    /// Closing after what is written (lingering close).
    var closing: Bool = false
    var closeDeadline: Int64 = 0
    /// When the last stream closed (idle timeout), or the connection began (preface).
    var idleSince: Int64
    var sawFirstFrame: Bool = false
    /// A GOAWAY with an error code went out (counted once as a protocol error).
    var errorGoawaySent: Bool = false
    /// Answer bytes waiting in the streams' `pending` buffers (all streams); kept in step
    /// with the worker's `answerBudget` (`pendingChanged`).
    var pendingBytes: Int = 0
    /// Header blocks that went over `max_header_list_bytes` on this connection.
    var oversizeHeaderBlocks: Int = 0
    /// The session was ended mid-block for a header list far over the limit.
    var amplificationCut: Bool = false
    /// Decoded bytes of the header block being received (any stream, request or trailers):
    /// blocks are never interleaved (RFC 9113 6.10), and a block past twice the limit
    /// ends the connection whatever its stream's state.
    var blockBytes: Int = 0
    /// Coarse milliseconds when the client last took answer bytes on any stream.
    var lastTaken: Int64
    /// Counted in the worker's budget's connections (once; undone at close).
    var inBudget: Bool = true
    /// Request body bytes held by streams not yet answered.
    var requestBodyBytes: Int = 0
    /// Request body bytes the connection's streams keep in spool files.
    var spooledBodyBytes: Int = 0
    /// Streams in the pipeline whose answers are not all taken by nghttp2 yet; at most
    /// `maxActive`, the others wait in `admission` (FIFO) with their request complete.
    var activeStreams: Int = 0
    var admission: [HTTP2Stream] = []
    /// Streams whose answer is complete on the wire (a HEAD, a 204) while their exchange
    /// still runs (the upstream body is read for the cache): kept so a close cancels them.
    var detached: [Int32: HTTP2Stream] = [:]
    /// Client resets allowed (rapid reset).
    var resets: HTTP2ResetLimiter = HTTP2ResetLimiter()
    /// The client reset streams faster than allowed: nothing more is dispatched and the
    /// session ends (GOAWAY ENHANCE_YOUR_CALM).
    var terminating: Bool = false
    /// When drain sent the shutdown notice (0: not sent); the final GOAWAY follows.
    var shutdownNoticeAt: Int64 = 0
    /// Inside `mem_send` (its data callback may finish a stream).
    var sending: Bool = false
    var admitNeeded: Bool = false

    init(now: Int64) {
        idleSince = now
        lastTaken = now
    }
}

/// The state's fields as the connection's own: each a direct access to the box.
extension HTTP2Connection {
    var framesSinceRelease: Bool { @inline(__always) get { state.value.framesSinceRelease } @inline(__always) _modify { yield &state.value.framesSinceRelease } }
    var streams: [Int32: HTTP2Stream] { @inline(__always) get { state.value.streams } @inline(__always) _modify { yield &state.value.streams } }
    var lastStream: HTTP2Stream? { @inline(__always) get { state.value.lastStream } @inline(__always) _modify { yield &state.value.lastStream } }
    var inNghttp2: Bool { @inline(__always) get { state.value.inNghttp2 } @inline(__always) _modify { yield &state.value.inNghttp2 } }
    var pumping: Bool { @inline(__always) get { state.value.pumping } @inline(__always) _modify { yield &state.value.pumping } }
    var pumpNeeded: Bool { @inline(__always) get { state.value.pumpNeeded } @inline(__always) _modify { yield &state.value.pumpNeeded } }
    var readPaused: Bool { @inline(__always) get { state.value.readPaused } @inline(__always) _modify { yield &state.value.readPaused } }
    var writable: [HTTP2Stream] { @inline(__always) get { state.value.writable } @inline(__always) _modify { yield &state.value.writable } }
    var goingAway: Bool { @inline(__always) get { state.value.goingAway } @inline(__always) _modify { yield &state.value.goingAway } }
    var closing: Bool { @inline(__always) get { state.value.closing } @inline(__always) _modify { yield &state.value.closing } }
    var closeDeadline: Int64 { @inline(__always) get { state.value.closeDeadline } @inline(__always) _modify { yield &state.value.closeDeadline } }
    var idleSince: Int64 { @inline(__always) get { state.value.idleSince } @inline(__always) _modify { yield &state.value.idleSince } }
    var sawFirstFrame: Bool { @inline(__always) get { state.value.sawFirstFrame } @inline(__always) _modify { yield &state.value.sawFirstFrame } }
    var errorGoawaySent: Bool { @inline(__always) get { state.value.errorGoawaySent } @inline(__always) _modify { yield &state.value.errorGoawaySent } }
    var pendingBytes: Int { @inline(__always) get { state.value.pendingBytes } @inline(__always) _modify { yield &state.value.pendingBytes } }
    var oversizeHeaderBlocks: Int { @inline(__always) get { state.value.oversizeHeaderBlocks } @inline(__always) _modify { yield &state.value.oversizeHeaderBlocks } }
    var amplificationCut: Bool { @inline(__always) get { state.value.amplificationCut } @inline(__always) _modify { yield &state.value.amplificationCut } }
    var blockBytes: Int { @inline(__always) get { state.value.blockBytes } @inline(__always) _modify { yield &state.value.blockBytes } }
    var lastTaken: Int64 { @inline(__always) get { state.value.lastTaken } @inline(__always) _modify { yield &state.value.lastTaken } }
    var inBudget: Bool { @inline(__always) get { state.value.inBudget } @inline(__always) _modify { yield &state.value.inBudget } }
    var requestBodyBytes: Int { @inline(__always) get { state.value.requestBodyBytes } @inline(__always) _modify { yield &state.value.requestBodyBytes } }
    var spooledBodyBytes: Int { get { state.value.spooledBodyBytes } set { state.value.spooledBodyBytes = newValue } }
    var activeStreams: Int { @inline(__always) get { state.value.activeStreams } @inline(__always) _modify { yield &state.value.activeStreams } }
    var admission: [HTTP2Stream] { @inline(__always) get { state.value.admission } @inline(__always) _modify { yield &state.value.admission } }
    var detached: [Int32: HTTP2Stream] { @inline(__always) get { state.value.detached } @inline(__always) _modify { yield &state.value.detached } }
    var resets: HTTP2ResetLimiter { @inline(__always) get { state.value.resets } @inline(__always) _modify { yield &state.value.resets } }
    var terminating: Bool { @inline(__always) get { state.value.terminating } @inline(__always) _modify { yield &state.value.terminating } }
    var shutdownNoticeAt: Int64 { @inline(__always) get { state.value.shutdownNoticeAt } @inline(__always) _modify { yield &state.value.shutdownNoticeAt } }
    var sending: Bool { @inline(__always) get { state.value.sending } @inline(__always) _modify { yield &state.value.sending } }
    var admitNeeded: Bool { @inline(__always) get { state.value.admitNeeded } @inline(__always) _modify { yield &state.value.admitNeeded } }
}
