// What one /batch or /chain answer may hold (`--max-batch-bytes`). Without a bound, a call of
// 100 requests of 64 MiB each could take gigabytes: every item is kept until the answer is
// written (or, streamed, until the socket takes it). Items are counted as rendered, in the order
// they finish; the first that does not fit is refused (`response_too_large`), and so is every
// later one: the answer is then over its budget, whatever smaller items might still fit.

public struct AnswerBudget: Sendable, Equatable {
    /// Bytes of rendered items the answer may hold.
    public let limit: Int
    public private(set) var used = 0
    /// An item was refused: every later one is too.
    public private(set) var exhausted = false

    public static let defaultLimit = 64 << 20

    public init(limit: Int) {
        self.limit = limit
    }

    /// Counts an item of `bytes`; false (and exhausted from then on) when it does not fit.
    public mutating func admit(_ bytes: Int) -> Bool {
        guard !exhausted, bytes <= limit - used else {
            exhausted = true
            return false
        }
        used += bytes
        return true
    }

    /// The error of an item the budget refused.
    public var refusal: LarderError {
        LarderError(.responseTooLarge, "the answer would hold more than \(limit) bytes (--max-batch-bytes)")
    }
}
