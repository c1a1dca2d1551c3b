// POST /chain: steps that depend on earlier steps' results (YTKNetwork's chain requests, Graph
// batching's dependsOn, OData's `if`). The pure part is in four files: this one parses and checks
// the chain (steps, their dependencies, cycles, what each result must provide);
// ChainReference.swift holds the `{{root.path}}` references between steps, ChainCondition.swift
// the `when` conditions, ChainTemplate.swift the rendering of a step's request or the output from
// the results so far. The engine's ChainRun runs it.

import Foundation

public struct ChainStep: Sendable {
    public let id: String
    /// The request spec, with references still in it.
    public let request: JSONValue
    public let when: ChainCondition?
    /// Steps this one waits for: those it references (request and condition) and `dependsOn`.
    public let dependencies: Set<String>
    /// The steps (and `input`) whose results this one's request or condition reads: what must
    /// be kept until this step has started or been skipped.
    public let reads: Set<String>
    public let continueOnError: Bool
}

public struct ChainPlan: Sendable {
    public var steps: [ChainStep]
    public var input: JSONValue
    public var output: JSONValue?
    public var timeoutMs: Int
    /// Only `ok`, `output` and failures in the answer.
    public var outputOnly: Bool
    /// For each step id (and `input`), the paths into its result that something reads, as
    /// segments after the root (empty: the whole result). A result is parsed only as far as its
    /// members are read, and kept only as far as its paths reach (ChainReference.pruned).
    public var readPaths: [String: [[ChainReference.Segment]]] = [:]
    /// The steps whose results `output` reads: kept until the chain ends.
    public var outputReads: Set<String> = []
    /// Whether a condition searches a pattern: such a plan holds compiled programs, and is not
    /// remembered by its bytes.
    public var hasPatterns: Bool { steps.contains { $0.when?.hasPatterns ?? false } }

    /// For each step id, the members of its result that something reads (`body`, `headers`…).
    public var readMembers: [String: Set<String>] {
        readPaths.mapValues { paths in
            var members: Set<String> = []
            for path in paths {
                guard case .member(let name)? = path.first else { return ["status", "headers", "body", "state", "error"] }
                members.insert(name)
            }
            return members
        }
    }

    public static let defaultTimeoutMs = 30_000

    // MARK: Parsing

    /// `patterns` compiles the `matches` conditions, once, here.
    public static func parse(json bytes: [UInt8], maxSteps: Int, patterns: any TextPatternCompiler) throws(LarderError) -> ChainPlan {
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
        var conditions = ConditionParser(patterns: patterns)
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
            let when = try step.typed("when").map { value throws(LarderError) in try conditions.condition(value, path: step.path("when")) }
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
            let reads = Set(references.map(\.root) + (entry.when?.roots ?? []))
            for dependency in dependencies.sorted() where !ids.contains(dependency) {
                throw .invalid("\(entry.path)", "refers to '\(dependency)', which is not a step of this chain")
            }
            steps.append(
                ChainStep(
                    id: entry.id, request: entry.request, when: entry.when, dependencies: dependencies, reads: reads,
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
            plan.readPaths[reference.root, default: []].append(reference.segments)
        }
        plan.outputReads = Set(outputReferences.map(\.root))
        return plan
    }

    /// The request's members are checked now (an unknown field is an error before anything
    /// runs); values are checked when the step runs, after its references are resolved.
    private static func checkShape(_ request: JSONValue, path: String) throws(LarderError) {
        let fields = try JSONFields(request, path: path)
        try fields.rejectUnknown(FetchRequest.knownFields)
        if case .object? = fields.value("cache") { try fields.object("cache")?.rejectUnknown(FetchRequest.knownCacheFields) }
    }

    /// Parses `when` conditions, compiling their patterns within the chain's pattern budget.
    private struct ConditionParser {
        let patterns: any TextPatternCompiler
        var patternCount = 0
        var programSize = 0
        var propertyClasses = 0

        mutating func condition(_ value: JSONValue, path: String) throws(LarderError) -> ChainCondition {
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
                let known = ChainCondition.Operator.allCases.map(\.rawValue).joined(separator: ", ")
                throw .invalid(fields.path("op"), "'\(rawOp)' is not one of \(known)")
            }
            let expected = fields.members["value"]
            if op != .exists, expected == nil { throw .invalid(fields.path("value"), "is required for '\(rawOp)'") }
            if op == .in, !(expected.map { if case .array = $0 { true } else { false } } ?? false) {
                throw .invalid(fields.path("value"), "must be an array for 'in'")
            }
            if op == .matches {
                guard case .string(let source)? = expected else {
                    throw .invalid(fields.path("value"), "must be a string (an RE2 pattern) for 'matches'")
                }
                return .matches(reference, try pattern(source, path: fields.path("value")))
            }
            return .compare(reference, op, expected)
        }

        private mutating func pattern(_ source: String, path: String) throws(LarderError) -> ChainPattern {
            let bytes = source.utf8.count
            guard bytes <= ChainPattern.maxSourceBytes else {
                throw .invalid(path, "a pattern may be at most \(ChainPattern.maxSourceBytes) bytes")
            }
            patternCount += 1
            guard patternCount <= ChainPattern.maxPerChain else {
                throw .invalid(path, "a chain may hold at most \(ChainPattern.maxPerChain) patterns")
            }
            propertyClasses += ChainPattern.propertyClasses(in: source)
            guard propertyClasses <= ChainPattern.maxPropertyClassesPerChain else {
                let limit = ChainPattern.maxPropertyClassesPerChain
                throw .invalid(path, "a chain's patterns may hold at most \(limit) Unicode property classes (\\p, \\P) in all")
            }
            let compiled: any TextPattern
            do {
                compiled = try patterns.compile(source)
            } catch {
                throw .invalid(path, "is not a valid RE2 pattern: \(error.reason)")
            }
            programSize += compiled.programSize
            guard programSize <= ChainPattern.maxProgramSizePerChain else {
                let limit = ChainPattern.maxProgramSizePerChain
                throw .invalid(path, "the chain's patterns compile to more than \(limit) instructions in all")
            }
            return ChainPattern(source: source, compiled: compiled)
        }
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
