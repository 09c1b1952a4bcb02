import CCurl
import CQuickwayShims

/// Anything run on an `UpstreamClient`'s multi handle: its `CURLOPT_PRIVATE` points at
/// the task, which curl's completion is handed to.
///
/// Ownership across C: curl holds the task's address, not a count. From `attach` until
/// `letGo` the task holds itself (`keptAlive`), so the address stays valid for as long as
/// curl may call back with it; the callbacks turn it back into the task in
/// `UpstreamTrampolines.swift`. Loop thread only.
class CurlTask {
    func finished(_ code: CURLcode) {}
    /// The connection the task leaves in curl's pool is watched while idle
    /// (`CurlIdleWatch`); its handle must have been given to `CurlIdleWatch.track`.
    var watchesIdleConnection: Bool { false }
    /// The task's connection has one address to go to (`CURLOPT_CONNECT_TO` an IP), so
    /// curl opens no other socket for it and `socket` is its connection's.
    var connectsToOneAddress: Bool { false }
    /// The socket curl last started polling for the task; -1 before any.
    final var socket: curl_socket_t = -1
    /// The task itself while curl holds its address (a cycle on purpose, ended by `letGo`).
    private var keptAlive: CurlTask?

    /// Gives `h` the task's address as `CURLOPT_PRIVATE` and keeps the task alive until
    /// `letGo`. Returns the address, for the callbacks' user data.
    @discardableResult
    final func attach(to h: UnsafeMutableRawPointer) -> UnsafeMutableRawPointer {
        keptAlive = self
        let me = Uncounted<CurlTask>(self).toOpaque()
        qw_easy_setopt_ptr(h, CURLOPT_PRIVATE, me)
        return me
    }

    /// Curl no longer holds the task's address: it may go once its other owners do. The
    /// caller still holds the task for the rest of its own call.
    final func letGo() { keptAlive = nil }
}
