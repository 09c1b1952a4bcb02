/// The header fields of an upstream request: name/value pairs in the order they are
/// sent, with no framing. Each client writes them its own way (`UpstreamHTTPCall` as
/// `Name: value` lines, `UpstreamTransfer` as libcurl's header list). Names and values
/// follow each other in one byte store, and one array of `Int` says where each starts,
/// so a request's headers cost two allocations whatever their number (and no generic
/// array type to look up at run time: this is on every forwarded request). Built by
/// `UpstreamRequestHeaders.build`.
struct UpstreamHeaders {
    /// Names and values, back to back.
    private(set) var bytes: [UInt8] = []
    /// Two entries per field: where its name starts in `bytes`, then where its value
    /// starts. A value ends where the next name starts, or at the end of `bytes`.
    private var starts: [Int] = []

    init(byteCapacity: Int = 0, fieldCapacity: Int = 0) {
        bytes.reserveCapacity(byteCapacity)
        starts.reserveCapacity(2 * fieldCapacity)
    }

    var count: Int { starts.count / 2 }

    /// Adds a field whose value `writeValue` appends to the store (in pieces, when it is
    /// made of several).
    mutating func add(name: some Sequence<UInt8>, writeValue: (inout [UInt8]) -> Void) {
        starts.append(bytes.count)
        bytes.append(contentsOf: name)
        starts.append(bytes.count)
        writeValue(&bytes)
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
        bytes.withUnsafeBytes { raw in
            for i in stride(from: 0, to: starts.count, by: 2) {
                let valueEnd = i + 2 < starts.count ? starts[i + 2] : raw.count
                body(UnsafeRawBufferPointer(rebasing: raw[starts[i]..<starts[i + 1]]),
                     UnsafeRawBufferPointer(rebasing: raw[starts[i + 1]..<valueEnd]))
            }
        }
    }

    /// Whether a field is named `lowercaseName` (ASCII case-insensitive).
    func contains(_ lowercaseName: StaticString) -> Bool {
        bytes.withUnsafeBytes { raw in
            stride(from: 0, to: starts.count, by: 2).contains { HTTPSyntax.equalsLowercase(raw, starts[$0]..<starts[$0 + 1], lowercaseName) }
        }
    }
}
