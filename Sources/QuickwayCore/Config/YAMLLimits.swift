/// Bounds on a config file's YAML, checked on the text before Yams sees it.
///
/// Yams composes its node tree recursively (and frees it recursively), so a file nested
/// thousands of levels deep (`[[[[…`, `{{{{…`, `- - - - …`, ever deeper indented
/// mappings) overflows the stack of whichever thread parses it: `quickway check`, or the
/// admin loop on a reload. Aliases are not expanded by Yams (an alias shares its anchor's
/// node), but a chain of them (`b: &b [*a]`, `c: &c [*b]`, …) builds a tree as deep as
/// the chain is long, which is freed recursively too. So a file is refused, as an
/// ordinary config error with its line, when it is larger than `maxBytes`, nests deeper
/// than `maxDepth` or uses more than `maxAliases` aliases.
///
/// The depth scan follows libyaml's tokenizer (`scanner.c`): the same comments, quoted,
/// plain and block scalars, flow levels, simple keys and indentation stack. Where it is
/// unsure it counts rather than skips, so it may over-count (a file libyaml would refuse
/// anyway) but never sees less nesting than libyaml will. Block collections count one
/// level per indentation step and flow collections one per `[` or `{`; the tree Yams
/// builds can be up to twice that deep (an indentless `- ` list under a key, a `[a: b]`
/// pair), which a bound of 64 leaves far from any stack limit.
enum YAMLLimits {
    static let maxBytes = 4 << 20
    static let maxDepth = 64
    static let maxAliases = 64

    /// The first reason to refuse `text`, or nil when Yams may parse it.
    static func check(_ text: String) -> ConfigIssue? {
        let bytes = Array(text.utf8)
        if let issue = sizeIssue(bytes) { return issue }
        var scan = DepthScan(bytes)
        return scan.run()
    }

    /// Refuses text over `maxBytes`, naming the line where the limit is crossed.
    static func sizeIssue<Bytes: Collection>(_ bytes: Bytes) -> ConfigIssue? where Bytes.Element == UInt8 {
        guard bytes.count > maxBytes else { return nil }
        var line = 1
        for b in bytes.prefix(maxBytes) where b == UInt8(ascii: "\n") { line += 1 }
        return ConfigIssue(path: "", line: line, message: "the config file is larger than \(maxBytes >> 20)MiB; refusing to parse it")
    }
}

/// One pass over the UTF-8 text, tracking what libyaml's scanner tracks: the flow level,
/// the stack of block indentation columns and the pending simple key.
private struct DepthScan {
    let b: [UInt8]
    let end: Int
    var p = 0
    var line = 1
    var column = 0
    /// Characters read so far (libyaml's `mark.index`), for the 1024-character simple-key limit.
    var index = 0
    var flow = 0
    var indents: [Int] = []
    var simpleKeyAllowed = true
    /// The possible simple key of the block level (libyaml's bottom `simple_keys` entry):
    /// where a `key: value` mapping would start if a `:` follows on the same line.
    var blockKey: (line: Int, column: Int, index: Int)?
    var aliases = 0

    init(_ bytes: [UInt8]) {
        b = bytes
        end = bytes.count
    }

    // MARK: characters

    var atEnd: Bool { p >= end }
    func byte(_ offset: Int = 0) -> UInt8 { p + offset < end ? b[p + offset] : 0 }
    func isChar(_ c: Unicode.Scalar, _ offset: Int = 0) -> Bool { byte(offset) == UInt8(ascii: c) }
    func isBlank(_ offset: Int = 0) -> Bool { byte(offset) == 0x20 || byte(offset) == 0x09 }
    /// Length of the line break at `p + offset` (CR LF, CR, LF, NEL, LS, PS), 0 if none.
    func breakLength(_ offset: Int = 0) -> Int {
        switch byte(offset) {
        case 0x0D: return byte(offset + 1) == 0x0A ? 2 : 1
        case 0x0A: return 1
        case 0xC2: return byte(offset + 1) == 0x85 ? 2 : 0
        case 0xE2: return byte(offset + 1) == 0x80 && (byte(offset + 2) == 0xA8 || byte(offset + 2) == 0xA9) ? 3 : 0
        default: return 0
        }
    }
    func isBreak(_ offset: Int = 0) -> Bool { breakLength(offset) > 0 }
    func isBlankOrBreakOrEnd(_ offset: Int = 0) -> Bool { p + offset >= end || isBlank(offset) || isBreak(offset) }
    func isFlowIndicator(_ c: UInt8) -> Bool {
        c == UInt8(ascii: ",") || c == UInt8(ascii: "[") || c == UInt8(ascii: "]") || c == UInt8(ascii: "{") || c == UInt8(ascii: "}")
    }

