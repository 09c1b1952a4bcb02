/// One problem found in a config file: the dotted path of the offending key
/// (`routes[1].service`), the line it stands on, and what is wrong.
public struct ConfigIssue: Error, Sendable, Equatable, CustomStringConvertible {
    public var path: String
    public var line: Int?
    public var message: String

    public init(path: String, line: Int?, message: String) {
        self.path = path; self.line = line; self.message = message
    }

    public var description: String {
        let at = line.map { "line \($0): " } ?? ""
        return path.isEmpty ? "\(at)\(message)" : "\(at)\(path): \(message)"
    }
}

/// All problems of one file, reported together so a user fixes them in one go.
public struct ConfigError: Error, Sendable, CustomStringConvertible {
    public var file: String
    public var issues: [ConfigIssue]
    public var description: String {
        issues.map { "\(file):\($0.line.map(String.init) ?? "-"): \($0.path.isEmpty ? "" : $0.path + ": ")\($0.message)" }
            .joined(separator: "\n")
    }
}
