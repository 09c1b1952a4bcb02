/// The header fields of an upstream request, in the order they are sent, kept as the
/// wire's `Name: value` lines (CRLF after each) in one byte store: one allocation for
/// a request's headers whatever their number, and `UpstreamHTTPCall` copies the whole
/// block at once. `UpstreamTransfer` (libcurl) reads them back as name/value pairs
/// (`forEach`). Built by `UpstreamRequestHeaders.build`.
///
/// The line form is safe because neither names nor values can hold CR, LF or a first
/// `:` of their own: names are tokens (literals for the gateway's own), client values
/// were refused with a control byte by both parsers, and the gateway's own values are
/// addresses, ids and key names.
struct UpstreamHeaders {
    /// `Name: value\r\n` for each field, back to back.
    private(set) var bytes: [UInt8] = []
    /// Fields held.
    private(set) var count = 0

    /// No lines (nothing reserved: `reserveCapacity(0)` still costs a call per request).
    init() {}

    init(byteCapacity: Int) {
        bytes.reserveCapacity(byteCapacity)
    }

    /// `count` fields already written as `Name: value\r\n` lines (checked in debug
    /// builds, as `add` checks each).
    init(lines: [UInt8], count: Int) {
        bytes = lines
        self.count = count
        assert(Self.wellFormed(lines, count: count), "malformed header lines")
    }

    /// Whether `lines` is `count` lines, each a name without CR, LF or colon, `: `, a value
    /// without CR or LF, and CRLF.
    static func wellFormed(_ lines: [UInt8], count: Int) -> Bool {
        var seen = 0
        var i = 0
        while i < lines.count {
            var j = i
            while j < lines.count && lines[j] != UInt8(ascii: ":") {
                if lines[j] == 0x0D || lines[j] == 0x0A { return false }
                j += 1
            }
            guard j > i, j + 1 < lines.count, lines[j + 1] == 0x20 else { return false }
            j += 2
            while j < lines.count && lines[j] != 0x0D {
                if lines[j] == 0x0A { return false }
                j += 1
            }
            guard j + 1 < lines.count, lines[j + 1] == 0x0A else { return false }
            i = j + 2
            seen += 1
        }
        return seen == count
    }

    /// Adds a field whose value `writeValue` appends to the store (in pieces, when it is
    /// made of several).
    mutating func add(name: some Sequence<UInt8>, writeValue: (inout [UInt8]) -> Void) {
        let start = bytes.count
        bytes.append(contentsOf: name)
        let colon = bytes.count
        bytes.append(UInt8(ascii: ":"))
        bytes.append(0x20)
        writeValue(&bytes)
        // The line form's invariant (see the type's note), checked in debug builds: the
        // tests run the parsers' output through here.
        assert(!bytes[start..<colon].contains(UInt8(ascii: ":")) && !bytes[start...].contains(0x0D) && !bytes[start...].contains(0x0A),
               "a header name with a colon, or a CR or LF in a header line")
        bytes.append(0x0D)
        bytes.append(0x0A)
        count += 1
    }

    mutating func add(name: some Sequence<UInt8>, value: some Sequence<UInt8>) {
        add(name: name) { $0.append(contentsOf: value) }
    }

    /// A gateway-set field (a literal name: no `String` to go through).
    mutating func add(name: StaticString, writeValue: (inout [UInt8]) -> Void) {
        add(name: UnsafeRawBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount), writeValue: writeValue)
    }

    mutating func add(name: StaticString, value: some Sequence<UInt8>) {
        add(name: name) { $0.append(contentsOf: value) }
    }

    /// Calls `body` with each field's name and value, in order; the buffers are valid
    /// only during the call.
    func forEach(_ body: (_ name: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) -> Void) {
        bytes.withUnsafeBytes { (raw: UnsafeRawBufferPointer) -> Void in
            var line = 0
            while line < raw.count {
                var nameEnd = line
                while raw[nameEnd] != UInt8(ascii: ":") { nameEnd += 1 }
                let valueStart = nameEnd + 2
                var lf = valueStart
                while raw[lf] != 0x0A { lf += 1 }
                body(UnsafeRawBufferPointer(rebasing: raw[line..<nameEnd]), UnsafeRawBufferPointer(rebasing: raw[valueStart..<(lf - 1)]))
                line = lf + 1
            }
        }
    }

    /// Whether a field is named `lowercaseName` (ASCII case-insensitive).
    func contains(_ lowercaseName: StaticString) -> Bool {
        var found = false
        forEach { name, _ in
            if !found && HTTPSyntax.equalsLowercase(name, 0..<name.count, lowercaseName) { found = true }
        }
        return found
    }
}
