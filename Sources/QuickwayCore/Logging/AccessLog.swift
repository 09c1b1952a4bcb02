import Foundation
import Glibc

/// The access log: one JSON line per request, written off the request path.
///
/// Each worker formats its lines as bytes into its own `AccessLogBuffer` (no lock, no
/// String). A full buffer (64 KiB), or the worker's once-a-second sweep, hands the bytes
/// to this writer's queue; one writer thread does the `write`s, so no worker ever waits
/// on a disk. `reopen()` (SIGUSR1) makes the writer close and reopen the file between two
/// batches, for log rotation: every line lands whole in the old file or the new one.
/// `@unchecked Sendable`: the queue and flags are touched only under `cond`; the file
/// descriptor only by the writer thread.
public final class AccessLog: @unchecked Sendable {
    public enum Target: Equatable { case stdout, file(String) }


    private let target: Target
    private let cond = NSCondition()
    private var queue: [[UInt8]] = []
    private var reopenRequested = false
    private var stopping = false
    private var fd: Int32 = -1
    private var thread: Thread?
    private let finished = DispatchSemaphore(value: 0)

    public init(target: Target) throws {
        self.target = target
        fd = try Self.open(target)
        let t = Thread { [unowned self] in self.writerLoop() }
        t.name = "quickway-access-log"
        thread = t
        t.start()
    }

    static func open(_ target: Target) throws -> Int32 {
        switch target {
        case .stdout: return STDOUT_FILENO
        case .file(let path):
            // Registered: workers close their copies (`DescriptorTables`), so this writer's
            // is the only one and a rotated file is freed when it reopens.
            let fd = DescriptorTables.register { Glibc.open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o644) }
            guard fd >= 0 else { throw ConfigIssue(path: "log.access_log", line: nil, message: "cannot open \(path): \(String(cString: strerror(errno)))") }
            return fd
        }
    }

    /// Queues a batch of complete lines (any thread).
    func submit(_ bytes: [UInt8]) {
        guard !bytes.isEmpty else { return }
        cond.lock()
        queue.append(bytes)
        cond.signal()
        cond.unlock()
    }

    /// Reopens the file before the next batch (log rotation; SIGUSR1).
    public func reopen() {
        cond.lock()
        reopenRequested = true
        cond.signal()
        cond.unlock()
    }

    /// Writes what is queued and stops the writer.
    public func close() {
        cond.lock()
        stopping = true
        cond.signal()
        cond.unlock()
        finished.wait()
    }

    private func writerLoop() {
        while true {
            cond.lock()
            while queue.isEmpty && !reopenRequested && !stopping { cond.wait() }
            let batch = queue
            queue.removeAll()
            let reopenNow = reopenRequested
            reopenRequested = false
            let stop = stopping
            cond.unlock()
            for b in batch { writeAll(b) }
            if reopenNow, case .file = target {
                if let newFD = try? Self.open(target) {
                    DescriptorTables.close(fd)
                    fd = newFD
                    Log.info("access log reopened")
                } else {
                    Log.error("access log: cannot reopen; still writing to the old file")
                }
            }
            if stop {
                if case .file = target { DescriptorTables.close(fd) }
                finished.signal()
                return
            }
        }
    }

    private func writeAll(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { raw in
            var off = 0
            while off < raw.count {
                let n = write(fd, raw.baseAddress! + off, raw.count - off)
                if n > 0 { off += n } else if n < 0 && errno == EINTR { continue } else { return }
            }
        }
    }
}

/// One worker's pending access-log lines. Loop thread only.
final class AccessLogBuffer {
    static let flushBytes = 64 * 1024
    let log: AccessLog
    private let buffer = ByteBuffer(capacity: 80 * 1024)
    private var lastFlush = Clock.coarseMillis()

    /// `YYYY-MM-DDTHH:MM:SS` of `cachedSecond`, reused for every line in that second.
    private var cachedSecond = -1
    private var cachedTime: [UInt8] = []

    init(log: AccessLog) { self.log = log }

    /// Appends one line; hands the buffer over when it is full.
    func record(_ entry: AccessLogEntry) {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        if ts.tv_sec != cachedSecond {
            cachedSecond = ts.tv_sec
            cachedTime = AccessLogEntry.formatSecond(ts.tv_sec)
        }
        entry.write(into: buffer, second: cachedTime, millis: ts.tv_nsec / 1_000_000)
        if buffer.readableBytes >= Self.flushBytes { flush() }
    }

    /// Hands over what is buffered (also called by the worker's sweep, at most every second).
    func flush(ifOlderThanMillis age: Int64 = 0) {
        let now = Clock.coarseMillis()
        guard !buffer.isEmpty, now - lastFlush >= age else { return }
        log.submit(Array(buffer.readable))
        buffer.clear()
        lastFlush = now
    }
}

/// The fields of one access-log line.
struct AccessLogEntry {
    var exchange: Exchange?
    var status: Int
    var durationMicros: Int64