    /// Steps over one character (all bytes of a UTF-8 sequence count as one column).
    mutating func skip() {
        guard !atEnd else { return }
        p += 1
        while p < end && b[p] & 0xC0 == 0x80 { p += 1 }
        column += 1
        index += 1
    }

    mutating func skipBreak() {
        let n = breakLength()
        p += n
        index += n == 2 && b[p - 2] == 0x0D ? 2 : 1
        line += 1
        column = 0
    }

    mutating func skipToBreak() { while !atEnd && !isBreak() { skip() } }

    // MARK: the scan

    mutating func run() -> ConfigIssue? {
        while true {
            skipToNextToken()
            if atEnd { return nil }
            if flow == 0 { while let top = indents.last, top > column { indents.removeLast() } }
            let c = byte()
            if column == 0 && c == UInt8(ascii: "%") {   // directive
                if flow == 0 { indents.removeAll() }
                blockKey = nil; simpleKeyAllowed = false
                skipToBreak()
                continue
            }
            if column == 0 && (isChar("-") && isChar("-", 1) && isChar("-", 2) || isChar(".") && isChar(".", 1) && isChar(".", 2))
                && isBlankOrBreakOrEnd(3) {
                if flow == 0 { indents.removeAll() }
                blockKey = nil; simpleKeyAllowed = false
                skip(); skip(); skip()
                continue
            }
            switch c {
            case UInt8(ascii: "["), UInt8(ascii: "{"):
                saveKey()
                flow += 1
                simpleKeyAllowed = true
                // A flow collection that turns out to be a key (`[a]: b`) sits inside the
                // mapping its `:` starts, so that mapping is counted already.
                let keyMapping = blockKey.map { $0.line == line && $0.column > (indents.last ?? -1) } == true ? 1 : 0
                if indents.count + keyMapping + flow > YAMLLimits.maxDepth { return tooDeep() }
                skip()
            case UInt8(ascii: "]"), UInt8(ascii: "}"):
                if flow > 0 { flow -= 1 }
                simpleKeyAllowed = false
                skip()
            case UInt8(ascii: ","):
                simpleKeyAllowed = true
                skip()
            case UInt8(ascii: "-") where isBlankOrBreakOrEnd(1):
                if flow == 0 {
                    if roll(column) { return tooDeep() }
                    blockKey = nil
                }
                simpleKeyAllowed = true
                skip()
            case UInt8(ascii: "?") where flow > 0 || isBlankOrBreakOrEnd(1):
                if flow == 0 {
                    if roll(column) { return tooDeep() }
                    blockKey = nil
                }
                simpleKeyAllowed = flow == 0
                skip()
            case UInt8(ascii: ":") where flow > 0 || isBlankOrBreakOrEnd(1):
                if flow == 0 {
                    if let k = blockKey, k.line == line, k.index + 1024 >= index {
                        if roll(k.column) { return tooDeep() }
                        simpleKeyAllowed = false
                    } else {
                        if roll(column) { return tooDeep() }
                        simpleKeyAllowed = true
                    }
                    blockKey = nil
                } else {
                    simpleKeyAllowed = false
                }
                skip()
            case UInt8(ascii: "*"), UInt8(ascii: "&"):
                if c == UInt8(ascii: "*") {
                    aliases += 1
                    if aliases > YAMLLimits.maxAliases {
                        return ConfigIssue(path: "", line: line, message: "the config uses more than \(YAMLLimits.maxAliases) YAML aliases (*name)")
                    }
                }
                saveKey()
                simpleKeyAllowed = false
                skip()
                while isAnchorChar(byte()) { skip() }
            case UInt8(ascii: "!"):
                saveKey()
                simpleKeyAllowed = false
                // A tag must be followed by a blank (libyaml refuses anything else), so
                // stopping at a flow indicator only counts more, never less.
                skip()
                while !isBlankOrBreakOrEnd() && !isFlowIndicator(byte()) { skip() }
            case UInt8(ascii: "|") where flow == 0, UInt8(ascii: ">") where flow == 0:
                blockKey = nil
                simpleKeyAllowed = true
                blockScalar()
            case UInt8(ascii: "'"), UInt8(ascii: "\""):
                saveKey()
                simpleKeyAllowed = false
                quotedScalar(single: c == UInt8(ascii: "'"))
            default:
                saveKey()
                simpleKeyAllowed = false
                let before = p
                plainScalar()
                if p == before { skip() }
            }
        }
    }

    func isAnchorChar(_ c: UInt8) -> Bool {
        (c >= 0x30 && c <= 0x39) || (c | 0x20 >= 0x61 && c | 0x20 <= 0x7A) || c == UInt8(ascii: "_") || c == UInt8(ascii: "-")
    }

