import CQuickwayShims

/// SHA-256, HMAC-SHA256, hex and constant-time comparison, on libcrypto (through
/// `qw_crypto.c`). Digests are returned as 32-byte arrays; hex is lower case.
public enum Crypto {
    public static func sha256(_ bytes: UnsafeRawBufferPointer) -> [UInt8] {
        digest { qw_sha256(bytes.baseAddress, bytes.count, $0) }
    }

    /// A 32-byte array filled by `write`, made through `ByteArrays` (both
    /// `[UInt8](repeating:count:)` and `unsafeUninitializedCapacity` allocate through an
    /// unspecialized generic call that looks the array's type up at run time).
    @inline(__always)
    static func digest(_ write: (UnsafeMutablePointer<UInt8>) -> Void) -> [UInt8] {
        ByteArrays.make(capacity: 32) { buf in
            write(buf.baseAddress!.assumingMemoryBound(to: UInt8.self))
            return 32
        }
    }
    public static func sha256(_ bytes: [UInt8]) -> [UInt8] { bytes.withUnsafeBytes { sha256($0) } }
    public static func sha256(_ s: String) -> [UInt8] { sha256(Array(s.utf8)) }

    public static func hmacSHA256(key: [UInt8], message: [UInt8]) -> [UInt8] {
        key.withUnsafeBytes { k in
            message.withUnsafeBytes { m in
                digest { qw_hmac_sha256(k.baseAddress, k.count, m.baseAddress, m.count, $0) }
            }
        }
    }

    public static func hex(_ bytes: [UInt8]) -> [UInt8] {
        ByteArrays.make(capacity: bytes.count * 2) { out in
            if let base = out.baseAddress { bytes.withUnsafeBytes { hex($0, into: base) } }
            return bytes.count * 2
        }
    }

    /// Writes the lower-case hex of `bytes` (`2 * bytes.count` bytes) at `out`.
    @inline(__always)
    static func hex(_ bytes: UnsafeRawBufferPointer, into out: UnsafeMutableRawPointer) {
        let digits: StaticString = "0123456789abcdef"
        let d = digits.utf8Start
        for (i, b) in bytes.enumerated() {
            out.storeBytes(of: d[Int(b >> 4)], toByteOffset: 2 * i, as: UInt8.self)
            out.storeBytes(of: d[Int(b & 15)], toByteOffset: 2 * i + 1, as: UInt8.self)
        }
    }
    public static func hexString(_ bytes: [UInt8]) -> String { String(decoding: hex(bytes), as: UTF8.self) }

    /// Equality that takes the same time wherever the first difference is.
    public static func constantTimeEqual(_ a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer) -> Bool {
        guard a.count == b.count else { return false }
        return qw_ct_compare(a.baseAddress, b.baseAddress, a.count) == 0
    }

    /// SHA-256 of the empty string, in hex (the body hash of a request without a body).
    public static let emptyBodyHashHex: [UInt8] = Array("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855".utf8)
}

/// An HMAC-SHA256 key with its padded states computed once, so each signature costs
/// two SHA-256 passes and no allocation. Immutable after `init`; safe to share
/// between threads.
public final class HMACKey: @unchecked Sendable {
    /// The padded states, written only in `init`: allocated once and never moved, so each
    /// signature hands C their address (no copy of the struct, no access to a `var`).
    private let key: UnsafeMutablePointer<qw_hmac_key>

    public init(_ bytes: [UInt8]) {
        key = .allocate(capacity: 1)
        key.initialize(to: qw_hmac_key())
        bytes.withUnsafeBytes { qw_hmac_prepare(key, $0.baseAddress, $0.count) }
    }

    /// The padded states sign as the key itself does: wiped before the memory is freed
    /// (a rotated secret is not left in the heap).
    deinit {
        qw_hmac_key_wipe(key)
        key.deallocate()
    }

    public func sign(_ message: UnsafeRawBufferPointer, into out: UnsafeMutableRawPointer) {
        qw_hmac_sign(key, message.baseAddress, message.count, out.assumingMemoryBound(to: UInt8.self))
    }

    /// Whether `sent` is the lower-case hex of this key's HMAC of `message`: signed,
    /// hex-encoded and compared in constant time in one C call (no temporary buffers on
    /// the Swift side). A `sent` of any length but 64 is false.
    public func verifyHex(_ message: UnsafeRawBufferPointer, sent: UnsafeRawBufferPointer) -> Bool {
        guard sent.count == 64 else { return false }
        return qw_hmac_verify_hex(key, message.baseAddress, message.count, sent.baseAddress!.assumingMemoryBound(to: UInt8.self)) == 1
    }

    public func sign(_ message: [UInt8]) -> [UInt8] {
        message.withUnsafeBytes { m in Crypto.digest { sign(m, into: UnsafeMutableRawPointer($0)) } }
    }
}

/// Incremental SHA-256, for hashing a request body as it arrives.
public struct SHA256Hasher {
    private var ctx = qw_sha256_ctx()
    /// Whether any byte was fed (a declared but empty body hashes to the constant).
    private var fed = false
    public init() { qw_sha256_init(&ctx) }
    public mutating func update(_ bytes: UnsafeRawBufferPointer) {
        if bytes.count > 0 { qw_sha256_update(&ctx, bytes.baseAddress, bytes.count); fed = true }
    }
    public mutating func finish() -> [UInt8] {
        Crypto.digest { qw_sha256_final(&ctx, $0) }
    }
    /// The digest in lower-case hex; for no bytes at all, `Crypto.emptyBodyHashHex`
    /// without hashing (a `Content-Length: 0` or empty chunked body).
    public mutating func finishHex() -> [UInt8] {
        fed ? Crypto.hex(finish()) : Crypto.emptyBodyHashHex
    }
}
