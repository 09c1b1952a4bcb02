import CQuickwayShims
import Foundation
import Logging

/// Logging through swift-log: `Log.info(...)` and friends hand messages to a swift-log
/// `Logger` labelled "quickway". Unless the embedding program bootstraps its own backend,
/// lines go to standard error as `TIME LEVEL message`.
///
/// The level (`log.level`, changed by reloads) is kept in an atomic and checked before a
/// message is even built, so workers never race a reload and filtered messages cost
/// nothing.
public enum Log {
    private static let bootstrapped: Void = {
        LoggingSystem.bootstrap { label in StandardErrorLogHandler(label: label) }
    }()
    private static let logger: Logger = {
        _ = bootstrapped
        var l = Logger(label: "quickway")
        l.logLevel = .trace   // filtering is done by `level` below
        return l
    }()
    /// An allocated cell (never freed): the atomic helpers need a stable address, and
    /// `&staticVar` is formally an exclusive access, a race between threads.
    nonisolated(unsafe) private static let levelRank: UnsafeMutablePointer<Int32> = {
        let p = UnsafeMutablePointer<Int32>.allocate(capacity: 1)
        p.initialize(to: Int32(LogLevel.info.rank))
        return p
    }()

    public static var level: LogLevel {
        get { LogLevel.allCases[Int(qw_flag_load(levelRank))] }
        set { qw_flag_store(levelRank, Int32(newValue.rank)) }
    }

    @inline(__always) private static func enabled(_ l: LogLevel) -> Bool { Int32(l.rank) >= qw_flag_load(levelRank) }

    public static func debug(_ m: @autoclosure () -> String) { if enabled(.debug) { logger.debug("\(m())") } }
    public static func info(_ m: @autoclosure () -> String) { if enabled(.info) { logger.info("\(m())") } }
    public static func warn(_ m: @autoclosure () -> String) { if enabled(.warn) { logger.warning("\(m())") } }
    public static func error(_ m: @autoclosure () -> String) { if enabled(.error) { logger.error("\(m())") } }

    static func timestamp() -> String {
        var t = time(nil)
        var tmv = tm()
        gmtime_r(&t, &tmv)
        return String(format: "%04d-%02d-%02dT%02d:%02d:%02dZ", tmv.tm_year + 1900, tmv.tm_mon + 1, tmv.tm_mday,
                      tmv.tm_hour, tmv.tm_min, tmv.tm_sec)
    }
}

/// swift-log backend: one line per message on standard error, whole lines only.
struct StandardErrorLogHandler: LogHandler {
    let label: String
    var logLevel: Logger.Level = .trace
    var metadata: Logger.Metadata = [:]
    private static let lock = NSLock()

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(level: Logger.Level, message: Logger.Message, metadata: Logger.Metadata?, source: String,
             file: String, function: String, line: UInt) {
        let name: String
        switch level {
        case .trace, .debug: name = "DEBUG"
        case .info, .notice: name = "INFO"
        case .warning: name = "WARN"
        case .error, .critical: name = "ERROR"
        }
        let text = "\(Log.timestamp()) \(name) \(message)\n"
        Self.lock.lock()
        FileHandle.standardError.write(text.data(using: .utf8)!)
        Self.lock.unlock()
    }
}
