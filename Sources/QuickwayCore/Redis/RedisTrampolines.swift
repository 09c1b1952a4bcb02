import CLibevent

// libevent's callbacks into a `RedisSocket`: the event's argument
// (`Uncounted(socket).toOpaque()`) turned back into the socket, and one method called.
//
// Ownership across C: libevent holds the socket's address, never a count; the socket's
// owner (its `RedisLink`) keeps it alive until `RedisSocket.close()`, which frees both
// events first. Each callback takes a counted reference for its call, so a call that
// ends the link's hold on the socket finishes safely. Loop thread only.

/// The read and write events of a `RedisSocket`.
let redisSocketCallback: event_callback_fn = { _, what, arg in
    guard let arg else { return }
    Uncounted<RedisSocket>.fromOpaque(arg).object.onEvent(what)
}
