// A chain step's `when` (POST /chain): parsed by ChainPlan, evaluated against the results so far.

import Foundation

/// A step's `when`: a comparison, a pattern search, or `all` / `any` / `not` of conditions.
public indirect enum ChainCondition: Sendable, Equatable {
    case compare(ChainReference, Operator, JSONValue?)
    /// `matches`: the value at the reference is a string in which the pattern is found.
    case matches(ChainReference, ChainPattern)
    case all([ChainCondition])
    case any([ChainCondition])
    case not(ChainCondition)

    public enum Operator: String, Sendable, CaseIterable {
        case eq, ne, gt, ge, lt, le, exists, `in`, matches
    }

    /// The references the condition reads.
    var references: [ChainReference] {
        switch self {
        case .compare(let reference, _, _), .matches(let reference, _): [reference]
        case .all(let conditions), .any(let conditions): conditions.flatMap(\.references)
        case .not(let condition): condition.references
        }
    }

    /// The step ids the condition reads.
    var roots: [String] { references.map(\.root) }

    /// Whether the condition searches any pattern.
    public var hasPatterns: Bool {
        switch self {
        case .compare: false
        case .matches: true
        case .all(let conditions), .any(let conditions): conditions.contains { $0.hasPatterns }
        case .not(let condition): condition.hasPatterns
        }
    }

    /// Whether the condition holds, with a chain's whole search budget.
    public func holds(in documents: [String: JSONValue]) -> Bool {
        var budget = ChainPattern.maxSearchCostPerChain
        return holds(in: documents, searchBudget: &budget)
    }

    /// Whether the condition holds over the results so far. Pattern searches are paid for from
    /// `searchBudget` (ChainPattern's costs: a search past what is left does not match);
    /// `stopped` is asked before each: once it says yes (the chain's deadline passed), nothing
    /// more is searched and the answer no longer matters.
    public func holds(
        in documents: [String: JSONValue], searchBudget: inout Int, stopped: () -> Bool = { false }
    ) -> Bool {
        switch self {
        case .all(let conditions):
            for condition in conditions where !condition.holds(in: documents, searchBudget: &searchBudget, stopped: stopped) {
                return false
            }
            return true
        case .any(let conditions):
            for condition in conditions where condition.holds(in: documents, searchBudget: &searchBudget, stopped: stopped) {
                return true
            }
            return false
        case .not(let condition): return !condition.holds(in: documents, searchBudget: &searchBudget, stopped: stopped)
        case .matches(let reference, let pattern):
            guard !stopped(), case .string(let text)? = reference.resolve(in: documents) else { return false }
            return pattern.isFound(in: text, budget: &searchBudget)
        case .compare(let reference, let op, let expected):
            let actual = reference.resolve(in: documents)
            switch op {
            case .exists: return actual != nil && actual != .null
            case .eq: return actual.map { Self.equal($0, expected ?? .null) } ?? false
            case .ne: return !(actual.map { Self.equal($0, expected ?? .null) } ?? false)
            case .gt, .ge, .lt, .le:
                guard let actual, let expected, let order = Self.order(actual, expected) else { return false }
                switch op {
                case .gt: return order > 0
                case .ge: return order >= 0
                case .lt: return order < 0
                default: return order <= 0
                }
            case .in:
                guard let actual, case .array(let options)? = expected else { return false }
                return options.contains { Self.equal(actual, $0) }
            case .matches:
                return false // parsed as .matches(_, ChainPattern)
            }
        }
    }

    private static func number(_ value: JSONValue) -> Double? {
        switch value {
        case .number(let number): number.double
        default: nil
        }
    }

    static func equal(_ lhs: JSONValue, _ rhs: JSONValue) -> Bool {
        if let left = number(lhs), let right = number(rhs) { return left == right }
        return lhs == rhs
    }

    /// Numbers compare as numbers, strings by their UTF-8 bytes; anything else has no order.
    static func order(_ lhs: JSONValue, _ rhs: JSONValue) -> Int? {
        if let left = number(lhs), let right = number(rhs) { return left < right ? -1 : (left > right ? 1 : 0) }
        if case .string(let left) = lhs, case .string(let right) = rhs {
            return left == right ? 0 : (left.utf8.lexicographicallyPrecedes(right.utf8) ? -1 : 1)
        }
        return nil
    }
}
