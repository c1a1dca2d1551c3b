// A JSON number kept as the text the caller wrote. Rewriting it through Int64 or Double changed
// what reached the origin (12345678901234567890 went out as 1.2345678901234567e+19, and
// 0.1000000000000000055511151231257827 as 0.1) and let two different bodies share one cache
// key. The parser has checked the text against the grammar (RFC 8259 §6), so the canonical
// rendering writes it back unchanged; only whitespace and member order are normalised.
// Numeric readers (chain conditions, field readers, validators) use the parsed values beside it.

public struct JSONNumber: Sendable, Hashable, CustomStringConvertible, ExpressibleByIntegerLiteral {
    /// The number as written, in JSON's grammar.
    public let text: String
    /// The nearest double; always finite (the parser refuses numbers beyond Double's range).
    public let double: Double
    /// The value when the number is written as an integer (no fraction, no exponent) that fits
    /// in Int64; nil otherwise.
    public let int64: Int64?

    /// Only the parser builds numbers from text, after checking the grammar.
    init(checkedText text: String, double: Double, int64: Int64?) {
        self.text = text
        self.double = double
        self.int64 = int64
    }

    public init(_ value: Int64) {
        self.init(checkedText: String(value), double: Double(value), int64: value)
    }

    public init(integerLiteral value: Int64) {
        self.init(value)
    }

    /// The number written as `text`, or nil when `text` is not one JSON number.
    public init?(_ text: String) {
        guard case .number(let number)? = try? JSONParser.parse(Array(text.utf8), maxDepth: 1), number.text == text else { return nil }
        self = number
    }

    public var description: String { text }

    // Two numbers are the same value for the cache when they are the same text: the origin
    // may read 1 and 1.0, or two decimals that round to one double, differently.
    public static func == (lhs: JSONNumber, rhs: JSONNumber) -> Bool { lhs.text == rhs.text }
    public func hash(into hasher: inout Hasher) { hasher.combine(text) }
}
