import CPCRE2

/// One regular expression compiled by PCRE2 (8-bit, with its JIT where the machine has
/// one), as nginx uses it for `rewrite`: compiled once when the config is loaded and
/// shared by every worker. PCRE2 documents a compiled pattern, its JIT code and a match
/// context that is no longer modified as safe to use from several threads at once; what
/// one match writes (the captured offsets) is in a `PCRE2MatchData` of the caller's.
///
/// Bounded: a pattern that backtracks catastrophically (`^(a+)+$`) is the operator's
/// choice, but a request path must not pin a worker's CPU with it, so every match runs
/// under `matchLimit` (counted by the interpreter and the JIT alike), `depthLimit` and
/// `heapLimitKiB` (the interpreter's), and the JIT's default 32 KiB stack. A limit hit
/// is a failed match (`MatchResult.limit`), never a silent "no match".
///
/// `@unchecked Sendable`: immutable after `init`; PCRE2 reads the code and the context
/// without writing them.
final class PCRE2Pattern: @unchecked Sendable {
    /// What a failed compile says: PCRE2's message and the offset in the pattern where it
    /// stopped.
    struct CompileError: Error, Equatable {
        let message: String
        let offset: Int
    }

    enum MatchResult: Equatable {
        case noMatch
        /// Matched: the offsets are in the match data.
        case matched
        /// A resource limit ended the match (backtracking, depth, heap, JIT stack): neither
        /// a match nor a proven non-match.
        case limit(String)
        /// Any other PCRE2 error (none is expected for a byte-mode pattern).
        case failed(String)
    }

    /// Backtracking steps one match may take (PCRE2's default is 10,000,000: seconds of
    /// CPU on a crafted path).
    static let matchLimit: UInt32 = 100_000
    /// Nested backtracking points (interpreter only; the JIT has its stack).
    static let depthLimit: UInt32 = 10_000
    /// Heap for the interpreter's backtracking frames, in KiB.
    static let heapLimitKiB: UInt32 = 4_096

    /// The pattern as written.
    let source: String
    /// Capturing groups in the pattern (`$1` ... refer to them).
    let captureCount: Int
    /// Whether the JIT compiled it (false where PCRE2 has no JIT: the interpreter runs it).
    let jitCompiled: Bool
    private let code: OpaquePointer
    private let context: OpaquePointer

    /// Compiles `pattern` in byte mode: `(*UTF)` is refused (`PCRE2_NEVER_UTF`), since a
    /// path's bytes need not be UTF-8 and a UTF match would fail on them.
    ///
    /// Anchored at the subject's start (`PCRE2_ANCHORED`, as if the pattern began with
    /// `^`): the match limit counts per start position, so an unanchored pattern would be
    /// tried at each of a long path's bytes, the limit times the path's length.
    /// `caseless`: letters match in any case (a route with `match.ignore_case`, whose
    /// path is routed case-blind and must be rewritten the same way).
    init(_ pattern: String, caseless: Bool = false) throws(CompileError) {
        var errorCode: Int32 = 0
        var errorOffset = 0
        let bytes = Array(pattern.utf8)
        let options = PCRE2_NEVER_UTF | PCRE2_ANCHORED | (caseless ? PCRE2_CASELESS : 0)
        let compiled = bytes.withUnsafeBufferPointer { p in
            pcre2_compile_8(p.baseAddress, p.count, options, &errorCode, &errorOffset, nil)
        }
        guard let compiled else { throw CompileError(message: Self.message(errorCode), offset: errorOffset) }
        guard let context = pcre2_match_context_create_8(nil) else {
            pcre2_code_free_8(compiled)
            throw CompileError(message: "out of memory", offset: 0)
        }
        pcre2_set_match_limit_8(context, Self.matchLimit)
        pcre2_set_depth_limit_8(context, Self.depthLimit)
        pcre2_set_heap_limit_8(context, Self.heapLimitKiB)
        var groups: UInt32 = 0
        pcre2_pattern_info_8(compiled, UInt32(PCRE2_INFO_CAPTURECOUNT), &groups)
        source = pattern
        captureCount = Int(groups)
        jitCompiled = pcre2_jit_compile_8(compiled, PCRE2_JIT_COMPLETE) == 0
        code = compiled
        self.context = context
    }

    deinit {
        pcre2_match_context_free_8(context)
        pcre2_code_free_8(code)
    }

    /// Matches `subject` (whole, from its start), leaving the offsets in `data`.
    /// Allocates nothing: `data` is the caller's, made once.
    func match(_ subject: UnsafeRawBufferPointer, _ data: PCRE2MatchData) -> MatchResult {
        // An empty buffer may have no base address; PCRE2 takes any pointer for length 0.
        let start = subject.baseAddress?.assumingMemoryBound(to: UInt8.self) ?? ("" as StaticString).utf8Start
        let rc = pcre2_match_8(code, start, subject.count, 0, 0, data.pointer, context)
        if rc >= 0 { return .matched }   // 0: more groups than the match data holds; those it holds are set
        switch rc {
        case PCRE2_ERROR_NOMATCH: return .noMatch
        case PCRE2_ERROR_MATCHLIMIT, PCRE2_ERROR_DEPTHLIMIT, PCRE2_ERROR_HEAPLIMIT, PCRE2_ERROR_JIT_STACKLIMIT:
            return .limit(Self.message(rc))
        default: return .failed(Self.message(rc))
        }
    }

    /// PCRE2's text for an error code.
    static func message(_ code: Int32) -> String {
        var buffer = [UInt8](repeating: 0, count: 256)
        let n = buffer.withUnsafeMutableBufferPointer { pcre2_get_error_message_8(code, $0.baseAddress, $0.count) }
        return n > 0 ? String(decoding: buffer[0..<Int(n)], as: UTF8.self) : "PCRE2 error \(code)"
    }
}

/// Where one match writes its captured offsets: the first `pairs` groups (the whole
/// match and `pairs - 1` groups). One per worker and pipeline (`RewriteStage`), made
/// once and reused by every match on that loop, so a request allocates nothing to be
/// matched. Loop thread only.
final class PCRE2MatchData {
    let pointer: OpaquePointer
    let pairs: Int

    init(pairs: Int) {
        guard let p = pcre2_match_data_create_8(UInt32(pairs), nil) else { fatalError("pcre2_match_data_create: out of memory") }
        pointer = p
        self.pairs = pairs
    }

    deinit { pcre2_match_data_free_8(pointer) }

    /// The byte range group `n` matched after a `.matched`, or nil when it took no part
    /// in the match (or lies beyond the pairs held).
    func group(_ n: Int) -> Range<Int>? {
        guard n < pairs, n < Int(pcre2_get_ovector_count_8(pointer)) else { return nil }
        let ovector = pcre2_get_ovector_pointer_8(pointer)!
        let start = ovector[2 * n], end = ovector[2 * n + 1]
        // PCRE2_UNSET is ~0 as a size_t: -1 as Swift's Int.
        guard start >= 0, end >= start else { return nil }
        return start..<end
    }
}
