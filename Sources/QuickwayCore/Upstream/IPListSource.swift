import Foundation

/// Reading and keeping a service's IP list (`ip_list`): the two formats a list URL may
/// answer with, and the cache file that lets the last good list survive a restart.
public enum IPListSource {
    /// `{"ips": ["10.0.0.1", ...]}` or one IP a line (blank lines and `#` comments
    /// skipped). Nil when malformed, empty, or holding anything but IPv4/IPv6 addresses.
    public static func parse(_ body: [UInt8]) -> [String]? {
        let text = String(decoding: body, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        var ips: [String]
        if text.hasPrefix("{") {
            guard let doc = try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any],
                  let list = doc["ips"] as? [String] else { return nil }
            ips = list
        } else {
            ips = text.split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }
                .filter { !$0.isEmpty && !$0.hasPrefix("#") }
        }
        var seen = Set<String>()
        ips = ips.filter { seen.insert($0).inserted }
        guard !ips.isEmpty, ips.allSatisfy(IPAddressSyntax.isIP) else { return nil }
        return ips
    }

    /// Writes the list atomically (temporary file, then rename).
    public static func save(_ ips: [String], to path: String) throws {
        let url = URL(fileURLWithPath: path)
        try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        let doc: [String: Any] = ["ips": ips, "saved_at": ISO8601DateFormatter().string(from: Date())]
        let data = try JSONSerialization.data(withJSONObject: doc, options: [.prettyPrinted, .sortedKeys])
        let tmp = path + ".tmp"
        try data.write(to: URL(fileURLWithPath: tmp))
        guard rename(tmp, path) == 0 else { throw CocoaError(.fileWriteUnknown) }
    }

    public static func load(from path: String) -> [String]? {
        guard let data = FileManager.default.contents(atPath: path) else { return nil }
        return parse(Array(data))
    }
}
