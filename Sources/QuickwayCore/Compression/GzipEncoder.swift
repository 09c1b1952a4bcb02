import CZlib

/// `gzip` (RFC 1952) through zlib's `deflate`: window 32 KiB, memory level 8 (zlib's
/// defaults, about 256 KiB of state). The stream struct is allocated once and never
/// moves (zlib keeps a pointer back to it); `deflateReset` readies it for reuse.
final class GzipEncoder: StreamingEncoder {
    let coding = ContentCoding.gzip
    private let stream: UnsafeMutablePointer<z_stream>

    init?(level: Int) {
        stream = .allocate(capacity: 1)
        stream.initialize(to: z_stream())
        guard qw_deflate_init_gzip(stream, Int32(level)) == Z_OK else {
            stream.deallocate()
            return nil
        }
    }

    deinit {
        deflateEnd(stream)
        stream.deallocate()
    }

    func reset() -> Bool { deflateReset(stream) == Z_OK }

    func encode(_ input: UnsafeRawBufferPointer, _ step: EncodeStep, scratch: UnsafeMutableRawBufferPointer,
                output: (UnsafeRawBufferPointer) -> Void) -> Bool {
        let flush: Int32 = switch step {
        case .more: Z_NO_FLUSH
        case .flush: Z_SYNC_FLUSH
        case .finish: Z_FINISH
        }
        stream.pointee.next_in = UnsafeMutablePointer(mutating: input.baseAddress?.assumingMemoryBound(to: Bytef.self))
        stream.pointee.avail_in = UInt32(input.count)
        while true {
            stream.pointee.next_out = scratch.baseAddress!.assumingMemoryBound(to: Bytef.self)
            stream.pointee.avail_out = UInt32(scratch.count)
            let rc = deflate(stream, flush)
            let produced = scratch.count - Int(stream.pointee.avail_out)
            if produced > 0 { output(UnsafeRawBufferPointer(rebasing: scratch[0..<produced])) }
            if rc == Z_STREAM_END { return true }
            // Z_BUF_ERROR: no progress possible (nothing to flush): done, not a failure.
            guard rc == Z_OK || rc == Z_BUF_ERROR else { return false }
            // Done once zlib took all input and left room in the output (for a flush or
            // finish it then has nothing more to write; finish ends with Z_STREAM_END).
            if stream.pointee.avail_in == 0 && stream.pointee.avail_out > 0 && step != .finish { return true }
            if rc == Z_BUF_ERROR { return step != .finish }
        }
    }
}
