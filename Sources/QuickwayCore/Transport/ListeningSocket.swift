import Glibc
import CLibevent

/// A non-blocking listening TCP socket. Every proxy worker opens its own on the shared
/// port with `SO_REUSEPORT`, so the kernel spreads new connections across workers; a
/// listener only one loop serves (admin, demo backends) binds without it.
///
/// `SO_REUSEPORT` would also let a second process bind a port this one holds (and split
/// its traffic), so before the workers open theirs the gateway checks the port is free
/// (`ensureFree`), as nginx and HAProxy refuse a busy port.
enum ListeningSocket {
    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    /// Registered with `DescriptorTables`: the worker that owns it keeps the only copy.
    /// `shared`: other sockets of this process bind the same port (`SO_REUSEPORT`).
    static func open(_ address: ListenAddress, shared: Bool, backlog: Int32 = 1024) throws -> Int32 {
        try DescriptorTables.register {
            let fd = try bound(address, reusePort: shared)
            guard listen(fd, backlog) == 0 else {
                let msg = String(cString: strerror(errno))
                close(fd)
                throw Failure(description: "listen() on \(address): \(msg)")
            }
            return fd
        }
    }

    /// Throws, naming the address, when any socket (of this process or another) listens
    /// on it: a socket bound without `SO_REUSEPORT` cannot share the port with a listener.
    /// Port 0 (any free port) is always free.
    static func ensureFree(_ address: ListenAddress) throws {
        guard address.port != 0 else { return }
        close(try bound(address, reusePort: false))
    }

    /// A non-blocking socket bound to `address` (not yet listening).
    private static func bound(_ address: ListenAddress, reusePort: Bool) throws -> Int32 {
        let family = address.isIPv6 ? AF_INET6 : AF_INET
        let fd = socket(family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw Failure(description: "socket(): \(String(cString: strerror(errno)))") }
        var one: Int32 = 1
        // SO_REUSEADDR lets a restart bind over connections in TIME_WAIT; on Linux it never
        // lets two sockets listen on one address (SO_REUSEPORT does, hence `ensureFree`).
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        if reusePort { setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, socklen_t(MemoryLayout<Int32>.size)) }
        let rc: Int32
        if address.isIPv6 {
            var sa = sockaddr_in6()
            sa.sin6_family = sa_family_t(AF_INET6)
            sa.sin6_port = address.port.bigEndian
            inet_pton(AF_INET6, address.host, &sa.sin6_addr)
            rc = withUnsafePointer(to: &sa) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in6>.size)) } }
        } else {
            var sa = sockaddr_in()
            sa.sin_family = sa_family_t(AF_INET)
            sa.sin_port = address.port.bigEndian
            inet_pton(AF_INET, address.host, &sa.sin_addr)
            rc = withUnsafePointer(to: &sa) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        }
        guard rc == 0 else {
            let code = errno
            close(fd)
            let why = code == EADDRINUSE ? "address already in use (another process listens on this port)" : String(cString: strerror(code))
            throw Failure(description: "cannot listen on \(address): \(why)")
        }
        return fd
    }

    /// The client's address as text (for X-Forwarded-For), from an accepted socket's peer.
    static func peerAddress(_ storage: inout sockaddr_storage) -> String {
        var buf = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
        if storage.ss_family == sa_family_t(AF_INET6) {
            withUnsafePointer(to: &storage) {
                $0.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { p in
                    var a = p.pointee.sin6_addr
                    _ = inet_ntop(AF_INET6, &a, &buf, socklen_t(buf.count))
                }
            }
        } else {
            withUnsafePointer(to: &storage) {
                $0.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { p in
                    var a = p.pointee.sin_addr
                    _ = inet_ntop(AF_INET, &a, &buf, socklen_t(buf.count))
                }
            }
        }
        return String(cString: buf)
    }
}
