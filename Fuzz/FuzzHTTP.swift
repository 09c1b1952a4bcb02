// libFuzzer harness: the HTTP/1.1 request parser, the target normaliser and the body
// decoder. Built by scripts/dev/fuzz.sh with `swiftc -sanitize=fuzzer,address` together with
// the parser's own source files. Besides crashes, it checks properties: parsing the input
// in one go (through a worker's scratch table) and byte by byte (with a table of the
// parse's own) must agree; every range a head reports must lie within the head's own
// bytes, and the raw target and the field table after them; a normalised target normalises to itself (one meaning, decided once) and holds
// no `#`, `\`, `%00` or dot segment; a target left unchanged is its own signed target.

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzHTTP(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let input = Array(UnsafeBufferPointer(start: data, count: size))
    let whole = parse(input, step: input.count, scratch: HeadFieldScratch(headBytes: 4096))
    let stepped = parse(input, step: 1, scratch: nil)
    if whole != stepped {
        fatalError("parser disagrees with itself: whole \(whole) vs byte by byte \(stepped)")
    }
    return 0
}

/// The outcome of parsing `input` fed in pieces of `step` bytes, as text.
func parse(_ input: [UInt8], step: Int, scratch: HeadFieldScratch?) -> String {
    var p = HTTPRequestParser(maxHeadBytes: 4096, maxBodyBytes: 65536)
    var have = 0
    while have < input.count {
        have = min(input.count, have + max(step, 1))
        let r = Array(input[0..<have]).withUnsafeBytes { raw in
            Result { () throws(HTTPParseError) -> HTTPRequestParser.HeadResult in try p.parseHead(raw, scratch: scratch) }
        }
        switch r {
        case .failure(let e): return "error \(e)"
        case .success(.needMore): continue
        case .success(.head(let head, let consumed)):
            precondition(consumed <= have)
            // The head's own bytes, then the raw target (when normalising changed it), then
            // the field table, which ends the array.
            for f in head.fields {
                precondition(f.name.upperBound <= head.headLength && f.value.upperBound <= head.headLength)
            }
            precondition(head.target.upperBound <= head.headLength)
            let rawEnd = head.signedTarget == head.target ? head.headLength : head.signedTarget.upperBound
            precondition(head.signedTarget == head.target || head.signedTarget.lowerBound == head.headLength)
            precondition(head.fields.tableStart >= rawEnd && head.fields.tableStart + 16 * head.fields.count == head.bytes.count)
            let target = Array(head.bytes[head.target])
            let again = target.withUnsafeBytes { raw in
                Result { () throws(HTTPParseError) -> RequestTargetNormalizer.Result in try RequestTargetNormalizer.normalize(raw) }
            }
            guard case .success(let n) = again, n.rewritten == nil else {
                fatalError("normalised target \(head.targetString) does not normalise to itself: \(again)")
            }
            let pathPart = target.prefix { $0 != UInt8(ascii: "?") }
            precondition(!target.contains(UInt8(ascii: "#")) && !pathPart.contains(UInt8(ascii: "\\")))
            if head.signedTarget != head.target {
                // The raw target is kept after the head, never overlapping a field.
                precondition(head.signedTarget.lowerBound >= (head.fields.last?.value.upperBound ?? head.target.upperBound))
            }
            var d = HTTPBodyDecoder(framing: head.body, maxBodyBytes: 65536)
            var body: [UInt8] = []
            let rest = Array(input[consumed...])
            let used = rest.withUnsafeBytes { raw in
                Result { () throws(HTTPParseError) -> Int in try d.decode(raw, into: &body) }
            }
            switch used {
            case .failure(let e): return "head \(head.methodString) \(head.targetString) then body error \(e)"
            case .success(let n):
                precondition(n <= rest.count && body.count <= 65536)
                return "head \(head.methodString) \(head.targetString) \(head.fields.count) fields, body \(body.count) complete \(d.isComplete)"
            }
        }
    }
    return "need more"
}
