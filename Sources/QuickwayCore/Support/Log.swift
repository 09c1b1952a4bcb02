import Foundation

/// Minimal levelled logger writing one line per message to standard error.
/// The level is set once at start-up (and on reload) before workers log.
public enum Log {
    nonisolated(unsafe) public static var level: LogLevel = .info
    private static let lock = NSLock()

    public static func debug(_ m: @autoclosure () -> String) { write(.debug, m) }
    public static func info(_ m: @autoclosure () -> String) { write(.info, m) }
    public static func warn(_ m: @autoclosure () -> String) { write(.warn, m) }
    public static func error(_ m: @autoclosure () -> String) { write(.error, m) }

    private static func write(_ l: LogLevel, _ m: () -> String) {
        guard l >= level else { return }
        let line = "\(timestamp()) \(l.rawValue.uppercased()) \(m())\n"
        lock.lock()
        FileHandle.standardError.write(line.data(using: .utf8)!)
        lock.unlock()
    }

    static func timestamp() -> String {
        var t = time(nil)
        var tmv = tm()
        gmtime_r(&t, &tmv)
        return String(format: "%04d-%02d-%02dT%02d:%02d:%02dZ", tmv.tm_year + 1900, tmv.tm_mon + 1, tmv.tm_mday,
                      tmv.tm_hour, tmv.tm_min, tmv.tm_sec)
    }
}
