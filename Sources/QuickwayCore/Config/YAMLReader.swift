import Yams

/// Walks a Yams node tree while tracking the dotted path and line of each value, so
/// every complaint names where it is. Problems are collected, not thrown, so one pass
/// reports them all. Unknown keys are reported by `finish()`.
final class YAMLMapReader {
    let path: String
    let line: Int?
    private let entries: [(key: String, keyLine: Int?, value: Node)]
    private var used: Set<String> = []
    unowned let sink: ConfigIssueSink

    init?(_ node: Node, path: String, sink: ConfigIssueSink) {
        self.path = path
        self.sink = sink
        self.line = node.mark?.line
        guard case let .mapping(mapping) = node else {
            sink.add(path, node.mark?.line, "expected a mapping (key: value lines)")
            return nil
        }
        var seen: Set<String> = []
        var list: [(String, Int?, Node)] = []
        for (k, v) in mapping {
            let name = k.scalar?.string ?? "?"
            if !seen.insert(name).inserted {
                sink.add(child(name, base: path), k.mark?.line, "key appears twice")
            }
            list.append((name, k.mark?.line, v))
        }
        entries = list
    }

    var keys: [String] { entries.map(\.key) }

    func childPath(_ key: String) -> String { child(key, base: path) }

    /// The node under `key`, or nil when absent or null.
    func node(_ key: String) -> Node? {
        used.insert(key)
        guard let entry = entries.first(where: { $0.key == key }) else { return nil }
        if case let .scalar(s) = entry.value, s.style == .plain, ["", "~", "null", "Null", "NULL"].contains(s.string) {
            return nil
        }
        return entry.value
    }

    func lineOf(_ key: String) -> Int? { entries.first { $0.key == key }?.value.mark?.line ?? line }

    func string(_ key: String) -> String? {
        guard let n = node(key) else { return nil }
        guard case let .scalar(s) = n else {
            sink.add(childPath(key), n.mark?.line, "expected a single value, not a list or mapping")
            return nil
        }
        return s.string
    }

    func map(_ key: String) -> YAMLMapReader? {
        guard let n = node(key) else { return nil }
        return YAMLMapReader(n, path: childPath(key), sink: sink)
    }

    func list(_ key: String) -> [Node]? {
        guard let n = node(key) else { return nil }
        guard case let .sequence(seq) = n else {
            sink.add(childPath(key), n.mark?.line, "expected a list")
            return nil
        }
        return Array(seq)
    }

    func stringList(_ key: String) -> [String]? {
        guard let items = list(key) else { return nil }
        var out: [String] = []
        for (i, item) in items.enumerated() {
            guard case let .scalar(s) = item else {
                sink.add("\(childPath(key))[\(i)]", item.mark?.line, "expected a single value")
                continue
            }
            out.append(s.string)
        }
        return out
    }

    /// Reads `key` and converts it; a value that does not convert is reported with `expected`.
    func value<T>(_ key: String, _ expected: String, _ convert: (String) -> T?) -> T? {
        guard let text = string(key) else { return nil }
        guard let v = convert(text) else {
            sink.add(childPath(key), lineOf(key), "\(expected), got \"\(text)\"")
            return nil
        }
        return v
    }

    func duration(_ key: String) -> Int64? {
        value(key, "expected a duration such as 250ms, 2s, 3m, 24h or 7d", Units.parseDurationMillis)
    }
    func bytes(_ key: String) -> Int? {
        value(key, "expected a size such as 512B, 64KiB, 20MiB or 1GiB", Units.parseBytes)
    }
    func percent(_ key: String) -> Double? {
        value(key, "expected a percentage such as 20%", Units.parsePercent)
    }
    func bool(_ key: String) -> Bool? {
        value(key, "expected true or false") { ["true": true, "false": false][$0] }
    }
    func int(_ key: String, in range: ClosedRange<Int>) -> Int? {
        value(key, "expected a whole number from \(range.lowerBound) to \(range.upperBound)") {
            guard let v = Int($0), range.contains(v) else { return nil }
            return v
        }
    }
    func choice<E: RawRepresentable>(_ key: String, _ type: E.Type, _ options: [String]) -> E? where E.RawValue == String {
        value(key, "expected one of \(options.joined(separator: ", "))") { E(rawValue: $0) }
    }

    func report(_ key: String, _ message: String) { sink.add(childPath(key), lineOf(key), message) }

    /// Reports every key that no accessor asked for.
    func finish() {
        for e in entries where !used.contains(e.key) {
            sink.add(childPath(e.key), e.keyLine, "unknown key")
        }
    }
}

func child(_ key: String, base: String) -> String { base.isEmpty ? key : "\(base).\(key)" }

/// Collects the issues of one load.
final class ConfigIssueSink {
    var issues: [ConfigIssue] = []
    /// `quickway check` validates files on machines that hold no secrets (CI): there a
    /// `*_env` variable that is not set is a warning and a placeholder stands in.
    var secretsMayBeMissing = false
    var warnings: [ConfigIssue] = []
    func add(_ path: String, _ line: Int?, _ message: String) {
        issues.append(ConfigIssue(path: path, line: line, message: message))
    }

    /// Reports that environment variable `name`, named at `key` of `reader`, is not set:
    /// an error, or with `secretsMayBeMissing` a warning (true: use a placeholder).
    func missingSecret(_ reader: YAMLMapReader, _ key: String, _ name: String) -> Bool {
        let message = "the environment variable \(name) is not set (or empty)"
        guard secretsMayBeMissing else {
            reader.report(key, message)
            return false
        }
        warnings.append(ConfigIssue(path: reader.childPath(key), line: reader.lineOf(key),
                                    message: message + "; quickway serve will refuse to start without it"))
        return true
    }
}
