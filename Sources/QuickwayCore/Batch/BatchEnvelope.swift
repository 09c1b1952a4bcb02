import Foundation

/// One call of a batch envelope, checked: its id, and the request as an HTTP/1.1 head
/// and body, which the stream layer reads again with the same parser as a client's
/// request (`StreamLayer.runInternal`).
struct BatchCall {
    let index: Int
    /// The client's id for the call (nil: the index stands for it).
    let id: String?
    let head: [UInt8]
    let body: [UInt8]
}

/// Why an envelope was refused: the call (nil for the envelope itself) and the field,
/// as the 400 `bad_batch` message names them (`calls[2].path: ...`).
struct BatchEnvelopeError: Error, Equatable {
    let index: Int?
    let field: String
    let message: String

    var text: String {
        guard let index else { return "\(field): \(message)" }
        return "calls[\(index)].\(field): \(message)"
    }
}

/// Reads a batch envelope (spec/batch.md), pure: a JSON object `{"calls": [...]}`, each
/// call `{id?, method, path, headers?, body? | body_base64?}` and nothing else.
///
/// Each call becomes one HTTP/1.1 head, checked here by the parser every client request
/// goes through (`HTTPRequestParser`, its target normaliser and limits), so a call's
/// path is read exactly as a direct request's target is; what it refuses is reported
/// against the call's field instead of reaching the pipeline. The host is the
/// envelope's. Header fields the gateway owns are refused with the reasons route header
/// rules give (`HeaderRules.ownedRequestHeader`, as on a route with auth): hop-by-hop and
/// framing fields, `Host`, overrides, forwarding fields, `X-Request-Id`,
/// `X-Quickway-Key`, and the signature's (`Authorization`): every call carries the
/// envelope's verified identity, never one of its own.
enum BatchEnvelope {
    /// What the envelope's own request gives its calls, and the limits they must keep.
    struct Context {
        /// The envelope's `Host` value.
        var host: [UInt8]
        /// The envelope's `X-Forwarded-For` (joined), passed to every call so that a call
        /// from a trusted proxy's client is that client's, as the envelope is.
        var forwardedFor: String = ""
        var maxCalls: Int
        var limits: LimitsConfig
        /// The name of the batch route a parsed call would reach, if any: no call may
        /// target a batch route.
        var batchRouteOf: (HTTPRequestHead) -> String? = { _ in nil }
    }

    static let maxIdBytes = 64
    private static let callMembers: Set<String> = ["id", "method", "path", "headers", "body", "body_base64"]

    static func parse(_ body: [UInt8], _ c: Context) -> Result<[BatchCall], BatchEnvelopeError> {
        let read = body.withUnsafeBytes { raw in Result { () throws(JSONSyntaxError) -> JSONValue in try StrictJSON.parse(raw, maxDepth: 8) } }
        let doc: JSONValue
        switch read {
        case .success(let v): doc = v
        case .failure(let e):
            return .failure(BatchEnvelopeError(index: nil, field: "envelope", message: "not valid JSON at byte \(e.offset): \(e.message)"))
        }
        guard case .object(let top) = doc else {
            return .failure(BatchEnvelopeError(index: nil, field: "envelope", message: "must be a JSON object {\"calls\": [...]}, not \(doc.typeName)"))
        }
        for (k, _) in top where k != "calls" {
            return .failure(BatchEnvelopeError(index: nil, field: k, message: "unknown member (an envelope holds only \"calls\")"))
        }
        guard let callsValue = top.first(where: { $0.key == "calls" })?.value else {
            return .failure(BatchEnvelopeError(index: nil, field: "calls", message: "is required"))
        }
        guard case .array(let items) = callsValue else {
            return .failure(BatchEnvelopeError(index: nil, field: "calls", message: "must be an array, not \(callsValue.typeName)"))
        }
        guard !items.isEmpty, items.count <= c.maxCalls else {
            return .failure(BatchEnvelopeError(index: nil, field: "calls",
                                               message: "must hold 1 to \(c.maxCalls) calls (batch.max_calls), not \(items.count)"))
        }
        var calls: [BatchCall] = []
        var ids: Set<String> = []
        for (index, item) in items.enumerated() {
            switch call(index, item, c) {
            case .failure(let e): return .failure(e)
            case .success(let call):
                if let id = call.id, !ids.insert(id).inserted {
                    return .failure(BatchEnvelopeError(index: index, field: "id", message: "\"\(id)\" is the id of an earlier call (ids are unique in a batch)"))
                }
                calls.append(call)
            }
        }
        return .success(calls)
    }

