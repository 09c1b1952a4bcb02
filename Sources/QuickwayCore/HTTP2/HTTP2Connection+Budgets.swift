/// The HTTP/2 codec's budgets: streams let into the pipeline (at most `maxActive` at
/// once, the others queued in `admission` with their request complete), request body
/// bytes held, and answer bytes waiting for the client (the connection's and the
/// worker's, `HTTP2AnswerBudget`).
extension HTTP2Connection {
    func dispatch(_ s: HTTP2Stream, _ ex: Exchange) {
        s.phase = .dispatched
        s.lastProgress = Clock.coarseMillis()   // (queued since, while in `admission`)
        if activeStreams >= maxActive || answerBudget.isExceeded {
            admission.append(s)   // waits until an earlier answer has been taken
            return
        }
        activeStreams += 1
        s.active = true
        layer.dispatch(ex)
    }

    /// An active stream's answer is all with nghttp2 (or the stream is gone): the next
    /// waiting stream enters the pipeline.
    func deactivate(_ s: HTTP2Stream) {
        guard s.active else { return }
        s.active = false
        activeStreams -= 1
        if sending { admitNeeded = true } else { admit() }
    }

    /// Lets waiting streams into the pipeline while there is room (not from inside
    /// `mem_send`: a cache hit would submit its answer there).
    func admit() {
        while activeStreams < maxActive, !answerBudget.isExceeded, !admission.isEmpty {
            let next = admission.removeFirst()
            guard let ex = next.exchange, lookup(next.id) === next else { continue }
            activeStreams += 1
            next.active = true
            layer.dispatch(ex)
        }
    }

    func releaseBody(_ s: HTTP2Stream, _ ex: Exchange?) {
        requestBodyBytes -= s.bodyBytesHeld
        s.bodyBytesHeld = 0
        spooledBodyBytes -= s.bodySpooled
        s.bodySpooled = 0
        if let ex, !ex.body.isEmpty { ex.body = [] }
    }

    /// A stream took answer bytes into its `pending` buffer.
    /// Counted into the connection's and the worker's budgets, and remembered on the
    /// stream (`countedPending`), so only what was counted is ever taken off again: a
    /// tunnel's bytes are not counted, and an error answer's are.
    func pendingAdded(_ s: HTTP2Stream, _ n: Int) {
        s.countedPending += n
        pendingChanged(n)
    }

    /// Takes up to `n` counted bytes of `s` off the budgets.
    @inline(__always) func uncountPending(_ s: HTTP2Stream, _ n: Int) {
        let counted = min(n, s.countedPending)
        guard counted > 0 else { return }
        s.countedPending -= counted
        pendingChanged(-counted)
    }

    /// The one place `pendingBytes` moves, and the worker's budget with it.
    @inline(__always) func pendingChanged(_ n: Int) {
        pendingBytes += n
        answerBudget.add(n)
        assert(pendingBytes >= 0 && answerBudget.held >= 0, "answer budget accounting drifted")
    }
}
