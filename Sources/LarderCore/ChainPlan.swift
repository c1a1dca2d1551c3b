// POST /chain: steps that depend on earlier steps' results (YTKNetwork's chain requests, Graph
// batching's dependsOn, OData's `if`). This file is the pure part: parsing and checking the
// chain, references between steps, conditions, and rendering a step's request or the output
// from the results so far. The engine's ChainRun runs it.
//
// A reference is `{{root.path}}` inside any string of a step's request (or of `output`):
// `root` is a step id or `input`; the path is `.name`, `[3]` or `[*]` (every element) segments
// into that step's result `{"status", "headers", "body", "state", "error"}`. A string that is
// exactly one reference takes the referenced JSON value as it is; inside a longer string the
// value is written as text (arrays joined with ","), percent-encoded when it lands in `url` or
// `path`.

import Foundation

public struct ChainReference: Sendable, Equatable, CustomStringConvertible {
    public enum Segment: Sendable, Equatable {
        case member(String)
        case index(Int)
        case every
    }

    public let root: String
    public let segments: [Segment]
    public let text: String

    public var description: String { text }

    /// Parses `user.body.items[0].id` (without the braces).
    public init?(parsing text: String) {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        var index = trimmed.startIndex
        func name() -> String {
            let start = index
            while index < trimmed.endIndex,
                trimmed[index].isLetter || trimmed[index].isNumber || trimmed[index] == "_" || trimmed[index] == "-"
            {
                index = trimmed.index(after: index)
            }
            return String(trimmed[start..<index])
        }
        let root = name()
        guard !root.isEmpty else { return nil }
        var segments: [Segment] = []
        while index < trimmed.endIndex {
            if trimmed[index] == "." {
                index = trimmed.index(after: index)
                let member = name()
                guard !member.isEmpty else { return nil }
                segments.append(.member(member))
            } else if trimmed[index] == "[" {
                guard let close = trimmed[index...].firstIndex(of: "]") else { return nil }
                let inner = trimmed[trimmed.index(after: index)..<close]
                if inner == "*" {
                    segments.append(.every)
                } else if let number = Int(inner), number >= 0 {
                    segments.append(.index(number))
                } else {
                    return nil
                }
                index = trimmed.index(after: close)
            } else {
                return nil
            }
        }
        self.root = root
        self.segments = segments
        self.text = trimmed
    }

    /// The value at this path in `documents` (step results by id, and `input`); nil when any
    /// part is missing. `[*]` maps the rest of the path over every element.
    public func resolve(in documents: [String: JSONValue]) -> JSONValue? {
        guard let start = documents[root] else { return nil }
        return Self.walk(start, segments[...])
    }

    private static func walk(_ value: JSONValue, _ rest: ArraySlice<Segment>) -> JSONValue? {
        guard let segment = rest.first else { return value }
        switch (segment, value) {
        case (.member(let name), .object(let members)):
            return members[name].flatMap { walk($0, rest.dropFirst()) }
        case (.index(let index), .array(let elements)):
            return index < elements.count ? walk(elements[index], rest.dropFirst()) : nil
        case (.every, .array(let elements)):
            var mapped: [JSONValue] = []
            for element in elements {
                guard let value = walk(element, rest.dropFirst()) else { return nil }
                mapped.append(value)
            }
            return .array(mapped)
        default:
            return nil
        }
    }
}

