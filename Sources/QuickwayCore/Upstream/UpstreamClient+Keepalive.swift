import CCurl
import CQuickwayShims

extension UpstreamClient {
    /// Sizes libcurl's connection cache (the https services' idle connections, one cache
    /// per worker's multi handle) to the sum of the https services' `keepalive`. curl
    /// closes the oldest cached connection when one more would pass it, as the plain-HTTP
    /// pool does per service; across https services the bound is shared. Called as each
    /// https call starts: the same service as last time costs one compare.
    func fitConnectionCache(to service: ServiceRuntime) {
        if service === lastFittedService { return }
        lastFittedService = service
        guard httpsKeepalive[service.config.name] != service.config.keepalive else { return }
        httpsKeepalive[service.config.name] = service.config.keepalive
        // At least 1: curl reads 0 as "its own default" (4 per handle added).
        qw_multi_setopt_long(multi, CURLMOPT_MAXCONNECTS, max(1, httpsKeepalive.values.reduce(0, +)))
    }
}
