/// Sees a response's body as it streams, between whoever produces it and the sink: the
/// extension point for transforms such as compression. Set on the exchange
/// (`Exchange.bodyFilter`) by a stage before the answer starts; the exchange then hands
/// every answer through it, whole or streamed, and the sink sees only what the filter
/// passes on.
///
/// Backpressure goes through unchanged: a filter passes on its output with `emit`, which
/// returns the sink's `BodyWrite`, and returns the last of those (a filter that holds its
/// input back returns `.accepted`). Loop thread only.
protocol ResponseBodyFilter: AnyObject {
    /// Called once, before the head is sent. The filter may change what it owns: a body
    /// of another size makes `head.length` `.unknown` (the codec then frames it, chunked
    /// or by its own DATA frames). Returns complete `Name: value\r\n` lines to add (a
    /// `Content-Encoding`), or nil.
    func willSend(_ head: inout ResponseHead) -> [UInt8]?
    /// Called once, before the head is sent, in place of `willSend` when a filter must
    /// change or drop lines, not only add (compression: `Vary` merged, the `ETag` made
    /// weak, `Content-Length` dropped). Returns the complete lines to send instead of the
    /// head's, or nil for no change. The default adds `willSend`'s lines.
    func headLines(_ head: inout ResponseHead) -> [UInt8]?
    /// A piece of the body.
    func filter(_ bytes: UnsafeRawBufferPointer, emit: (UnsafeRawBufferPointer) -> BodyWrite) -> BodyWrite
    /// The body is complete: the filter passes on what it still holds.
    func finish(emit: (UnsafeRawBufferPointer) -> BodyWrite)
}

extension ResponseBodyFilter {
    func headLines(_ head: inout ResponseHead) -> [UInt8]? {
        guard let extra = willSend(&head), !extra.isEmpty else { return nil }
        var lines = head.headerLines.map { Array($0) } ?? []
        lines.append(contentsOf: extra)
        return lines
    }
}
