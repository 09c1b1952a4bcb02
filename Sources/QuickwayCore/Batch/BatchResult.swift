import Foundation

/// One call's result as the batch answer holds it (spec/batch.md), written as JSON bytes:
/// `{"id":...,"index":n,"status":s,"headers":{...},"body":...}`. Pure.
///
/// - `id`: the call's own, or its index (a number) when it gave none; `index` always.
/// - `headers`: the answer's fields with lower-case names, the gateway's own included
///   (`x-request-id`, `x-cache`, `age`); a name that repeats has its values joined with
///   `, ` (RFC 9110 5.3), except `set-cookie`, which cannot be joined (RFC 6265 3) and
///   is then a list of strings.
/// - `body`: the answer's JSON itself when its type is `application/json` or `+json` and
///   it is one JSON value (passed on as its bytes, not re-encoded, line breaks between
///   tokens made spaces so that a result is one line); a string when it is
///   other UTF-8 text; otherwise `body_base64`.
enum BatchResult {
    static func json(index: Int, id: String?, _ r: InternalResponse) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(r.body.count + r.headerLines.count + 128)
        out.append(contentsOf: "{\"id\":".utf8)
        if let id { JSONWriter.appendString(id, to: &out) } else { out.append(contentsOf: String(index).utf8) }
        out.append(contentsOf: ",\"index\":\(index),\"status\":\(r.status),\"headers\":{".utf8)
        let fields = headerFields(r)
        for (k, (name, values)) in fields.enumerated() {
            if k > 0 { out.append(UInt8(ascii: ",")) }
            JSONWriter.appendString(name, to: &out)
            out.append(UInt8(ascii: ":"))
            if values.count > 1 && name == "set-cookie" {
                out.append(UInt8(ascii: "["))
                for (j, v) in values.enumerated() {
                    if j > 0 { out.append(UInt8(ascii: ",")) }
                    v.withUnsafeBytes { JSONWriter.appendLatin1OrUTF8($0, to: &out) }
                }
                out.append(UInt8(ascii: "]"))
            } else {
                let joined = Array(values.joined(separator: Array(", ".utf8)))
                joined.withUnsafeBytes { JSONWriter.appendLatin1OrUTF8($0, to: &out) }
            }
        }
        out.append(UInt8(ascii: "}"))
        r.body.withUnsafeBytes { body in
            let type = mediaType(fields.first { $0.name == "content-type" }?.values.first)
            if isJSONType(type), StrictJSON.validate(body) {
                out.append(contentsOf: ",\"body\":".utf8)
                // A CR or LF in valid JSON is whitespace between tokens (never inside a
                // string, where it must be escaped): made a space, so an ndjson result
                // stays one line.
                for b in body { out.append(b == 0x0A || b == 0x0D ? 0x20 : b) }
            } else if UTF8Validator.isValid(body) {
                out.append(contentsOf: ",\"body\":".utf8)
                JSONWriter.appendString(body, to: &out)
            } else {
                out.append(contentsOf: ",\"body_base64\":\"".utf8)
                out.append(contentsOf: Data(body).base64EncodedString().utf8)
                out.append(UInt8(ascii: "\""))
            }
        }
        out.append(UInt8(ascii: "}"))
        return out
    }

    /// A result the gateway makes for a call that has no answer of its own (it ran past
    /// the batch timeout, or its answer did not fit): the JSON error body a direct call
    /// would get (`LocalReply`), with the call's request id.
    static func error(index: Int, id: String?, _ code: GatewayErrorCode, _ message: String, requestId: RequestId) -> [UInt8] {
        let reply = LocalReply(code, message, requestId: requestId)
        var r = InternalResponse()
        r.status = reply.status
        r.headerLines = reply.headerLines
        r.body = reply.body
        r.requestId = requestId.string
        return json(index: index, id: id, r)
    }

    /// The answer's fields by lower-case name, in first-seen order, then the gateway's own.
    static func headerFields(_ r: InternalResponse) -> [(name: String, values: [[UInt8]])] {
        var fields: [(name: String, values: [[UInt8]])] = []
        func add(_ name: String, _ value: [UInt8]) {
            if let i = fields.firstIndex(where: { $0.name == name }) { fields[i].values.append(value) } else { fields.append((name, [value])) }
        }
        r.headerLines.withUnsafeBytes { lines in
            HeaderRules.forEachLine(lines) { line, name in
                guard !name.isEmpty else { return }
                var v = name.upperBound + 1
                var end = line.upperBound
                while end > v && (lines[end - 1] == 0x0A || lines[end - 1] == 0x0D || lines[end - 1] == 0x20 || lines[end - 1] == 0x09) { end -= 1 }
                while v < end && (lines[v] == 0x20 || lines[v] == 0x09) { v += 1 }
                add(String(decoding: lines[name].map(HTTPSyntax.lower), as: UTF8.self), Array(lines[v..<end]))
            }
        }
        if !r.requestId.isEmpty { add("x-request-id", Array(r.requestId.utf8)) }
        if let c = r.cacheStatus { add("x-cache", Array(c.utf8)) }
        if let a = r.age { add("age", Array(String(a).utf8)) }
        return fields
    }

    /// `type/subtype` of a `Content-Type` value, lower case, without parameters.
    static func mediaType(_ value: [UInt8]?) -> String {
        guard let value else { return "" }
        let bare = value.prefix { $0 != UInt8(ascii: ";") }
        return String(decoding: bare.map(HTTPSyntax.lower), as: UTF8.self).trimmingCharacters(in: .whitespaces)
    }

    /// `application/json`, or any `type/x+json` (RFC 6839).
    static func isJSONType(_ type: String) -> Bool {
        type == "application/json" || (type.contains("/") && type.hasSuffix("+json"))
    }
}
