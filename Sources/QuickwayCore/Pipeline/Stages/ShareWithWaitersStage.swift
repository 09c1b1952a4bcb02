/// Share with waiters, on the way back: the one place a flight is finished. Merged
/// waiters get the answer if it may be shared, an expired entry served stale, or the
/// error; otherwise (streamed, private, credentialed) each makes its own call.
final class ShareWithWaitersStage: AnswerStage {
    private let flights: FlightTable

    init(flights: FlightTable) { self.flights = flights }

    func applies(to ctx: ProxyContext) -> Bool { ctx.flight != nil }

    func see(_ ctx: ProxyContext, _ answer: inout ProxyAnswer) {
        guard let flight = ctx.flight else { return }
        ctx.flight = nil
        let outcome: FlightOutcome
        switch answer {
        case .upstream(let r): outcome = ctx.shareable ? .response(r) : .goUpstream
        case .sharedTier(let r, _): outcome = .response(r)
        case .stale(let r): outcome = .stale(r)
        case let .failed(code, message): outcome = .error(code, message)
        case .streamed: outcome = .goUpstream
        }
        flights.finish(flight, outcome)
    }
}
