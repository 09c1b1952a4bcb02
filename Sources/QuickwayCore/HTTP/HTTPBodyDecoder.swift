/// Decodes a request body framed by `Content-Length` or `chunked`, incrementally:
/// feed it whatever bytes have arrived; it appends the body's data to `out` and says
/// how many input bytes it used and whether the body is complete. Strict about chunk
/// syntax (hex sizes without overflow, CRLF after every size line, chunk and trailer)
/// and about the body limit.
///
/// Chunked framing is bounded as well as the data (RFC 9112 7.1.1 leaves the length of
/// chunk extensions, and 7.1.2 that of the trailer section, to the recipient): a size
/// line (digits and extensions, without its CRLF) may hold `maxChunkLineBytes`, the
/// trailer section's field lines (CRLFs included) `maxTrailerBytes` in all, and every
/// extension and trailer byte also counts toward `maxBodyBytes`, so the bytes read for
/// one body never exceed the limit by more than the bare framing (size digits, CRLFs).
/// All are checked byte by byte, so a refusal never waits for a line to end.
public struct HTTPBodyDecoder: Sendable {
    /// Longest chunk-size line: size digits plus extensions, CRLF not counted.
    public static let maxChunkLineBytes = 4096
    /// Longest trailer section: all field lines with their CRLFs (the final empty line
    /// not counted).
    public static let maxTrailerBytes = 8192

    private enum State: Sendable {
        case length(remaining: Int)
        case chunkSize(value: Int, digits: Int)
        case chunkExtension
        case chunkSizeLF
        case chunkData(remaining: Int)
        case chunkDataCR
        case chunkDataLF
        /// Inside the trailer section; `lineLength` counts the current line's bytes.
        case trailer(lineLength: Int, sawCR: Bool)
        case done
    }

    private var state: State
    private let maxBodyBytes: Int
    public private(set) var bodyBytes = 0
    /// Chunk-extension and trailer bytes so far; counted toward `maxBodyBytes`.
    public private(set) var overheadBytes = 0
    /// Bytes of the current chunk-size line (digits and extensions).
    private var lineBytes = 0
    /// Bytes of the trailer section so far.
    private var trailerBytes = 0

    public init(framing: HTTPBodyFraming, maxBodyBytes: Int) {
        self.maxBodyBytes = maxBodyBytes
        switch framing {
        case .none: state = .done
        case .contentLength(let n): state = n == 0 ? .done : .length(remaining: n)
        case .chunked: state = .chunkSize(value: 0, digits: 0)
        }
    }

    public var isComplete: Bool { if case .done = state { return true } else { return false } }

    /// For a body framed by `Content-Length`: takes up to `available` bytes of it as they
    /// are (no framing to strip, so the caller can hand on its input without copying it)
    /// and returns how many; nil for any other framing, or once the body is complete.
    public mutating func takeDelimited(upTo available: Int) -> Int? {
        guard case .length(let remaining) = state else { return nil }
        let take = min(remaining, available)
        bodyBytes += take
        state = remaining == take ? .done : .length(remaining: remaining - take)
        return take
    }

