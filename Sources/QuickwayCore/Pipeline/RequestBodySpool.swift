import CQuickwayShims
import Glibc

/// A buffered request body past `limits.client_body_buffer_size`, kept in a temporary
/// file with no name (`qw_open_tmpfile`: `O_TMPFILE`), as nginx keeps client bodies in
/// `client_body_temp_path`. The kernel frees the file when its descriptor closes (this
/// object's `deinit`), so no way out of a request (an answer, an error, a client that
/// leaves, a crash) leaves a file behind.
///
/// Written by the stream layer while the body arrives (plain blocking writes, as nginx
/// does without aio: a page-cache copy), read back by the upstream client as a
/// `RequestBodySource` with `pread`, so a retry reads it again from the start.
/// Loop thread only.
final class RequestBodySpool: RequestBodySource {
    private let fd: Int32
    /// Bytes written so far (the whole body once `finish`ed).
    private(set) var written = 0
    private var readOffset = 0

    private init(fd: Int32) { self.fd = fd }
    deinit { _ = Glibc.close(fd) }

    /// A new empty spool in `dir`, or why not (the error's text).
    static func create(in dir: String) -> Result<RequestBodySpool, SpoolError> {
        let fd = qw_open_tmpfile(dir)
        guard fd >= 0 else { return .failure(SpoolError(errno: -fd)) }
        return .success(RequestBodySpool(fd: fd))
    }

    /// Why `dir` cannot hold spooled bodies (checked when the config is read), or nil.
    static func cannotCreate(in dir: String) -> String? {
        switch create(in: dir) {
        case .success: return nil
        case .failure(let e): return e.description
        }
    }

    /// Appends `bytes` at the end; false if the file system refused (full, quota).
    func append(_ bytes: UnsafeRawBufferPointer) -> Bool {
        var at = 0
        while at < bytes.count {
            let n = Glibc.write(fd, bytes.baseAddress! + at, bytes.count - at)
            if n < 0 {
                if errno == EINTR { continue }
                return false
            }
            at += n
        }
        written += bytes.count
        return true
    }

    // MARK: RequestBodySource

    var length: Int? { written }

    func read(into buffer: UnsafeMutableRawBufferPointer) -> BodyRead {
        let want = min(buffer.count, written - readOffset)
        guard want > 0 else { return .end }
        while true {
            let n = pread(fd, buffer.baseAddress!, want, off_t(readOffset))
            if n > 0 {
                readOffset += n
                return .bytes(n)
            }
            if n < 0 && errno == EINTR { continue }
            let why = n < 0 ? String(cString: strerror(errno)) : "the file is shorter than what was written"
            return .failed(.overloaded, "the request body's temporary file could not be read: \(why)")
        }
    }

    func whenReadable(_ resume: @escaping () -> Void) { resume() }   // never waits

    func rewind() -> Bool {
        readOffset = 0
        return true
    }
}

/// Why a spool file could not be made.
struct SpoolError: Error, CustomStringConvertible {
    let errno: Int32
    var description: String { String(cString: strerror(errno)) }
}