    /// `{"time":"...","request_id":"...","client":"...","method":"GET","path":"/x","route":"r",
    /// "status":200,"bytes":123,"duration_ms":1.234,"upstream":"10.0.0.1","cache":"MISS","key":"app"}`
    func write(into out: ByteBuffer, second: [UInt8], millis: Int) {
        out.append("{\"time\":\"")
        out.append(second)
        out.append(byte: 0x2E)
        if millis < 100 { out.append(byte: 0x30) }
        if millis < 10 { out.append(byte: 0x30) }
        out.appendDecimal(millis)
        out.append("Z\",\"request_id\":")
        if let ex = exchange {
            ex.requestId.withBytes { Self.appendJSONString($0, out) }
            // With tracing on, the trace id beside the request id (`TraceLogField`).
            if ex.trace.isOn { TraceLogField.write(ex.trace, into: out) }
            out.append(",\"client\":")
            var client = ex.clientAddress   // an IPv4 address is inline: no heap copy
            client.withUTF8 { Self.appendJSONString(UnsafeRawBufferPointer($0), out) }
            out.append(",\"method\":")
            ex.head.withBytes { raw in
                Self.appendJSONString(UnsafeRawBufferPointer(rebasing: raw[ex.head.method]), out)
                out.append(",\"path\":")
                Self.appendJSONString(UnsafeRawBufferPointer(rebasing: raw[ex.head.path]), out)
            }
        } else {
            out.append("null,\"client\":null,\"method\":null,\"path\":null")
        }
        out.append(",\"route\":")
        if let r = exchange?.routeName { r.withUnsafeBytes { Self.appendJSONString($0, out) } } else { out.append("null") }
        out.append(",\"status\":")
        out.appendDecimal(status)
        out.append(",\"bytes\":")
        out.appendDecimal(exchange?.bytesSent ?? 0)
        out.append(",\"duration_ms\":")
        out.appendDecimal(Int(durationMicros / 1000))
        out.append(byte: UInt8(ascii: "."))
        let frac = Int(durationMicros % 1000)
        if frac < 100 { out.append(byte: 0x30) }
        if frac < 10 { out.append(byte: 0x30) }
        out.appendDecimal(frac)
        out.append(",\"upstream\":")
        if var u = exchange?.upstreamAddress { u.withUTF8 { Self.appendJSONString(UnsafeRawBufferPointer($0), out) } } else { out.append("null") }
        out.append(",\"cache\":")
        if let c = exchange?.cacheStatus { out.append("\""); out.append(c); out.append("\"") } else { out.append("null") }
        out.append(",\"key\":")
        if var k = exchange?.authKeyId { k.withUTF8 { Self.appendJSONString(UnsafeRawBufferPointer($0), out) } } else { out.append("null") }
        // A batch call's line names its envelope's request (only on those lines).
        if let parent = exchange?.batchOrigin?.parentRequestId {
            out.append(",\"parent\":")
            parent.withBytes { Self.appendJSONString($0, out) }
        }
        out.append("}\n")
    }

    static let hex: [UInt8] = Array("0123456789abcdef".utf8)

    /// A JSON string of raw bytes; the common case (nothing to escape) is one copy.
    static func appendJSONString(_ bytes: UnsafeRawBufferPointer, _ out: ByteBuffer) {
        out.append(byte: UInt8(ascii: "\""))
        if !bytes.contains(where: { $0 < 0x20 || $0 >= 0x7F || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }) {
            out.append(bytes)
            out.append(byte: UInt8(ascii: "\""))
            return
        }
        for b in bytes {
            switch b {
            case UInt8(ascii: "\""): out.append("\\\"")
            case UInt8(ascii: "\\"): out.append("\\\\")
            case 0..<0x20, 0x7F:
                out.append("\\u00")
                out.append(byte: hex[Int(b >> 4)])
                out.append(byte: hex[Int(b & 15)])
            case 0x80...:
                // Not necessarily UTF-8 on the wire: escape as a Latin-1 code point.
                out.append("\\u00")
                out.append(byte: hex[Int(b >> 4)])
                out.append(byte: hex[Int(b & 15)])
            default: out.append(byte: b)
            }
        }
        out.append(byte: UInt8(ascii: "\""))
    }

    /// `YYYY-MM-DDTHH:MM:SS` (UTC) of a Unix second.
    static func formatSecond(_ secs: Int) -> [UInt8] {
        var t = tm()
        var s = secs
        gmtime_r(&s, &t)
        let buf = ByteBuffer(capacity: 32)
        func two(_ v: Int32) { if v < 10 { buf.append(byte: 0x30) }; buf.appendDecimal(Int(v)) }
        buf.appendDecimal(Int(t.tm_year + 1900)); buf.append(byte: 0x2D); two(t.tm_mon + 1); buf.append(byte: 0x2D); two(t.tm_mday)
        buf.append(byte: UInt8(ascii: "T")); two(t.tm_hour); buf.append(byte: 0x3A); two(t.tm_min); buf.append(byte: 0x3A); two(t.tm_sec)
        return Array(buf.readable)
    }
}
