import CNghttp2
import CQuickwayShims

/// The HTTP/2 codec's edge to nghttp2: the session it makes (callbacks, flood limits,
/// settings, the idle-pages allocator) and the C callbacks, which turn nghttp2's
/// `user_data` back into the connection (not retained: the connection owns the session
/// and outlives every call into it) and hand each event to it.
enum HTTP2Session {
    /// A server session for `connection` (its user data, unretained: the connection frees
    /// the session in its `deinit`), with our callbacks, flood limits and settings.
    static func make(for connection: HTTP2Connection, settings: HTTP2Config, framePages: UnsafeMutablePointer<qw_idle_pages>) -> OpaquePointer? {
        var callbacks: OpaquePointer?
        guard nghttp2_session_callbacks_new(&callbacks) == 0, let callbacks else { return nil }
        defer { nghttp2_session_callbacks_del(callbacks) }
        nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks, h2OnBeginHeaders)
        nghttp2_session_callbacks_set_on_header_callback(callbacks, h2OnHeader)
        nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, h2OnFrameRecv)
        nghttp2_session_callbacks_set_on_frame_send_callback(callbacks, h2OnFrameSend)
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, h2OnDataChunk)
        nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, h2OnStreamClose)
        var option: OpaquePointer?
        guard nghttp2_option_new(&option) == 0, let option else { return nil }
        defer { nghttp2_option_del(option) }
        // Rapid reset (CVE-2023-44487): a client may reset this many streams in a burst,
        // then this many a second; past that nghttp2 ends the session with GOAWAY.
        nghttp2_option_set_stream_reset_rate_limit(option, HTTP2Codec.resetBurst, HTTP2Codec.resetRatePerSecond)
        // CONTINUATION flood (CVE-2024-28182): at most 8 CONTINUATION frames per header block.
        nghttp2_option_set_max_continuations(option, 8)
        // SETTINGS/PING flood: at most this many ACKs queued for a client that reads nothing.
        nghttp2_option_set_max_outbound_ack(option, 1000)
        nghttp2_option_set_max_settings(option, 32)
        // Request DATA's window is given back by the connection (`nghttp2_session_consume`):
        // at once for a buffered body, as the upstream takes it for a streamed one.
        nghttp2_option_set_no_auto_window_update(option, 1)
        var s: OpaquePointer?
        let me = Uncounted(connection).toOpaque()
        // nghttp2 copies the allocator (`mem`) into the session; `framePages` outlives it.
        var mem = nghttp2_mem(mem_user_data: UnsafeMutableRawPointer(framePages), malloc: qw_idle_pages_malloc,
                              free: qw_idle_pages_free, calloc: qw_idle_pages_calloc, realloc: qw_idle_pages_realloc)
        guard nghttp2_session_server_new3(&s, callbacks, me, option, &mem) == 0, let s else { return nil }
        var iv = [
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS.rawValue), value: UInt32(settings.maxConcurrentStreams)),
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE.rawValue), value: UInt32(settings.maxHeaderListBytes)),
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE.rawValue), value: UInt32(settings.initialWindowBytes)),
            // RFC 8441: WebSocket by extended CONNECT.
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_ENABLE_CONNECT_PROTOCOL.rawValue), value: 1),
        ]
        guard nghttp2_submit_settings(s, UInt8(NGHTTP2_FLAG_NONE.rawValue), &iv, iv.count) == 0 else {
            nghttp2_session_del(s)
            return nil
        }
        // The connection's window (RFC 9113 6.9.2: 64 KiB until raised) would hold every
        // upload on the connection to 64 KiB per round trip; request bodies are bounded by
        // `connectionBudget` instead.
        nghttp2_session_set_local_window_size(s, UInt8(NGHTTP2_FLAG_NONE.rawValue), 0, Int32(HTTP2Codec.connectionBudget))
        return s
    }
}

// MARK: nghttp2 callbacks (C function pointers; user_data is the connection, unretained)

fileprivate func connection(_ p: UnsafeMutableRawPointer?) -> HTTP2Connection {
    Uncounted<HTTP2Connection>.fromOpaque(p!).object
}

let h2OnBeginHeaders: nghttp2_on_begin_headers_callback = { _, frame, user in
    guard let frame else { return 0 }
    connection(user).headerBlockBegins()
    if frame.pointee.hd.type == UInt8(NGHTTP2_HEADERS.rawValue) && frame.pointee.headers.cat == NGHTTP2_HCAT_REQUEST {
        connection(user).beginStream(frame.pointee.hd.stream_id)
    }
    return 0
}

let h2OnHeader: nghttp2_on_header_callback = { _, frame, name, namelen, value, valuelen, _, user in
    guard let frame, frame.pointee.hd.type == UInt8(NGHTTP2_HEADERS.rawValue) else { return 0 }
    switch connection(user).header(frame.pointee.hd.stream_id, name: UnsafeRawBufferPointer(start: name, count: namelen),
                                   value: UnsafeRawBufferPointer(start: value, count: valuelen)) {
    case .go: return 0
    // nghttp2 returns from `mem_recv` at once with this error: the connection ends.
    case .endConnection: return Int32(NGHTTP2_ERR_CALLBACK_FAILURE.rawValue)
    }
}

let h2OnFrameRecv: nghttp2_on_frame_recv_callback = { _, frame, user in
    guard let frame else { return 0 }
    let c = connection(user)
    let endStream = frame.pointee.hd.flags & UInt8(NGHTTP2_FLAG_END_STREAM.rawValue) != 0
    switch UInt32(frame.pointee.hd.type) {
    case NGHTTP2_HEADERS.rawValue:
        c.requestHeadersEnded(frame.pointee.hd.stream_id, endStream: endStream)
    case NGHTTP2_DATA.rawValue:
        if endStream, let s = c.stream(frame.pointee.hd.stream_id) { c.requestBodyEnded(s) }
    case NGHTTP2_RST_STREAM.rawValue:
        c.clientReset()
    default:
        break
    }
    return 0
}

let h2OnFrameSend: nghttp2_on_frame_send_callback = { _, frame, user in
    guard let frame else { return 0 }
    let t = UInt32(frame.pointee.hd.type)
    if t == NGHTTP2_HEADERS.rawValue || t == NGHTTP2_DATA.rawValue {
        connection(user).frameSent(frame.pointee.hd.stream_id, endStream: frame.pointee.hd.flags & UInt8(NGHTTP2_FLAG_END_STREAM.rawValue) != 0)
    } else if t == NGHTTP2_GOAWAY.rawValue {
        connection(user).goawaySent(errorCode: frame.pointee.goaway.error_code, lastStreamId: frame.pointee.goaway.last_stream_id)
    }
    return 0
}

let h2OnDataChunk: nghttp2_on_data_chunk_recv_callback = { _, _, streamId, data, len, user in
    connection(user).requestData(streamId, UnsafeRawBufferPointer(start: data, count: len))
    return 0
}

let h2OnStreamClose: nghttp2_on_stream_close_callback = { _, streamId, errorCode, user in
    connection(user).streamClosed(streamId, errorCode: errorCode)
    return 0
}

let h2ReadBody: nghttp2_data_source_read_callback = { _, streamId, buf, length, flags, _, user in
    connection(user).readBody(streamId, into: buf!, length: length, flags: flags!)
}

extension HTTP2Connection {
    func stream(_ id: Int32) -> HTTP2Stream? { lookup(id) }
}