/// A step's `when`: a comparison, or `all` / `any` / `not` of conditions.
public indirect enum ChainCondition: Sendable, Equatable {
    case compare(ChainReference, Operator, JSONValue?)
    case all([ChainCondition])
    case any([ChainCondition])
    case not(ChainCondition)

    public enum Operator: String, Sendable, CaseIterable {
        case eq, ne, gt, ge, lt, le, exists, `in`, matches
    }

    /// The references the condition reads.
    var references: [ChainReference] {
        switch self {
        case .compare(let reference, _, _): [reference]
        case .all(let conditions), .any(let conditions): conditions.flatMap(\.references)
        case .not(let condition): condition.references
        }
    }

    /// The step ids the condition reads.
    var roots: [String] { references.map(\.root) }

    public func holds(in documents: [String: JSONValue]) -> Bool {
        switch self {
        case .all(let conditions): return conditions.allSatisfy { $0.holds(in: documents) }
        case .any(let conditions): return conditions.contains { $0.holds(in: documents) }
        case .not(let condition): return !condition.holds(in: documents)
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
                guard case .string(let text)? = actual, case .string(let pattern)? = expected,
                    let regex = try? Regex(pattern)
                else { return false }
                return (try? regex.firstMatch(in: text)) != nil
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

public struct ChainStep: Sendable {
    public let id: String
    /// The request spec, with references still in it.
    public let request: JSONValue
    public let when: ChainCondition?
    /// Steps this one waits for: those it references (request and condition) and `dependsOn`.
    public let dependencies: Set<String>
    public let continueOnError: Bool
}

public struct ChainPlan: Sendable {
    public var steps: [ChainStep]
    public var input: JSONValue
    public var output: JSONValue?
    public var timeoutMs: Int
    /// Only `ok`, `output` and failures in the answer.
    public var outputOnly: Bool
    /// For each step id, the members of its result that something reads (`body`, `headers`…):
    /// a result is only parsed as far as it is read.
    public var readMembers: [String: Set<String>] = [:]

    public static let defaultTimeoutMs = 30_000

    // MARK: Parsing

    public static func parse(json bytes: [UInt8], maxSteps: Int) throws(LarderError) -> ChainPlan {
        let fields = try JSONFields.body(bytes, known: ["steps", "input", "output", "timeoutMs", "include"])
        guard let rawSteps = try fields.array("steps") else { throw .invalid("steps", "is required") }
        guard !rawSteps.isEmpty else { throw .invalid("steps", "must hold at least one step") }
        guard rawSteps.count <= maxSteps else { throw .invalid("steps", "at most \(maxSteps) steps per chain") }
        let timeout = try fields.integer("timeoutMs").map { Int(clamping: $0) } ?? defaultTimeoutMs
        guard (1...FetchRequest.maxTimeoutMs).contains(timeout) else {
            throw .invalid("timeoutMs", "must be between 1 and \(FetchRequest.maxTimeoutMs)")
        }
        var outputOnly = false
        if let include = try fields.string("include") {
            guard include == "output" || include == "all" else { throw .invalid("include", "'\(include)' is not one of output, all") }
            outputOnly = include == "output"
        }

        var ids: [String] = []
        var parsed: [(id: String, request: JSONValue, when: ChainCondition?, dependsOn: [String], continueOnError: Bool, path: String)] = []
        for (index, raw) in rawSteps.enumerated() {
            let path = "steps[\(index)]"
            let step = try JSONFields(raw, path: path)
            try step.rejectUnknown(["id", "request", "when", "dependsOn", "continueOnError"])
            guard let id = try step.string("id") else { throw .invalid(step.path("id"), "is required") }
            guard !id.isEmpty, id.utf8.count <= 64, id != "input",
                id.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_" || $0 == "-") })
            else {
                throw .invalid(step.path("id"), "must be 1–64 letters, digits, '_' or '-', and not 'input'")
            }
            guard !ids.contains(id) else { throw .invalid(step.path("id"), "'\(id)' is used by two steps") }
            ids.append(id)
            guard let request = step.value("request") else { throw .invalid(step.path("request"), "is required") }
            try Self.checkShape(request, path: step.path("request"))
            let when = try step.typed("when").map { value throws(LarderError) in try Self.condition(value, path: step.path("when")) }
            let dependsOn = try step.strings("dependsOn") ?? []
            parsed.append((id, request, when, dependsOn, try step.bool("continueOnError") ?? false, path))
        }

        var steps: [ChainStep] = []
        var everyReference: [ChainReference] = []
        for entry in parsed {
            var dependencies = Set(entry.dependsOn)
            var references: [ChainReference] = []
            try Self.references(in: entry.request, path: "\(entry.path).request", into: &references)
            everyReference += references + (entry.when?.references ?? [])
            for reference in references where reference.root != "input" { dependencies.insert(reference.root) }
            for root in entry.when?.roots ?? [] where root != "input" { dependencies.insert(root) }
            for dependency in dependencies.sorted() where !ids.contains(dependency) {
                throw .invalid("\(entry.path)", "refers to '\(dependency)', which is not a step of this chain")
            }
            steps.append(
                ChainStep(
                    id: entry.id, request: entry.request, when: entry.when, dependencies: dependencies,
                    continueOnError: entry.continueOnError))
        }
        if let cycle = Self.cycle(in: steps) {
            throw .invalid("steps", "the steps \(cycle.joined(separator: " → ")) depend on each other in a cycle")
        }
        var outputReferences: [ChainReference] = []
        let output = fields.value("output")
        if let output { try Self.references(in: output, path: "output", into: &outputReferences) }
        for reference in outputReferences where reference.root != "input" && !ids.contains(reference.root) {
            throw .invalid("output", "refers to '\(reference.root)', which is not a step of this chain")
        }
        var plan = ChainPlan(
            steps: steps, input: fields.value("input") ?? .object([:]), output: output, timeoutMs: timeout,
            outputOnly: outputOnly)
        for reference in everyReference + outputReferences {
            if case .member(let name)? = reference.segments.first {
                plan.readMembers[reference.root, default: []].insert(name)
            } else {
                plan.readMembers[reference.root, default: []].formUnion(["status", "headers", "body", "state", "error"])
            }
        }
        return plan
    }

    /// The request's members are checked now (an unknown field is an error before anything
    /// runs); values are checked when the step runs, after its references are resolved.
    private static func checkShape(_ request: JSONValue, path: String) throws(LarderError) {
        let fields = try JSONFields(request, path: path)
        try fields.rejectUnknown(FetchRequest.knownFields)
        if case .object? = fields.value("cache") { try fields.object("cache")?.rejectUnknown(FetchRequest.knownCacheFields) }
    }

    private static func condition(_ value: JSONValue, path: String) throws(LarderError) -> ChainCondition {
        let fields = try JSONFields(value, path: path)
        for combinator in ["all", "any"] {
            guard let list = try fields.array(combinator) else { continue }
            try fields.rejectUnknown([combinator])
            var conditions: [ChainCondition] = []
            for (index, item) in list.enumerated() {
                conditions.append(try condition(item, path: "\(fields.path(combinator))[\(index)]"))
            }
            return combinator == "all" ? .all(conditions) : .any(conditions)
        }
        if let inner = try fields.typed("not") {
            try fields.rejectUnknown(["not"])
            return .not(try condition(inner, path: fields.path("not")))
        }
        try fields.rejectUnknown(["path", "op", "value"])
        guard let rawPath = try fields.string("path") else { throw .invalid(fields.path("path"), "is required") }
        guard let reference = ChainReference(parsing: rawPath) else {
            throw .invalid(fields.path("path"), "'\(rawPath)' is not a reference path")
        }
        guard let rawOp = try fields.string("op") else { throw .invalid(fields.path("op"), "is required") }
        guard let op = ChainCondition.Operator(rawValue: rawOp) else {
            throw .invalid(
                fields.path("op"), "'\(rawOp)' is not one of \(ChainCondition.Operator.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        let expected = fields.members["value"]
        if op != .exists, expected == nil { throw .invalid(fields.path("value"), "is required for '\(rawOp)'") }
        if op == .in, !(expected.map { if case .array = $0 { true } else { false } } ?? false) {
            throw .invalid(fields.path("value"), "must be an array for 'in'")
        }
        if op == .matches {
            var valid = false
            if case .string(let pattern)? = expected { valid = (try? Regex(pattern)) != nil }
            guard valid else { throw .invalid(fields.path("value"), "must be a valid regular expression for 'matches'") }
        }
        return .compare(reference, op, expected)
    }

    /// Every `{{…}}` in the strings of `value`.
    static func references(in value: JSONValue, path: String, into found: inout [ChainReference]) throws(LarderError) {
        switch value {
        case .string(let text):
            for piece in Template.pieces(text) {
                if case .reference(let raw) = piece {
                    guard let reference = ChainReference(parsing: raw) else { throw .invalid(path, "'{{\(raw)}}' is not a reference") }
                    found.append(reference)
                }
            }
        case .array(let elements):
            for (index, element) in elements.enumerated() { try references(in: element, path: "\(path)[\(index)]", into: &found) }
        case .object(let members):
            for (key, member) in members { try references(in: member, path: "\(path).\(key)", into: &found) }
        default:
            break
        }
    }

    /// A cycle among the steps' dependencies, as the ids along it; nil when there is none.
    static func cycle(in steps: [ChainStep]) -> [String]? {
        let byID = Dictionary(uniqueKeysWithValues: steps.map { ($0.id, $0) })
        var state: [String: Int] = [:] // 1 visiting, 2 done
        var stack: [String] = []
        func visit(_ id: String) -> [String]? {
            if state[id] == 2 { return nil }
            if state[id] == 1 {
                let start = stack.firstIndex(of: id) ?? 0
                return Array(stack[start...]) + [id]
            }
            state[id] = 1
            stack.append(id)
            for dependency in (byID[id]?.dependencies ?? []).sorted() {
                if let cycle = visit(dependency) { return cycle }
            }
            stack.removeLast()
            state[id] = 2
            return nil
        }
        for step in steps {
            if let cycle = visit(step.id) { return cycle }
        }
        return nil
    }
}

/// Rendering strings with `{{…}}` references.
public enum Template {
    enum Piece: Equatable {
        case text(String)
        case reference(String)
    }

    static func pieces(_ text: String) -> [Piece] {
        guard text.contains("{{") else { return [.text(text)] }
        var pieces: [Piece] = []
        var rest = text[...]
        while let open = rest.range(of: "{{") {
            guard let close = rest[open.upperBound...].range(of: "}}") else { break }
            if open.lowerBound > rest.startIndex { pieces.append(.text(String(rest[..<open.lowerBound]))) }
            pieces.append(.reference(String(rest[open.upperBound..<close.lowerBound])))
            rest = rest[close.upperBound...]
        }
        if !rest.isEmpty { pieces.append(.text(String(rest))) }
        return pieces
    }

    public struct Unresolved: Error, Sendable {
        public let reference: String
        /// What is wrong with it, after the reference in braces.
        public var reason = "does not resolve"
    }

    /// Bytes one rendering may write in all. A template of 1 MiB can name a large body tens of
    /// thousands of times; the rendering stops as it passes the budget instead of building
    /// gigabytes first. Owned by one rendering (one thread).
    public final class Budget {
        public let limit: Int
        private(set) var remaining: Int
        public init(bytes: Int) {
            limit = bytes
            remaining = bytes
        }

        func spend(_ bytes: Int, on reference: String) throws(Unresolved) {
            remaining -= bytes
            guard remaining >= 0 else {
                throw Unresolved(reference: reference, reason: "makes the rendering grow past \(limit) bytes")
            }
        }
    }

    /// Renders `value` with references resolved in `documents`. `encodeIn` names the members
    /// (at the top level) whose strings are URL parts: values written into them as text are
    /// percent-encoded. `textIn` names the members whose values are strings whatever a
    /// reference holds (query and header values: a number there is written as text).
    /// `lenient`: an unresolved reference becomes null (or "" inside text) instead of an error —
    /// for `output`, where a skipped step simply has no value.
    public static func render(
        _ value: JSONValue, documents: [String: JSONValue], encodeIn: Set<String> = [],
        textIn: Set<String> = [], lenient: Bool = false, encoding: Bool = false,
        asText: Bool = false, budget: Budget? = nil
    ) throws(Unresolved) -> JSONValue {
        switch value {
        case .string(let text):
            let pieces = Self.pieces(text)
            if pieces.count == 1, case .reference(let raw) = pieces[0] {
                guard let reference = ChainReference(parsing: raw), let resolved = reference.resolve(in: documents) else {
                    if lenient { return .null }
                    throw Unresolved(reference: raw.trimmingCharacters(in: .whitespaces))
                }
                // The whole value: kept as it is (a URL taken from a response stays a URL), as
                // text where only text is allowed.
                let whole = asText || encoding ? .string(Self.text(resolved)) : resolved
                if let budget {
                    let size = if case .string(let string) = whole { string.utf8.count } else { whole.canonicalBytes.count }
                    try budget.spend(size, on: raw.trimmingCharacters(in: .whitespaces))
                }
                return whole
            }
            var out = ""
            var written: [(bytes: Range<Int>, reference: String)] = []
            for piece in pieces {
                switch piece {
                case .text(let literal):
                    out += literal
                case .reference(let raw):
                    guard let reference = ChainReference(parsing: raw), let resolved = reference.resolve(in: documents) else {
                        if lenient { continue }
                        throw Unresolved(reference: raw.trimmingCharacters(in: .whitespaces))
                    }
                    let rendered = Self.text(resolved)
                    try budget?.spend(rendered.utf8.count, on: raw.trimmingCharacters(in: .whitespaces))
                    // In the path only: past `?` or `#` a value is no path segment.
                    if encoding, !out.utf8.contains(where: { $0 == UInt8(ascii: "?") || $0 == UInt8(ascii: "#") }),
                        Self.climbsOnceDecoded(rendered)
                    {
                        throw Unresolved(
                            reference: raw.trimmingCharacters(in: .whitespaces),
                            reason: "holds a '.' or '..' path segment, which would leave its place in the path")
                    }
                    let start = out.utf8.count
                    out += encoding ? Self.percentEncode(rendered) : rendered
                    if encoding { written.append((start..<out.utf8.count, raw.trimmingCharacters(in: .whitespaces))) }
                }
            }
            if let climbing = Self.dotSegment(in: out, writtenBy: written) {
                throw Unresolved(reference: climbing, reason: "makes a path segment '.' or '..', which would leave its place in the path")
            }
            return .string(out)
        case .array(let elements):
            var rendered: [JSONValue] = []
            for element in elements {
                rendered.append(
                    try render(
                        element, documents: documents, lenient: lenient, encoding: encoding, asText: asText,
                        budget: budget))
            }
            return .array(rendered)
        case .object(let members):
            var rendered: [String: JSONValue] = [:]
            for (key, member) in members {
                rendered[key] = try render(
                    member, documents: documents, lenient: lenient, encoding: encoding || encodeIn.contains(key),
                    asText: asText || textIn.contains(key), budget: budget)
            }
            return .object(rendered)
        default:
            return value
        }
    }

    /// The reference whose value makes a whole path segment `.` or `..` in the URL part `text`
    /// (`/users/{{id}}/orders` with an id of `..` would reach `/orders`: RFC 3986 §5.2.4 removes
    /// dot segments, and libcurl does before sending). Encoding the dots is no cure: `%2E%2E` is
    /// a dot segment again for origins that decode before they normalise (WHATWG URL, nginx).
    /// Values cannot write `/`, `?` or `#` (they are percent-encoded), so segments and the end of
    /// the path are the template's own — for origins that do not decode `%2F` into `/`; for those
    /// that do, `climbsOnceDecoded` refuses the value itself.
    /// Whether a value holding `/` or `\\` has a `.` or `..` part between them: percent-encoded it
    /// stays in its segment for most origins, but one that decodes `%2F` (or, like IIS, `%5C`)
    /// before it normalises reads `..%2Fadmin` as `../admin`.
    static func climbsOnceDecoded(_ value: String) -> Bool {
        guard value.utf8.contains(where: { $0 == UInt8(ascii: "/") || $0 == UInt8(ascii: "\\") }) else { return false }
        return value.split(omittingEmptySubsequences: false, whereSeparator: { $0 == "/" || $0 == "\\" })
            .contains { $0 == "." || $0 == ".." }
    }

    static func dotSegment(in text: String, writtenBy written: [(bytes: Range<Int>, reference: String)]) -> String? {
        guard !written.isEmpty else { return nil }
        var segmentStart = 0
        var offset = 0
        func check(_ segment: Range<Int>, dots: Int) -> String? {
            guard dots == segment.count, dots == 1 || dots == 2 else { return nil }
            return written.first { $0.bytes.overlaps(segment) }?.reference
        }
        var dots = 0
        for byte in text.utf8 {
            if byte == UInt8(ascii: "?") || byte == UInt8(ascii: "#") { break }
            if byte == UInt8(ascii: "/") {
                if let found = check(segmentStart..<offset, dots: dots) { return found }
                segmentStart = offset + 1
                dots = 0
            } else if byte == UInt8(ascii: ".") {
                dots += 1
            }
            offset += 1
        }
        return check(segmentStart..<offset, dots: dots)
    }

    /// A value written into text: strings as they are, arrays joined with ",", objects as JSON.
    static func text(_ value: JSONValue) -> String {
        switch value {
        case .string(let text): text
        case .null: "null"
        case .array(let elements): elements.map(text).joined(separator: ",")
        default: String(decoding: value.canonicalBytes, as: UTF8.self)
        }
    }

    private static let unreserved = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~".utf8)

    static func percentEncode(_ text: String) -> String {
        var out = ""
        for byte in text.utf8 {
            if unreserved.contains(byte) {
                out.unicodeScalars.append(Unicode.Scalar(byte))
            } else {
                out += "%" + (byte < 16 ? "0" : "") + String(byte, radix: 16, uppercase: true)
            }
        }
        return out
    }
}
