/// Decodes a request body framed by `Content-Length` or `chunked`, incrementally:
/// feed it whatever bytes have arrived; it appends the body's data to `out` and says
/// how many input bytes it used and whether the body is complete. Strict about chunk
/// syntax (hex sizes without overflow, CRLF after every size line, chunk and trailer)
/// and about the body limit.
public struct HTTPBodyDecoder: Sendable {
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

    public init(framing: HTTPBodyFraming, maxBodyBytes: Int) {
        self.maxBodyBytes = maxBodyBytes
        switch framing {
        case .none: state = .done
        case .contentLength(let n): state = n == 0 ? .done : .length(remaining: n)
        case .chunked: state = .chunkSize(value: 0, digits: 0)
        }
    }

    public var isComplete: Bool { if case .done = state { return true } else { return false } }

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
                i += 1
            case .chunkSizeLF:
                guard input[i] == 0x0A else { throw .badRequest("chunk size line must end in CRLF") }
                i += 1
                if pendingSize == 0 {
                    state = .trailer(lineLength: 0, sawCR: false)
                } else {
                    guard bodyBytes + pendingSize <= maxBodyBytes else { throw .bodyTooLarge }
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
                    state = lineLength == 0 ? .done : .trailer(lineLength: 0, sawCR: false)
                } else if c == 0x0D {
                    state = .trailer(lineLength: lineLength, sawCR: true)
                } else if c == 0x0A || c == 0 {
                    throw .badRequest("malformed chunked trailer")
                } else {
                    guard lineLength < 8192 else { throw .badRequest("chunked trailer too long") }
                    state = .trailer(lineLength: lineLength + 1, sawCR: false)
                }
            }
        }
        return i
    }

    /// Size of the chunk whose size line is being finished.
    private var pendingSize = 0
}
