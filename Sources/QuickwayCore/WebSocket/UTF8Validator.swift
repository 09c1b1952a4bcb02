/// Incremental UTF-8 validation (RFC 3629: no overlongs, no surrogates, nothing above
/// U+10FFFF), one byte at a time, so a text message can be checked across fragments and
/// reads without holding any of it. Pure.
public struct UTF8Validator: Sendable {
    /// Continuation bytes still expected.
    private var need = 0
    /// Bounds of the next continuation byte (narrower after E0, ED, F0, F4).
    private var lower: UInt8 = 0x80
    private var upper: UInt8 = 0xBF

    public init() {}

    /// Takes one byte; false if the text can no longer be valid UTF-8.
    @inline(__always) public mutating func feed(_ b: UInt8) -> Bool {
        if need == 0 {
            if b < 0x80 { return true }
            switch b {
            case 0xC2...0xDF: need = 1
            case 0xE0: need = 2; lower = 0xA0
            case 0xE1...0xEC, 0xEE...0xEF: need = 2
            case 0xED: need = 2; upper = 0x9F
            case 0xF0: need = 3; lower = 0x90
            case 0xF1...0xF3: need = 3
            case 0xF4: need = 3; upper = 0x8F
            default: return false
            }
            return true
        }
        guard b >= lower && b <= upper else { return false }
        lower = 0x80
        upper = 0xBF
        need -= 1
        return true
    }

    /// Takes a run of bytes.
    public mutating func feed(_ bytes: UnsafeRawBufferPointer) -> Bool {
        for b in bytes where !feed(b) { return false }
        return true
    }

    /// Ends on a whole character.
    public var isComplete: Bool { need == 0 }

    /// Whether `bytes` are valid UTF-8 as a whole.
    public static func isValid(_ bytes: UnsafeRawBufferPointer) -> Bool {
        var v = UTF8Validator()
        return v.feed(bytes) && v.isComplete
    }
}
