/// What one worker's HTTP/2 connections together hold of answers their clients have not
/// taken yet (bytes waiting in streams' `pending` buffers for a flow-control window).
///
/// Each connection is held to `HTTP2Codec.connectionBudget`, but a hundred clients that
/// open a window of zero and ask for large answers would each fill theirs: this budget is
/// shared by every connection of the worker. Past it, no further stream is let into the
/// pipeline (streams wait in their connection's admission queue, holding only their
/// request), and streams that make no progress are reset after the short stall
/// (`HTTP2Codec.stallWhenOverBudgetMillis`). Owned by the worker; loop thread only.
final class HTTP2AnswerBudget {
    /// Bytes held now, over every HTTP/2 connection of the worker.
    private(set) var held = 0
    let limit: Int

    init(limit: Int = HTTP2Codec.workerBudget) { self.limit = limit }

    var isExceeded: Bool { held > limit }

    func add(_ n: Int) { held += n }
}
