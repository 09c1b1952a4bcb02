import Yams

/// A route's `headers` section (spec/config.md): `request` and `response`, each
/// `{remove: [names], set: {Name: value}}`, read into `HeaderRules`.
extension ConfigLoader {
    /// Both sides of a route's `headers` (nil for a side that is absent or empty).
    /// `routeHasAuth`: the route verifies signatures, whose headers rules may then not touch.
    static func readHeaders(_ m: YAMLMapReader, routeHasAuth: Bool) -> (request: HeaderRules?, response: HeaderRules?) {
        guard let h = m.map("headers") else { return (nil, nil) }
        var request: HeaderRules?
        var response: HeaderRules?
        if let q = h.map("request") { request = readHeaderRules(q, upstream: true, routeHasAuth: routeHasAuth) }
        if let s = h.map("response") { response = readHeaderRules(s, upstream: false, routeHasAuth: routeHasAuth) }
        h.finish()
        return (request, response)
    }

    /// One side: every name a token and not a header the gateway owns on that side
    /// (`HeaderRules.ownedRequestHeader` / `ownedResponseHeader`), every value a field
    /// value, no name set twice. Nil when the side changes nothing.
    static func readHeaderRules(_ rules: YAMLMapReader, upstream: Bool, routeHasAuth: Bool) -> HeaderRules? {
        let owned = { (name: String) -> String? in
            upstream ? HeaderRules.ownedRequestHeader(name, routeHasAuth: routeHasAuth) : HeaderRules.ownedResponseHeader(name)
        }
        var remove: [String] = []
        if let items = rules.list("remove") {
            for (i, item) in items.enumerated() {
                let path = "\(rules.childPath("remove"))[\(i)]"
                guard case let .scalar(s) = item else {
                    rules.sink.add(path, item.mark?.line, "expected a header name")
                    continue
                }
                let name = s.string
                if !HeaderRules.isName(name) {
                    rules.sink.add(path, item.mark?.line, "not a header name: \"\(name)\"")
                } else if let why = owned(name) {
                    rules.sink.add(path, item.mark?.line, "\(name) cannot be removed by a rule: it \(why)")
                } else {
                    remove.append(name)
                }
            }
        }
        var set: [(name: String, value: String)] = []
        if let setMap = rules.map("set") {
            var seen: Set<[UInt8]> = []
            for name in setMap.keys {
                guard let value = setMap.string(name) else {
                    if setMap.node(name) == nil { setMap.report(name, "needs a value (write \"\" for an empty one)") }
                    continue
                }
                if !HeaderRules.isName(name) {
                    setMap.report(name, "not a header name: \"\(name)\"")
                } else if let why = owned(name) {
                    setMap.report(name, "\(name) cannot be set by a rule: it \(why)")
                } else if let why = HeaderRules.valueProblem(value) {
                    setMap.report(name, "the value \(why)")
                } else if !seen.insert(HeaderRules.comparable(Array(name.utf8))).inserted {
                    setMap.report(name, "\(name) is set twice (names compare in any case, with _ as -)")
                } else {
                    set.append((name, value))
                }
            }
            setMap.finish()
        }
        rules.finish()
        return remove.isEmpty && set.isEmpty ? nil : HeaderRules(remove: remove, set: set)
    }
}