    private static func call(_ index: Int, _ item: JSONValue, _ c: Context) -> Result<BatchCall, BatchEnvelopeError> {
        func refuse(_ field: String, _ message: String) -> Result<BatchCall, BatchEnvelopeError> {
            .failure(BatchEnvelopeError(index: index, field: field, message: message))
        }
        guard case .object(let members) = item else { return refuse("call", "must be an object, not \(item.typeName)") }
        var m: [String: JSONValue] = [:]
        for (k, v) in members {
            guard callMembers.contains(k) else { return refuse(k, "unknown member (a call holds id, method, path, headers, body or body_base64)") }
            m[k] = v
        }
        // id
        var id: String?
        if let v = m["id"] {
            guard case .string(let b) = v else { return refuse("id", "must be a string, not \(v.typeName)") }
            guard (1...maxIdBytes).contains(b.count) else { return refuse("id", "must be 1 to \(maxIdBytes) bytes") }
            id = String(decoding: b, as: UTF8.self)
        }
        // method: a token, as on a request line.
        guard let mv = m["method"] else { return refuse("method", "is required") }
        guard case .string(let method) = mv else { return refuse("method", "must be a string, not \(mv.typeName)") }
        guard !method.isEmpty, method.allSatisfy(HTTPSyntax.isTokenChar) else { return refuse("method", "is not an HTTP method (a token such as GET)") }
        // path: an origin-form target; no byte that would end the request line.
        guard let pv = m["path"] else { return refuse("path", "is required") }
        guard case .string(let path) = pv else { return refuse("path", "must be a string, not \(pv.typeName)") }
        guard path.first == UInt8(ascii: "/") else { return refuse("path", "must be an origin-form target starting with / (the host is the envelope's)") }
        if path.contains(where: { $0 <= 0x20 || $0 == 0x7F }) { return refuse("path", "must not hold spaces or control bytes (percent-encode them)") }
        // headers: a flat object of strings, none the gateway owns.
        var lines: [UInt8] = []
        if let hv = m["headers"] {
            guard case .object(let fields) = hv else { return refuse("headers", "must be an object of names and string values, not \(hv.typeName)") }
            for (name, value) in fields {
                let field = "headers.\(name)"
                guard HeaderRules.isName(name) else { return refuse(field, "is not a header name") }
                if let why = HeaderRules.ownedRequestHeader(name, routeHasAuth: true) {
                    return refuse(field, "may not be sent in a batch call: it \(why)")
                }
                guard case .string(let v) = value else { return refuse(field, "must be a string, not \(value.typeName)") }
                let text = String(decoding: v, as: UTF8.self)
                if let why = HeaderRules.valueProblem(text) { return refuse(field, "the value \(why)") }
                lines.append(contentsOf: name.utf8)
                lines.append(contentsOf: ": ".utf8)
                lines.append(contentsOf: v)
                lines.append(contentsOf: "\r\n".utf8)
            }
        }
        // body or body_base64, not both.
        var body: [UInt8]?
        switch (m["body"], m["body_base64"]) {
        case (.some, .some): return refuse("body_base64", "give body or body_base64, not both")
        case (.some(let v), nil):
            guard case .string(let b) = v else { return refuse("body", "must be a string (UTF-8 text; use body_base64 for bytes), not \(v.typeName)") }
            body = b
        case (nil, .some(let v)):
            guard case .string(let b) = v else { return refuse("body_base64", "must be a string, not \(v.typeName)") }
            guard let d = Data(base64Encoded: Data(b)) else { return refuse("body_base64", "is not base64 (RFC 4648, padded)") }
            body = [UInt8](d)
        case (nil, nil): break
        }
        if let body, body.count > c.limits.maxBodyBytes {
            return refuse(m["body"] != nil ? "body" : "body_base64", "is larger than \(c.limits.maxBodyBytes) bytes (limits.max_body_bytes)")
        }

        // The request line alone first, so that a refusal names the path, not the headers.
        var start: [UInt8] = method
        start.append(0x20)
        start.append(contentsOf: path)
        start.append(contentsOf: " HTTP/1.1\r\nHost: ".utf8)
        start.append(contentsOf: c.host)
        start.append(contentsOf: "\r\n".utf8)
        if case .failure(let e) = check(start + "\r\n".utf8, c.limits) { return refuse("path", e.why) }
        var head = start
        if !c.forwardedFor.isEmpty {
            head.append(contentsOf: "X-Forwarded-For: \(c.forwardedFor)\r\n".utf8)
        }
        head.append(contentsOf: lines)
        if let body { head.append(contentsOf: "Content-Length: \(body.count)\r\n".utf8) }
        head.append(contentsOf: "\r\n".utf8)
        switch check(head, c.limits) {
        case .failure(let e): return refuse("headers", e.why)
        case .success(let parsed):
            if let route = c.batchRouteOf(parsed) {
                return refuse("path", "reaches the batch route \(route): a batch call may not be a batch")
            }
        }
        return .success(BatchCall(index: index, id: id, head: head, body: body ?? []))
    }

    /// Why a call's head was refused by the parser.
    private struct HeadProblem: Error { let why: String }

    /// Reads `head` as the stream layer will (`runInternal`): the same parser, limits and
    /// normaliser, the whole of it one head.
    private static func check(_ head: [UInt8], _ limits: LimitsConfig) -> Result<HTTPRequestHead, HeadProblem> {
        var parser = HTTPRequestParser(maxHeadBytes: limits.maxHeaderBytes, maxBodyBytes: limits.maxBodyBytes,
                                       allowUnderscoresInHeaders: limits.underscoresInHeaders)
        do throws(HTTPParseError) {
            guard case let .head(h, consumed) = try parser.parseHead(whole: head), consumed == head.count else {
                return .failure(HeadProblem(why: "is not one request head"))
            }
            return .success(h)
        } catch {
            switch error {
            case .badRequest(let why): return .failure(HeadProblem(why: why))
            case .headersTooLarge: return .failure(HeadProblem(why: "the call's head is larger than \(limits.maxHeaderBytes) bytes (limits.max_header_bytes)"))
            case .bodyTooLarge: return .failure(HeadProblem(why: "the call's body is larger than \(limits.maxBodyBytes) bytes (limits.max_body_bytes)"))
            }
        }
    }
}
