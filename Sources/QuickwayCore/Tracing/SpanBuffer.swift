import Glibc

/// One worker's finished spans, already in their export form (`OTLPEncoder.span`),
/// waiting for the exporter: bounded (`capacity` spans), so a collector that is down or
/// slow costs dropped spans, never memory or a worker's time.
///
/// The worker writes each span when its request ends (`append`, under the lock: the
/// exporter may swap the chunk at any time); the exporter takes the chunk whole
/// (`take`) and hands the worker another, posts it from where it lies (the envelope goes
/// in the room left in front, `SpanChunk.headroom`), and gives it back when the post
/// is over (`giveBack`), so in the steady state no span costs an allocation. A full
/// chunk (`capacity` spans, or `maxChunkBytes`) drops the new span and counts it.
///
/// `@unchecked Sendable`: every field is read and written under `lock`.
final class SpanBuffer: @unchecked Sendable {
    let capacity: Int
    /// The most bytes of spans a chunk holds (well under a collector's usual 4 to 20 MiB
    /// request limit; a span is at most a few KiB, its client bytes cut).
    static let maxChunkBytes = 4 << 20
    /// A chunk holding this much is due for export whatever its span count.
    static let dueChunkBytes = 1 << 20
    /// Bytes left in front of every chunk's spans for the envelope.
    let headroom: Int
    private let lock = Lock()
    private var filling: SpanChunk
    /// A chunk given back, ready to be filled next.
    private var spare: SpanChunk?
    private var queued: UInt64 = 0
    private var dropped: UInt64 = 0

    init(capacity: Int, headroom: Int) {
        self.capacity = capacity
        self.headroom = headroom
        filling = SpanChunk(headroom: headroom)
    }

    /// Writes `span`'s export form (worker). False (and counted) when the chunk holds
    /// `capacity` spans already.
    @discardableResult
    func append(_ span: SpanRecord, _ facts: borrowing SpanFacts) -> Bool {
        span.events.withEvents { events, details in
            var detailBytes = 0
            for d in details { detailBytes += d.utf8.count }
            let bound = OTLPEncoder.spanBound(span, facts, events: events.count, detailBytes: detailBytes)
            lock.lock()
            defer { lock.unlock() }
            let chunk = filling
            guard chunk.spans < capacity, chunk.spanBytes + bound <= Self.maxChunkBytes else {
                dropped &+= 1
                return false
            }
            if chunk.spans == 0 { chunk.firstNanos = facts.endMonoNanos }
            var w = ProtoWriter(chunk.room(bound), capacity: bound)
            OTLPEncoder.span(span, facts, events: events, details: details, &w)
            chunk.wrote(w.at)
            queued &+= 1
            return true
        }
    }

    /// The chunk being filled, if it holds at least `atLeast` spans or its first was
    /// written before `before` (monotonic nanoseconds) (exporter). The worker goes on
    /// in the spare chunk, or a new one.
    func take(atLeast: Int, before: UInt64) -> SpanChunk? {
        lock.lock()
        defer { lock.unlock() }
        let chunk = filling
        guard chunk.spans > 0, chunk.spans >= atLeast || chunk.firstNanos < before || chunk.spanBytes >= Self.dueChunkBytes else { return nil }
        filling = spare ?? SpanChunk(headroom: headroom)
        spare = nil
        return chunk
    }

    /// A taken chunk whose post is over, emptied to be filled again (exporter).
    func giveBack(_ chunk: SpanChunk) {
        chunk.empty()
        lock.lock()
        if spare == nil { spare = chunk }
        lock.unlock()
    }

    /// Spans written and spans dropped for a full chunk, since start.
    var figures: (queued: UInt64, dropped: UInt64) {
        lock.lock()
        defer { lock.unlock() }
        return (queued, dropped)
    }
}

/// Spans in their export form, one after another, behind `headroom` bytes kept for the
/// envelope (`OTLPEncoder.Envelope`): the memory libcurl posts. Grows as spans come
/// (a chunk holds at most `SpanBuffer.capacity` spans). Used under its buffer's lock
/// while it is being filled, then by the exporter alone.
final class SpanChunk: OTLPPostBody, @unchecked Sendable {
    let headroom: Int
    private var base: UnsafeMutablePointer<UInt8>
    private var capacity: Int
    /// The end of the spans written.
    private var end: Int
    private(set) var spans = 0
    /// When the first span was written (monotonic nanoseconds).
    var firstNanos: UInt64 = 0
    /// What the envelope's lengths are worked out from: the span bytes.
    var spanBytes: Int { end - headroom }

    init(headroom: Int, capacity: Int = 64 << 10) {
        self.headroom = headroom
        self.capacity = max(capacity, headroom + 4096)
        base = .allocate(capacity: self.capacity)
        end = headroom
    }

    deinit { base.deallocate() }

    /// Room for at least `n` more bytes, growing the chunk if needed.
    @inline(__always)
    func room(_ n: Int) -> UnsafeMutablePointer<UInt8> {
        if end + n > capacity { grow(end + n) }
        return base + end
    }

    private func grow(_ needed: Int) {
        let bigger = max(capacity * 2, needed)
        let moved = UnsafeMutablePointer<UInt8>.allocate(capacity: bigger)
        moved.update(from: base, count: end)
        base.deallocate()
        base = moved
        capacity = bigger
    }

    /// `n` bytes were written at `room`: one more span.
    @inline(__always)
    func wrote(_ n: Int) {
        end += n
        spans += 1
    }

    /// Writes `envelope` in front of the spans; the bytes to post.
    func seal(_ envelope: OTLPEncoder.Envelope) -> UnsafeRawBufferPointer {
        let start = headroom - envelope.bytes.count
        precondition(start >= 0, "the chunk's headroom is smaller than the envelope")
        envelope.write(at: base + start, spanBytes: spanBytes)
        sealedStart = start
        return postBytes
    }

    private var sealedStart = 0
    var postBytes: UnsafeRawBufferPointer { UnsafeRawBufferPointer(start: base + sealedStart, count: end - sealedStart) }

    /// No spans (a chunk given back).
    func empty() {
        end = headroom
        spans = 0
        firstNanos = 0
        // A chunk a burst grew is not kept that big.
        if capacity > 1 << 20 {
            base.deallocate()
            capacity = 64 << 10
            base = .allocate(capacity: capacity)
        }
    }
}
