import CNghttp2
import CQuickwayShims

/// The HTTP/2 codec's timers, run from the worker's sweep: idle and stalled connections,
/// streams that stop making progress, the answer budget's shedding, graceful shutdown.
extension HTTP2Connection {
    /// Hands the frame buffer's pages back once the connection has been idle a while:
    /// every frame nghttp2 queued has been taken (`mem_send` returned 0 and nothing is
    /// waiting), so nothing in the buffer is read again; the next frame is written from
    /// its start into fresh zero pages.
    private func releaseFramePagesIfIdle(_ now: Int64) {
        guard framesSinceRelease, let session, !inNghttp2, now - idleSince >= HTTP2Codec.releaseFramesAfterIdleMillis,
              nghttp2_session_want_write(session) == 0 else { return }
        qw_idle_pages_release(framePages)
        framesSinceRelease = false
    }

    func checkDeadline(_ now: Int64) {
        if transport.closed { return }
        if closing {
            if now >= closeDeadline { transport.close() }
            return
        }
        if streams.isEmpty && inbound.isEmpty && outbound.isEmpty {
            transport.releaseIdleBuffers()
            releaseFramePagesIfIdle(now)
        }
        let stalled = transport.writeStalledSince
        if stalled != 0 && now - stalled >= limits.clientIdleTimeoutMillis {
            transport.close()
            return
        }
        if !sawFirstFrame && now - idleSince >= limits.clientHeaderTimeoutMillis {
            transport.close()
            return
        }
        if shutdownNoticeAt != 0 && now - shutdownNoticeAt >= 1000 { goAway(NGHTTP2_NO_ERROR) }
        if streams.isEmpty {
            if now - idleSince >= limits.clientIdleTimeoutMillis { goAway(NGHTTP2_NO_ERROR) }
            return
        }
        // A request that stops arriving, or an answer whose window the client never
        // opens, is reset: neither may hold its memory (or an upstream call) for ever.
        // An answer the client does not take is reset after a short stall (shorter still
        // over the connection's or the worker's budget), and a tunnel whose relay has ended
        // waits a moment for the client's end of stream, then is reset too.
        // Over the connection's budget, or holding more than its fair share of an exceeded
        // worker budget: short stalls. Otherwise a stream waits on its client until the
        // connection as a whole has taken nothing for `stallMillis` (many streams sharing a
        // slow link each make little progress, and are not at fault).
        let overShare = answerBudget.isExceeded && pendingBytes > answerBudget.fairShare
        let overBudget = pendingBytes > HTTP2Codec.connectionBudget || overShare
        let connectionStalled = now - lastTaken >= HTTP2Codec.stallMillis
        var largest: HTTP2Stream?
        for s in Array(streams.values) {
            var limit: Int64
            if s.bodyStreaming, let pipe = s.bodyPipe {
                // A streamed body: timed only while the upstream waits for the client (the
                // pipe is empty). Bytes waiting in it mean the upstream is the slow one,
                // and the client's window is what holds it back.
                if pipe.buffered == 0 && now - s.lastProgress >= limits.clientBodyTimeoutMillis {
                    failStreamedBody(s, .bodyTimeout(millis: limits.clientBodyTimeoutMillis))
                } else if pipe.buffered > 0 && s.active {
                    // (A stream waiting for admission gets no such credit: nobody reads it.)
                    s.lastProgress = now
                }
                if s.pending.isEmpty { continue }
            }
            if s.phase == .headers {
                limit = limits.clientHeaderTimeoutMillis
            } else if s.phase == .body {
                limit = limits.clientBodyTimeoutMillis
            } else if !s.pending.isEmpty {
                if largest == nil || s.countedPending > largest!.countedPending { largest = s }
                limit = limits.clientIdleTimeoutMillis
                if overBudget { limit = min(limit, HTTP2Codec.stallWhenOverBudgetMillis) } else if connectionStalled { limit = min(limit, HTTP2Codec.stallMillis) }
            } else if s.endStreamSent && !s.requestEnded {
                limit = HTTP2Codec.tunnelCloseGraceMillis
            } else {
                continue
            }
            if now - s.lastProgress >= limit, let session {
                nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), s.id, NGHTTP2_CANCEL.rawValue)
            }
        }
        // The worker's budget exceeded for a while: the connections over their share shed
        // their largest answer, progress or not, until it is back under.
        if overShare, answerBudget.exceededSince != 0, now - answerBudget.exceededSince >= HTTP2Codec.stallWhenOverBudgetMillis,
           let big = largest, let session {
            nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), big.id, NGHTTP2_CANCEL.rawValue)
        }
        // Streams queued for the pipeline too long (the budget stayed exceeded): 503.
        if !admission.isEmpty {
            let waited = admission.filter { now - $0.lastProgress >= limits.clientHeaderTimeoutMillis }
            for s in waited {
                admission.removeAll { $0 === s }
                if let ex = s.exchange { layer.refuse(ex, .overloaded("too many answers waiting for HTTP/2 clients to read them; try again shortly")) }
            }
        }
        admit()
        pump()
    }

    /// Graceful shutdown in two steps (RFC 9113 6.8): a GOAWAY naming the highest stream
    /// id first, so streams the client has already sent are still taken; then, a second
    /// later (the next sweeps), the final GOAWAY naming the last stream taken.
    func drain() {
        guard transport.isReady, let session, !goingAway, !closing, shutdownNoticeAt == 0 else { return }
        if nghttp2_submit_shutdown_notice(session) != 0 { return goAway(NGHTTP2_NO_ERROR) }
        shutdownNoticeAt = Clock.coarseMillis()
        pump()
    }
}
