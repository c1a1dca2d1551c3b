// The `matches` patterns of chain conditions, compiled and searched by RE2 (Debian libre2-dev)
// through the CRE2 shim: RE2 runs in time linear in the text and refuses a pattern whose
// program would outgrow its memory bound, so a caller's pattern cannot stall a thread.
// The only importer of CRE2.

import CRE2
public import LarderCore

public final class RE2Pattern: TextPattern, @unchecked Sendable {
    // Immutable once compiled; RE2 objects are safe to search from many threads at once.
    private let compiled: OpaquePointer

    /// Memory RE2 may give a compiled pattern's program and its DFA caches. It bounds what a
    /// pattern may expand to (`\pL{20}` and `a{1000}{1000}` are refused) and so how long compiling
    /// it takes (about 4 ms at the bound).
    public static let maxProgramBytes: Int64 = 256 << 10

    public let programSize: Int

    fileprivate init(compiled: OpaquePointer) {
        self.compiled = compiled
        self.programSize = Int(larder_re2_program_size(compiled))
    }

    deinit { larder_re2_free(compiled) }

    public func isFound(in text: String) -> Bool {
        var text = text
        return text.withUTF8 { bytes in
            bytes.withMemoryRebound(to: CChar.self) { larder_re2_search(compiled, $0.baseAddress, $0.count) == 1 }
        }
    }
}

/// Compiles chain patterns with RE2.
public struct RE2Compiler: TextPatternCompiler {
    public init() {}

    public func compile(_ source: String) throws(TextPatternRefusal) -> any TextPattern {
        var source = source
        var reason = [CChar](repeating: 0, count: 256)
        let compiled = source.withUTF8 { bytes in
            bytes.withMemoryRebound(to: CChar.self) { pattern in
                larder_re2_compile(pattern.baseAddress, pattern.count, RE2Pattern.maxProgramBytes, &reason, reason.count)
            }
        }
        guard let compiled else {
            throw TextPatternRefusal(reason: String(decoding: reason.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
        }
        return RE2Pattern(compiled: compiled)
    }
}
