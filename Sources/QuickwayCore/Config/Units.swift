import Foundation

/// Parsers for the config file's units: durations (`250ms`, `2s`, `3m`, `24h`, `7d`),
/// sizes (`512B`, `64KiB`, `20MiB`, `1GiB`, `1KB` = 1000 bytes) and percentages (`20%`).
/// Each returns nil on anything else, so the loader can name the offending path.
public enum Units {
    /// Milliseconds, from a number with a unit. A bare `0` is accepted as zero.
    public static func parseDurationMillis(_ text: String) -> Int64? {
        let s = text.trimmingCharacters(in: .whitespaces)
        if s == "0" { return 0 }
        let units: [(String, Double)] = [("ms", 1), ("s", 1000), ("m", 60_000), ("h", 3_600_000), ("d", 86_400_000)]
        for (suffix, factor) in units where s.hasSuffix(suffix) {
            let number = String(s.dropLast(suffix.count))
            // "5ms" also ends in "s": only accept when the rest is a plain number.
            guard let value = parseNumber(number) else { continue }
            let millis = value * factor
            guard millis >= 0, millis < 1e15, millis == millis.rounded(.down) || factor >= 1 else { return nil }
            return Int64(millis.rounded())
        }
        return nil
    }

    /// Bytes, from a number with a unit (IEC `KiB`/`MiB`/`GiB`, SI `KB`/`MB`/`GB`, or `B`).
    public static func parseBytes(_ text: String) -> Int? {
        let s = text.trimmingCharacters(in: .whitespaces)
        if s == "0" { return 0 }
        let units: [(String, Double)] = [
            ("KiB", 1024), ("MiB", 1024 * 1024), ("GiB", 1024 * 1024 * 1024),
            ("KB", 1000), ("MB", 1_000_000), ("GB", 1_000_000_000), ("B", 1),
        ]
        for (suffix, factor) in units where s.hasSuffix(suffix) {
            guard let value = parseNumber(String(s.dropLast(suffix.count))) else { continue }
            let bytes = value * factor
            guard bytes >= 0, bytes < 1e15 else { return nil }
            return Int(bytes.rounded())
        }
        return nil
    }

    /// A fraction in 0...1 from `20%`.
    public static func parsePercent(_ text: String) -> Double? {
        let s = text.trimmingCharacters(in: .whitespaces)
        guard s.hasSuffix("%"), let value = parseNumber(String(s.dropLast())), value >= 0, value <= 100 else { return nil }
        return value / 100
    }

    /// A non-negative decimal number: digits with at most one `.`, nothing else.
    static func parseNumber(_ s: String) -> Double? {
        guard !s.isEmpty, s.first != ".", s.last != "." else { return nil }
        var dots = 0
        for c in s.utf8 {
            if c == UInt8(ascii: ".") { dots += 1; continue }
            if c < UInt8(ascii: "0") || c > UInt8(ascii: "9") { return nil }
        }
        guard dots <= 1 else { return nil }
        return Double(s)
    }

    /// Renders milliseconds back the way a user would write them (for messages).
    public static func formatMillis(_ ms: Int64) -> String {
        if ms % 1000 == 0 { return "\(ms / 1000)s" }
        return "\(ms)ms"
    }
}
