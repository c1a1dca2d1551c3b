// The patterns of a chain condition's `matches` (POST /chain). A pattern comes from a caller, so
// it must cost time linear in the text it is searched in, whatever it says: a backtracking
// engine (Swift's Regex, PCRE) takes exponential time on `^(a|a)*$` against "aaa…!". The engine
// is an adapter's (LarderRE2: RE2, which never backtracks); the core states the contract and
// the bounds.

/// A compiled pattern, searched for anywhere in a text (an unanchored search, as RE2's
/// PartialMatch) in time linear in the text: at worst about `programSize` steps per byte.
public protocol TextPattern: Sendable {
    /// The compiled program's size in instructions.
    var programSize: Int { get }
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
    /// Most patterns in one chain.
    public static let maxPerChain = 16
    /// Most instructions a chain's patterns compile to, in all: what compiling them on the
    /// request's thread may cost (about 1 µs an instruction), bounded.
    public static let maxProgramSizePerChain = 20_000
    /// Most Unicode property classes (`\pL`, `\P{Han}`) in one chain's patterns: RE2 builds each
    /// from hundreds of ranges (about 1 ms with `(?i)`), a cost its memory bound does not count.
    public static let maxPropertyClassesPerChain = 8
    /// Longest text a pattern is searched in, in UTF-8 bytes: a longer one does not match.
    public static let maxSubjectBytes = 64 << 10
    /// What one search may cost, in program size times the text's bytes (a step is about 20 ns at
    /// worst, when RE2's DFA gives way to its NFA): a costlier search does not match.
    public static let maxSearchCost = 1 << 23
    /// What one chain's searches may cost in all; once spent, its patterns match nothing more.
    public static let maxSearchCostPerChain = 1 << 25

    public init(source: String, compiled: any TextPattern) {
        self.source = source
        self.compiled = compiled
    }

    /// The `\p` and `\P` escapes in `source` (an escaped backslash is not one).
    public static func propertyClasses(in source: String) -> Int {
        var count = 0
        var bytes = source.utf8.makeIterator()
        while let byte = bytes.next() {
            guard byte == UInt8(ascii: "\\"), let next = bytes.next() else { continue }
            if next == UInt8(ascii: "p") || next == UInt8(ascii: "P") { count += 1 }
        }
        return count
    }

    /// What searching `text` costs, in program size times bytes.
    public func cost(of text: String) -> Int { max(1, compiled.programSize) * max(1, text.utf8.count) }

    /// Whether the pattern is found in `text`, paid for from `budget` (left as it was when the
    /// search is past its bounds, which does not match).
    public func isFound(in text: String, budget: inout Int) -> Bool {
        let cost = cost(of: text)
        guard text.utf8.count <= Self.maxSubjectBytes, cost <= Self.maxSearchCost, cost <= budget else { return false }
        budget -= cost
        return compiled.isFound(in: text)
    }

    public static func == (lhs: ChainPattern, rhs: ChainPattern) -> Bool { lhs.source == rhs.source }
}
