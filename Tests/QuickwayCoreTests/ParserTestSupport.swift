@testable import QuickwayCore

/// Runs the incremental parser the way a connection does: on a buffer that grows
/// from the same start. Returns the head (and bytes consumed) or the error.
enum ParseOutcome: Equatable {
    case needMore
    case head(consumed: Int)
    case error(HTTPParseError)
}

func parseOnce(_ text: String, maxHead: Int = 16384, maxBody: Int = 1 << 20) -> (ParseOutcome, HTTPRequestHead?) {
    var p = HTTPRequestParser(maxHeadBytes: maxHead, maxBodyBytes: maxBody)
    return feed(&p, Array(text.utf8))
}

func feed(_ p: inout HTTPRequestParser, _ bytes: [UInt8]) -> (ParseOutcome, HTTPRequestHead?) {
    do {
        let r = try bytes.withUnsafeBytes { raw in try p.parseHead(raw) }
        switch r {
        case .needMore: return (.needMore, nil)
        case let .head(h, consumed): return (.head(consumed: consumed), h)
        }
    } catch let e as HTTPParseError {
        return (.error(e), nil)
    } catch {
        fatalError("unexpected \(error)")
    }
}

/// Feeds `bytes` growing one byte at a time; returns the first non-needMore outcome
/// and at which length it came.
func parseByteByByte(_ text: String, maxHead: Int = 16384) -> (ParseOutcome, HTTPRequestHead?, Int) {
    var p = HTTPRequestParser(maxHeadBytes: maxHead, maxBodyBytes: 1 << 20)
    let all = Array(text.utf8)
    for k in 1...all.count {
        let (o, h) = feed(&p, Array(all[0..<k]))
        if o != .needMore { return (o, h, k) }
    }
    return (.needMore, nil, all.count)
}

func isBadRequest(_ o: ParseOutcome) -> Bool {
    if case .error(.badRequest) = o { return true }
    return false
}