    mutating func saveKey() {
        if flow == 0 && simpleKeyAllowed { blockKey = (line, column, index) }
    }

    /// A block collection starts at `col` when it is right of the current one; true when
    /// that makes the file too deep.
    mutating func roll(_ col: Int) -> Bool {
        guard col > (indents.last ?? -1) else { return false }
        indents.append(col)
        return indents.count + flow > YAMLLimits.maxDepth
    }

    func tooDeep() -> ConfigIssue {
        ConfigIssue(path: "", line: line, message: "config nests deeper than \(YAMLLimits.maxDepth) levels")
    }

    /// Blanks, comments and line breaks (libyaml's `scan_to_next_token`; tabs are skipped
    /// everywhere, where libyaml would refuse some).
    mutating func skipToNextToken() {
        while !atEnd {
            if column == 0 && byte() == 0xEF && byte(1) == 0xBB && byte(2) == 0xBF { skip() }
            while isBlank() { skip() }
            if isChar("#") { skipToBreak() }
            if isBreak() {
                skipBreak()
                if flow == 0 { simpleKeyAllowed = true }
            } else {
                return
            }
        }
    }

    /// `'…'` (with `''` inside) or `"…"` (with `\` escapes), possibly over several lines.
    mutating func quotedScalar(single: Bool) {
        skip()
        while !atEnd {
            if isBreak() { skipBreak(); continue }
            if single && isChar("'") {
                if isChar("'", 1) { skip(); skip(); continue }
                skip(); return
            }
            if !single && isChar("\\") {
                skip()
                if isBreak() { skipBreak() } else { skip() }
                continue
            }
            if !single && isChar("\"") { skip(); return }
            skip()
        }
    }

    /// A plain scalar, which may go on over following lines that are indented more than the
    /// current block (any lines inside a flow collection); `[`, `{`, `'`, `-` … on those
    /// lines are text in the block context (libyaml's `scan_plain_scalar`).
    mutating func plainScalar() {
        let indent = (indents.last ?? -1) + 1
        var leadingBlanks = false
        while !atEnd {
            if column == 0 && (isChar("-") && isChar("-", 1) && isChar("-", 2) || isChar(".") && isChar(".", 1) && isChar(".", 2))
                && isBlankOrBreakOrEnd(3) { break }
            if isChar("#") { break }
            while !isBlankOrBreakOrEnd() {
                if flow > 0 && isChar(":") && (isFlowIndicator(byte(1)) || isChar("?", 1)) { return }   // libyaml: "found unexpected ':'"
                if isChar(":") && isBlankOrBreakOrEnd(1) || flow > 0 && isFlowIndicator(byte()) { break }
                leadingBlanks = false
                skip()
            }
            guard !atEnd && (isBlank() || isBreak()) else { break }
            while !atEnd && (isBlank() || isBreak()) {
                if isBreak() { skipBreak(); leadingBlanks = true } else { skip() }
            }
            if flow == 0 && column < indent { break }
        }
        if leadingBlanks { simpleKeyAllowed = true }
    }

    /// `|` or `>`: the header line, then every line indented at least as far as the first
    /// (libyaml's `scan_block_scalar`, with its auto-detected indentation).
    mutating func blockScalar() {
        skip()
        var increment = 0
        for _ in 0..<2 {
            if isChar("+") || isChar("-") { skip() } else if byte() >= UInt8(ascii: "1") && byte() <= UInt8(ascii: "9") {
                increment = Int(byte() - UInt8(ascii: "0")); skip()
            }
        }
        while isBlank() { skip() }
        if isChar("#") { skipToBreak() }
        guard isBreak() else { return }   // libyaml refuses the header; tokens go on from here
        skipBreak()
        let parent = indents.last ?? -1
        var indent = increment > 0 ? (parent >= 0 ? parent + increment : increment) : 0
        var maxIndent = 0
        // Leading empty lines and indentation; false where libyaml stops with an error.
        func breaks(_ s: inout DepthScan) -> Bool {
            while true {
                while (indent == 0 || s.column < indent) && s.isChar(" ") { s.skip() }
                if s.column > maxIndent { maxIndent = s.column }
                if (indent == 0 || s.column < indent) && s.isChar("\t") { return false }
                guard s.isBreak() else { return true }
                s.skipBreak()
            }
        }
        guard breaks(&self) else { return }
        if indent == 0 { indent = max(maxIndent, parent + 1, 1) }
        while column == indent && !atEnd {
            skipToBreak()
            guard isBreak() else { return }
            skipBreak()
            guard breaks(&self) else { return }
        }
    }
}