    /// Consumes bytes from `input`, appending body data to `out`.
    /// Returns how many bytes were consumed; stops at the end of the body.
    public mutating func decode(_ input: UnsafeRawBufferPointer, into out: inout [UInt8]) throws(HTTPParseError) -> Int {
        var i = 0
        let n = input.count
        while i < n {
            switch state {
            case .done:
                return i
            case .length(let remaining):
                let take = min(remaining, n - i)
                out.append(contentsOf: UnsafeRawBufferPointer(rebasing: input[i..<(i + take)]))
                bodyBytes += take
                i += take
                state = remaining == take ? .done : .length(remaining: remaining - take)
            case .chunkSize(let value, let digits):
                let c = input[i]
                if let h = HTTPSyntax.hexValue(c) {
                    guard digits < 15 else { throw .badRequest("chunk size too long") }
                    let v = value * 16 + h
                    guard v <= maxBodyBytes else { throw .bodyTooLarge }
                    state = .chunkSize(value: v, digits: digits + 1)
                } else if digits == 0 {
                    throw .badRequest("malformed chunk size")
                } else if c == 0x0D {
                    state = .chunkSizeLF
                    pendingSize = value
                } else if c == UInt8(ascii: ";") || c == 0x20 || c == 0x09 {
                    lineBytes = digits
                    try countExtensionByte()
                    state = .chunkExtension
                    pendingSize = value
                } else {
                    throw .badRequest("malformed chunk size")
                }
                i += 1
            case .chunkExtension:
                let c = input[i]
                if c == 0x0D { state = .chunkSizeLF }
                else if c == 0x0A || c == 0 { throw .badRequest("malformed chunk extension") }
                else { try countExtensionByte() }
                i += 1
            case .chunkSizeLF:
                guard input[i] == 0x0A else { throw .badRequest("chunk size line must end in CRLF") }
                i += 1
                if pendingSize == 0 {
                    state = .trailer(lineLength: 0, sawCR: false)
                } else {
                    guard bodyBytes + overheadBytes + pendingSize <= maxBodyBytes else { throw .bodyTooLarge }
                    state = .chunkData(remaining: pendingSize)
                }
            case .chunkData(let remaining):
                let take = min(remaining, n - i)
                out.append(contentsOf: UnsafeRawBufferPointer(rebasing: input[i..<(i + take)]))
                bodyBytes += take
                i += take
                state = remaining == take ? .chunkDataCR : .chunkData(remaining: remaining - take)
            case .chunkDataCR:
                guard input[i] == 0x0D else { throw .badRequest("chunk data must be followed by CRLF") }
                state = .chunkDataLF
                i += 1
            case .chunkDataLF:
                guard input[i] == 0x0A else { throw .badRequest("chunk data must be followed by CRLF") }
                state = .chunkSize(value: 0, digits: 0)
                i += 1
            case .trailer(let lineLength, let sawCR):
                let c = input[i]
                i += 1
                if sawCR {
                    guard c == 0x0A else { throw .badRequest("bare CR in the chunked trailer") }
                    if lineLength == 0 {
                        state = .done
                    } else {
                        try countTrailerByte()
                        state = .trailer(lineLength: 0, sawCR: false)
                    }
                } else if c == 0x0D {
                    if lineLength > 0 { try countTrailerByte() }
                    state = .trailer(lineLength: lineLength, sawCR: true)
                } else if c == 0x0A || c == 0 {
                    throw .badRequest("malformed chunked trailer")
                } else {
                    try countTrailerByte()
                    state = .trailer(lineLength: lineLength + 1, sawCR: false)
                }
            }
        }
        return i
    }

    /// Size of the chunk whose size line is being finished.
    private var pendingSize = 0

    /// One more byte of a chunk extension (or of the whitespace before it).
    private mutating func countExtensionByte() throws(HTTPParseError) {
        lineBytes += 1
        guard lineBytes <= Self.maxChunkLineBytes else { throw .badRequest("chunk extension too long") }
        try countOverhead()
    }

    /// One more byte of the trailer section. Too long a section is a 400, not a 431:
    /// 431 (RFC 6585 5) is defined for the request's header fields, which RFC 9110 6.3
    /// and 6.5 keep apart from trailer fields; trailers arrive inside the chunked body's
    /// framing (RFC 9112 7.1.2), after the whole content, and RFC 9110 5.4 only asks for
    /// "an appropriate 4xx" when fields are larger than a server will process. 400 is
    /// also what a too-long chunk line gets.
    private mutating func countTrailerByte() throws(HTTPParseError) {
        trailerBytes += 1
        guard trailerBytes <= Self.maxTrailerBytes else { throw .badRequest("chunked trailer section too long") }
        try countOverhead()
    }

    private mutating func countOverhead() throws(HTTPParseError) {
        overheadBytes += 1
        guard bodyBytes + overheadBytes <= maxBodyBytes else { throw .bodyTooLarge }
    }
}
