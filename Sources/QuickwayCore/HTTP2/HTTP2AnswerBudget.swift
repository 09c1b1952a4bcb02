/// What one worker's HTTP/2 connections together hold of answers their clients have not
/// taken yet (bytes waiting in streams' `pending` buffers for a flow-control window).
///
/// Each connection is held to `HTTP2Codec.connectionBudget`, but a hundred clients that
/// open a window of zero and ask for large answers would each fill theirs: this budget is
/// shared by every connection of the worker. Past it, no further stream is let into the
/// pipeline (streams wait in their connection's admission queue, holding only their
/// request, and get 503 if the wait outlasts `limits.client_header_timeout`), and the
/// connections holding more than their fair share (`fairShare`) shed: their streams that
/// make no progress are reset after a short stall, and once the budget has been exceeded
/// for that long, their largest stream is reset whatever its progress, so a client that
/// opens its window a trickle at a time cannot keep everyone else waiting (Envoy's
/// overload manager resets the largest streams the same way). Owned by the worker; loop
/// thread only.
final class HTTP2AnswerBudget {
    /// Bytes held now, over every HTTP/2 connection of the worker.
    private(set) var held = 0
    let limit: Int
    /// Open HTTP/2 connections of the worker.
    private(set) var connections = 0
    /// Coarse milliseconds since `held` went over `limit` (0: not over).
    private(set) var exceededSince: Int64 = 0

    /// Where `held` is published (`/stats` `protocols.h2.answer_bytes_held`), if anywhere.
    private let stats: WorkerStats?

    init(limit: Int = HTTP2Codec.workerBudget, stats: WorkerStats? = nil) {
        self.limit = limit
        self.stats = stats
    }

    var isExceeded: Bool { held > limit }

    /// An equal part of the budget per open connection.
    var fairShare: Int { limit / max(1, connections) }

    func add(_ n: Int) {
        held += n
        stats?.add(.http2AnswerBytesHeld, n)
        if held > limit {
            if exceededSince == 0 { exceededSince = Clock.coarseMillis() }
        } else {
            exceededSince = 0
        }
    }

    func connectionOpened() { connections += 1 }
    func connectionClosed() { connections -= 1 }
}
