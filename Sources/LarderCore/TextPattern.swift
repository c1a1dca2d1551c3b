// The patterns of a chain condition's `matches` (POST /chain). A pattern comes from a caller, so
// it must cost time linear in the text it is searched in, whatever it says: a backtracking
// engine (Swift's Regex, PCRE) takes exponential time on `^(a|a)*$` against "aaa…!". The engine
// is an adapter's (LarderRE2: RE2, which never backtracks); the core states the contract and
// the bounds.

/// A compiled pattern, searched for anywhere in a text (an unanchored search, as RE2's
/// PartialMatch) in time linear in the text.
public protocol TextPattern: Sendable {
    func isFound(in text: String) -> Bool
}

/// Compiles patterns once, when the plan that holds them is parsed.
public protocol TextPatternCompiler: Sendable {
    /// Throws the engine's reason when `source` is no valid pattern, or too large a program.
    func compile(_ source: String) throws(TextPatternRefusal) -> any TextPattern
}

public struct TextPatternRefusal: Error, Sendable {
    public let reason: String

    public init(reason: String) {
        self.reason = reason
    }
}

/// A `matches` pattern as a condition holds it: its source (what the plan says, and what makes
/// two conditions equal) and its compiled form.
public struct ChainPattern: Sendable, Equatable {
    public let source: String
    let compiled: any TextPattern

    /// Longest pattern, in UTF-8 bytes.
    public static let maxSourceBytes = 1024
    /// Most pattern bytes in one chain: what compiling a plan's patterns may cost, bounded.
    public static let maxSourceBytesPerChain = 16 << 10
    /// Longest text a pattern is searched in, in UTF-8 bytes: a longer one does not match.
    public static let maxSubjectBytes = 64 << 10

    public init(source: String, compiled: any TextPattern) {
        self.source = source
        self.compiled = compiled
    }

    public func isFound(in text: String) -> Bool {
        text.utf8.count <= Self.maxSubjectBytes && compiled.isFound(in: text)
    }

    public static func == (lhs: ChainPattern, rhs: ChainPattern) -> Bool { lhs.source == rhs.source }
}
