import CQuickwayShims

// hiredis's callbacks into a `RedisLink`: each turns its `void *` (the context's `data`, or
// a command's privdata, both `Uncounted(link).toOpaque()`) back into the link and calls
// one method there.
//
// Ownership across C: hiredis holds the link's address, never a count; the link's owner
// keeps it alive until `RedisLink.shutdown()`, which frees the hiredis context (and so
// answers every queued callback) first. Each callback takes a counted reference for its
// call. Loop thread only.

/// The link behind a hiredis context (its `data`).
private func link(of ac: UnsafePointer<redisAsyncContext>?) -> RedisLink? {
    guard let data = ac?.pointee.data else { return nil }
    return Uncounted<RedisLink>.fromOpaque(data).object
}

let redisReplyCallback: @convention(c) (UnsafeMutablePointer<redisAsyncContext>?, UnsafeMutableRawPointer?, UnsafeMutableRawPointer?) -> Void = { _, reply, privdata in
    guard let privdata else { return }
    Uncounted<RedisLink>.fromOpaque(privdata).object.replied(reply)
}

let redisMessageCallback: @convention(c) (UnsafeMutablePointer<redisAsyncContext>?, UnsafeMutableRawPointer?, UnsafeMutableRawPointer?) -> Void = { _, reply, privdata in
    guard let privdata else { return }
    Uncounted<RedisLink>.fromOpaque(privdata).object.published(reply)
}

let redisConnectCallback: @convention(c) (UnsafePointer<redisAsyncContext>?, Int32) -> Void = { ac, status in
    link(of: ac)?.connected(status: status, errorText: redisErrorText(of: ac))
}

let redisDisconnectCallback: @convention(c) (UnsafePointer<redisAsyncContext>?, Int32) -> Void = { ac, status in
    link(of: ac)?.disconnected(status: status, errorText: redisErrorText(of: ac))
}
