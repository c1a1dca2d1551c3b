// The pure part of POST /chain without a server: references between steps and what they read,
// conditions, the plan a chain parses into (dependencies, order, cycles, what each result must
// provide, and the errors that refuse a chain before anything runs), and rendering a request
// from the results so far.

import LarderCore
import LarderRE2
import XCTest

/// Parses a JSON text written in a test.
private func json(_ text: String) throws -> JSONValue { try JSONParser.parse(Array(text.utf8)) }

final class ChainReferenceTests: XCTestCase {
    func testAPathParsesIntoItsRootAndSegments() throws {
        let reference = try XCTUnwrap(ChainReference(parsing: " user.body.items[0].id "))
        XCTAssertEqual(reference.root, "user")
        XCTAssertEqual(reference.segments, [.member("body"), .member("items"), .index(0), .member("id")])
        XCTAssertEqual(reference.text, "user.body.items[0].id", "spaces around the path are no part of it")
        XCTAssertEqual(ChainReference(parsing: "a[*].b")?.segments, [.every, .member("b")])
        XCTAssertEqual(ChainReference(parsing: "step_1-x")?.segments, [], "a whole result")
    }

    func testMalformedPathsAreNoReference() {
        for text in ["", ".a", "a.", "a..b", "a[", "a[-1]", "a[x]", "a[]", "a b", "a.b c", "a/b", "[0]"] {
            XCTAssertNil(ChainReference(parsing: text), text)
        }
    }

    func testResolvingWalksMembersIndexesAndEveryElement() throws {
        let documents: [String: JSONValue] = [
            "a": try json(#"{"body":{"items":[{"id":1},{"id":2}],"name":"x"}}"#),
            "input": try json(#"{"v":[10,20]}"#)
        ]
        func resolve(_ path: String) -> JSONValue? { ChainReference(parsing: path)?.resolve(in: documents) }
        XCTAssertEqual(resolve("a.body.name"), .string("x"))
        XCTAssertEqual(resolve("a.body.items[1].id"), .number(2))
        XCTAssertEqual(resolve("a.body.items[*].id"), .array([.number(1), .number(2)]))
        XCTAssertEqual(resolve("input.v[0]"), .number(10))
        XCTAssertEqual(resolve("input"), documents["input"])
        XCTAssertNil(resolve("a.body.items[2]"), "past the end")
        XCTAssertNil(resolve("a.body.missing"))
        XCTAssertNil(resolve("a.body.items.id"), "a member of an array")
        XCTAssertNil(resolve("a.body[0]"), "an index into an object")
        XCTAssertNil(resolve("a.body.items[*].name"), "every element must have the rest of the path")
        XCTAssertNil(resolve("b.body"), "no such step")
    }
}

final class ChainConditionTests: XCTestCase {
    private let documents: [String: JSONValue] = [
        "a": .object([
            "status": .number(200), "body": .object(["name": .string("beta"), "none": .null, "tags": .array([.string("x")])])
        ])
    ]

    /// The condition of a one-step chain whose `when` is `condition` (JSON).
    private func condition(_ condition: String) throws -> ChainCondition {
        let plan = try ChainPlan.parse(
            json: Array(#"{"steps":[{"id":"a","request":{"url":"http://o/"}},{"id":"b","request":{},"when":\#(condition)}]}"#.utf8),
            maxSteps: 10, patterns: RE2Compiler())
        return try XCTUnwrap(plan.steps[1].when)
    }

    private func holds(_ text: String) throws -> Bool {
        try condition(text).holds(in: documents)
    }

    func testComparisons() throws {
        XCTAssertTrue(try holds(#"{"path":"a.status","op":"eq","value":200}"#))
        XCTAssertTrue(try holds(#"{"path":"a.status","op":"eq","value":200.0}"#), "numbers compare as numbers")
        XCTAssertFalse(try holds(#"{"path":"a.status","op":"eq","value":"200"}"#), "a string is no number")
        XCTAssertTrue(try holds(#"{"path":"a.status","op":"ne","value":404}"#))
        XCTAssertTrue(try holds(#"{"path":"a.missing","op":"ne","value":1}"#), "a missing value differs from any")
        XCTAssertTrue(try holds(#"{"path":"a.status","op":"ge","value":200}"#))
        XCTAssertFalse(try holds(#"{"path":"a.status","op":"gt","value":200}"#))
        XCTAssertTrue(try holds(#"{"path":"a.status","op":"lt","value":300}"#))
        XCTAssertTrue(try holds(#"{"path":"a.body.name","op":"gt","value":"alpha"}"#), "strings by their bytes")
        XCTAssertFalse(try holds(#"{"path":"a.body.name","op":"le","value":1}"#), "a string and a number have no order")
        XCTAssertFalse(try holds(#"{"path":"a.missing","op":"lt","value":1}"#))
        XCTAssertTrue(try holds(#"{"path":"a.status","op":"in","value":[200,204]}"#))
        XCTAssertFalse(try holds(#"{"path":"a.status","op":"in","value":[404]}"#))
        XCTAssertTrue(try holds(#"{"path":"a.body.name","op":"matches","value":"^b.t"}"#))
        XCTAssertFalse(try holds(#"{"path":"a.status","op":"matches","value":"200"}"#), "only strings match")
    }

    func testExistsIsFalseForMissingAndNull() throws {
        XCTAssertTrue(try holds(#"{"path":"a.body.tags[0]","op":"exists"}"#))
        XCTAssertFalse(try holds(#"{"path":"a.body.none","op":"exists"}"#))
        XCTAssertFalse(try holds(#"{"path":"a.body.tags[1]","op":"exists"}"#))
    }

    func testAllAnyAndNotCombine() throws {
        let yes = #"{"path":"a.status","op":"eq","value":200}"#
        let no = #"{"path":"a.status","op":"eq","value":500}"#
        XCTAssertTrue(try holds(#"{"all":[\#(yes),\#(yes)]}"#))
        XCTAssertFalse(try holds(#"{"all":[\#(yes),\#(no)]}"#))
        XCTAssertTrue(try holds(#"{"any":[\#(no),\#(yes)]}"#))
        XCTAssertFalse(try holds(#"{"any":[\#(no)]}"#))
        XCTAssertTrue(try holds(#"{"not":\#(no)}"#))
        XCTAssertTrue(try holds(#"{"all":[]}"#), "nothing to fail")
        XCTAssertFalse(try holds(#"{"any":[]}"#), "nothing to hold")
    }

    func testMalformedConditionsAreRefusedWithTheirField() {
        let cases: [(String, String)] = [
            (#"{"op":"eq","value":1}"#, "steps[1].when.path"),
            (#"{"path":"a..b","op":"eq","value":1}"#, "steps[1].when.path"),
            (#"{"path":"a.status","value":1}"#, "steps[1].when.op"),
            (#"{"path":"a.status","op":"equals","value":1}"#, "steps[1].when.op"),
            (#"{"path":"a.status","op":"eq"}"#, "steps[1].when.value"),
            (#"{"path":"a.status","op":"in","value":200}"#, "steps[1].when.value"),
            (#"{"path":"a.status","op":"matches","value":"("}"#, "steps[1].when.value"),
            (#"{"path":"a.status","op":"exists","extra":1}"#, "steps[1].when.extra"),
            (#"{"all":[{"path":"a.status"}]}"#, "steps[1].when.all[0].op"),
            (#"{"not":{"path":"a.status","op":"eq"}}"#, "steps[1].when.not.value"),
            (#"{"any":[],"not":{}}"#, "steps[1].when.not")
        ]
        for (text, field) in cases {
            XCTAssertThrowsError(try condition(text), text) { error in
                XCTAssertEqual((error as? LarderError)?.field, field, text)
            }
        }
    }
}

final class ChainPlanTests: XCTestCase {
    private func parse(_ text: String, maxSteps: Int = 10) throws(LarderError) -> ChainPlan {
        try ChainPlan.parse(json: Array(text.utf8), maxSteps: maxSteps, patterns: RE2Compiler())
    }

    /// The field and message of the error that refuses `text`.
    private func refusal(_ text: String, maxSteps: Int = 10) -> (field: String?, message: String)? {
        do {
            _ = try parse(text, maxSteps: maxSteps)
            return nil
        } catch {
            return (error.field, error.message)
        }
    }

    func testDependenciesComeFromReferencesConditionsAndDependsOn() throws {
        let plan = try parse(
            #"""
            {"steps":[
              {"id":"c","request":{"url":"http://o/{{b.body.id}}?q={{input.q}}"},"when":{"path":"a.status","op":"eq","value":200}},
              {"id":"a","request":{"url":"http://o/a","headers":{"X":"{{input.token}}"}}},
              {"id":"b","request":{"url":"http://o/b","body":{"ids":["{{a.body.ids}}"]}},"dependsOn":["a"]},
              {"id":"d","request":{"url":"http://o/d"},"dependsOn":["a"],"continueOnError":true}
            ],"input":{"q":"x"}}
            """#)
        XCTAssertEqual(plan.steps.map(\.id), ["c", "a", "b", "d"], "the steps keep the order they were given in")
        XCTAssertEqual(plan.steps[0].dependencies, ["a", "b"], "a reference in the request and one in the condition")
        XCTAssertEqual(plan.steps[1].dependencies, [], "input is no step")
        XCTAssertEqual(plan.steps[2].dependencies, ["a"], "dependsOn and a reference to the same step count once")
        XCTAssertEqual(plan.steps[3].dependencies, ["a"])
        XCTAssertEqual(plan.steps.map(\.continueOnError), [false, false, false, true])
        XCTAssertEqual(plan.input, .object(["q": .string("x")]))
        XCTAssertNil(plan.output)
        XCTAssertEqual(plan.timeoutMs, ChainPlan.defaultTimeoutMs)
        XCTAssertFalse(plan.outputOnly)
    }

    func testEachResultIsReadOnlyAsFarAsSomethingNeedsIt() throws {
        let plan = try parse(
            #"""
            {"steps":[
              {"id":"a","request":{"url":"http://o/a"}},
              {"id":"b","request":{"url":"http://o/{{a.body.id}}"},"when":{"path":"a.status","op":"exists"}},
              {"id":"c","request":{"url":"http://o/c","body":"{{b}}"}},
              {"id":"d","request":{"url":"http://o/d"}}
            ],"output":{"h":"{{c.headers.etag}}","i":"{{input.x}}"}}
            """#)
        XCTAssertEqual(plan.readMembers["a"], ["body", "status"])
        XCTAssertEqual(plan.readMembers["b"], ["status", "headers", "body", "state", "error"], "a whole result is read whole")
        XCTAssertEqual(plan.readMembers["c"], ["headers"], "the output reads too")
        XCTAssertNil(plan.readMembers["d"], "nothing reads d")
        XCTAssertEqual(plan.readMembers["input"], ["x"])
    }

    func testReferencesToStepsThatAreNotInTheChainAreRefused() {
        let unknown = refusal(#"{"steps":[{"id":"a","request":{"url":"http://o/{{zzz.body}}"}}]}"#)
        XCTAssertEqual(unknown?.field, "steps[0]")
        XCTAssertTrue(unknown?.message.contains("'zzz'") == true, unknown?.message ?? "")
        XCTAssertEqual(refusal(#"{"steps":[{"id":"a","request":{},"dependsOn":["b"]}]}"#)?.field, "steps[0]")
        XCTAssertEqual(
            refusal(#"{"steps":[{"id":"a","request":{},"when":{"path":"b.status","op":"exists"}}]}"#)?.field, "steps[0]")
        XCTAssertEqual(refusal(#"{"steps":[{"id":"a","request":{}}],"output":"{{b.body}}"}"#)?.field, "output")
        XCTAssertEqual(refusal(#"{"steps":[{"id":"a","request":{"url":"{{a.}}"}}]}"#)?.field, "steps[0].request.url")
    }

    func testStepsThatWaitForEachOtherAreRefusedWithTheCycle() {
        let cycle = refusal(
            #"""
            {"steps":[{"id":"a","request":{"url":"{{b.body}}"}},{"id":"b","request":{},"dependsOn":["c"]},
                      {"id":"c","request":{},"dependsOn":["a"]}]}
            """#)
        XCTAssertEqual(cycle?.field, "steps")
        XCTAssertTrue(cycle?.message.contains("a → b → c → a") == true, cycle?.message ?? "")
        let itself = refusal(#"{"steps":[{"id":"a","request":{"url":"{{a.status}}"}}]}"#)
        XCTAssertTrue(itself?.message.contains("a → a") == true, itself?.message ?? "")
        XCTAssertNil(
            refusal(
                #"""
                {"steps":[{"id":"a","request":{}},{"id":"b","request":{},"dependsOn":["a"]},
                          {"id":"c","request":{},"dependsOn":["a","b"]}]}
                """#),
            "a diamond is no cycle")
    }

    func testMalformedChainsAreRefusedWithTheirField() {
        let cases: [(String, String)] = [
            (#"{}"#, "steps"),
            (#"{"steps":[]}"#, "steps"),
            (#"{"steps":[{"id":"a","request":{}}],"bogus":1}"#, "bogus"),
            (#"{"steps":[{"request":{}}]}"#, "steps[0].id"),
            (#"{"steps":[{"id":"input","request":{}}]}"#, "steps[0].id"),
            (#"{"steps":[{"id":"a b","request":{}}]}"#, "steps[0].id"),
            (#"{"steps":[{"id":"\#(String(repeating: "x", count: 65))","request":{}}]}"#, "steps[0].id"),
            (#"{"steps":[{"id":"a","request":{}},{"id":"a","request":{}}]}"#, "steps[1].id"),
            (#"{"steps":[{"id":"a"}]}"#, "steps[0].request"),
            (#"{"steps":[{"id":"a","request":{"uri":"http://o/"}}]}"#, "steps[0].request.uri"),
            (#"{"steps":[{"id":"a","request":{"cache":{"tll":1}}}]}"#, "steps[0].request.cache.tll"),
            (#"{"steps":[{"id":"a","request":{},"after":["b"]}]}"#, "steps[0].after"),
            (#"{"steps":[{"id":"a","request":{}}],"timeoutMs":0}"#, "timeoutMs"),
            (#"{"steps":[{"id":"a","request":{}}],"include":"some"}"#, "include")
        ]
        for (text, field) in cases {
            XCTAssertEqual(refusal(text)?.field, field, text)
        }
        let many = refusal(#"{"steps":[{"id":"a","request":{}},{"id":"b","request":{}},{"id":"c","request":{}}]}"#, maxSteps: 2)
        XCTAssertEqual(many?.field, "steps")
        XCTAssertTrue(many?.message.contains("at most 2") == true, many?.message ?? "")
    }

    func testTimeoutAndInclude() throws {
        let plan = try parse(#"{"steps":[{"id":"a","request":{}}],"timeoutMs":1500,"include":"output","output":"{{a.status}}"}"#)
        XCTAssertEqual(plan.timeoutMs, 1500)
        XCTAssertTrue(plan.outputOnly)
        XCTAssertEqual(plan.output, .string("{{a.status}}"), "the output keeps its references until the chain ends")
        XCTAssertFalse(try parse(#"{"steps":[{"id":"a","request":{}}],"include":"all"}"#).outputOnly)
    }
}

final class ChainTemplateTests: XCTestCase {
    private let documents: [String: JSONValue] = [
        "a": .object(["status": .number(200), "body": .object(["ids": .array([.number(1), .number(2)]), "name": .string("a b")])])
    ]

    func testAWholeReferenceKeepsItsTypeAndTextTakesItsText() throws {
        let request: JSONValue = .object([
            "url": .string("http://o/items/{{a.body.name}}?ids={{a.body.ids}}"),
            "body": .object(["ids": .string("{{a.body.ids}}"), "note": .string("status {{ a.status }}")]),
            "query": .object(["status": .string("{{a.status}}")])
        ])
        let rendered = try Template.render(request, documents: documents, encodeIn: ["url"], textIn: ["query"])
        XCTAssertEqual(
            rendered,
            .object([
                "url": .string("http://o/items/a%20b?ids=1%2C2"),
                "body": .object(["ids": .array([.number(1), .number(2)]), "note": .string("status 200")]),
                "query": .object(["status": .string("200")])
            ]))
    }

    func testAnUnresolvedReferenceIsAnErrorUnlessLenient() throws {
        XCTAssertThrowsError(try Template.render(.string("x{{ a.body.missing }}"), documents: documents)) { error in
            XCTAssertEqual((error as? Template.Unresolved)?.reference, "a.body.missing")
            XCTAssertEqual((error as? Template.Unresolved)?.reason, "does not resolve")
        }
        XCTAssertThrowsError(try Template.render(.string("{{b}}"), documents: documents))
        XCTAssertEqual(try Template.render(.string("{{b}}"), documents: documents, lenient: true), .null)
        XCTAssertEqual(try Template.render(.string("x{{b}}y"), documents: documents, lenient: true), .string("xy"))
    }

    func testTheBudgetStopsARenderingThatGrowsTooLarge() throws {
        let budget = Template.Budget(bytes: 10)
        XCTAssertEqual(try Template.render(.string("{{a.body.name}}"), documents: documents, budget: budget), .string("a b"))
        XCTAssertThrowsError(
            try Template.render(.array(Array(repeating: .string("-{{a.body.name}}-"), count: 4)), documents: documents, budget: budget)
        ) { error in
            XCTAssertEqual((error as? Template.Unresolved)?.reference, "a.body.name")
            XCTAssertTrue((error as? Template.Unresolved)?.reason.contains("past 10 bytes") == true)
        }
    }
}

/// The `matches` patterns (RE2 through LarderRE2) and what a chain keeps of its results.
final class ChainPatternTests: XCTestCase {
    /// A small generator with a seed, so that a failure names a case that comes back.
    private struct SeededGenerator: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state ^= state << 13
            state ^= state >> 7
            state ^= state << 17
            return state
        }
    }

    /// A pattern of RE2's and Swift's common syntax over the letters a, b and c.
    private func randomPattern(_ random: inout SeededGenerator, depth: Int = 0) -> String {
        func atom() -> String {
            switch Int.random(in: 0..<8, using: &random) {
            case 0: return "."
            case 1: return "[ab]"
            case 2: return "[^a]"
            case 3 where depth < 2: return "(" + randomPattern(&random, depth: depth + 1) + ")"
            case 4 where depth < 2:
                return "(?:" + randomPattern(&random, depth: depth + 1) + "|" + randomPattern(&random, depth: depth + 1) + ")"
            default: return ["a", "b", "c"][Int.random(in: 0..<3, using: &random)]
            }
        }
        var pattern = Int.random(in: 0..<4, using: &random) == 0 ? "^" : ""
        for _ in 0..<Int.random(in: 1...4, using: &random) {
            pattern += atom()
            pattern += ["", "", "*", "+", "?", "{1,2}", "{2}"][Int.random(in: 0..<7, using: &random)]
        }
        if Int.random(in: 0..<4, using: &random) == 0 { pattern += "$" }
        return pattern
    }

    /// A property over 3,000 generated patterns and texts: RE2 finds a match exactly where
    /// Swift's backtracking Regex does (on texts short enough for it), so `matches` means what
    /// a regular expression means.
    func testRE2FindsAMatchExactlyWhereABacktrackingEngineDoes() throws {
        var random = SeededGenerator(state: 0x9E37_79B9_7F4A_7C15)
        for _ in 0..<3_000 {
            let source = randomPattern(&random)
            let text = String((0..<Int.random(in: 0...8, using: &random)).map { _ in "abc".randomElement(using: &random)! })
            let pattern = try RE2Compiler().compile(source)
            let expected = try Regex(source).firstMatch(in: text) != nil
            XCTAssertEqual(pattern.isFound(in: text), expected, "/\(source)/ in \"\(text)\"")
        }
    }

    func testATextPastTheBoundNeverMatchesAndAStoppedChainSearchesNothing() throws {
        final class Counting: TextPattern, @unchecked Sendable {
            let programSize = 10
            var searches = 0
            func isFound(in text: String) -> Bool {
                searches += 1
                return true
            }
        }
        let counting = Counting()
        let pattern = ChainPattern(source: "x", compiled: counting)
        var budget = Int.max
        XCTAssertTrue(pattern.isFound(in: String(repeating: "x", count: ChainPattern.maxSubjectBytes), budget: &budget))
        XCTAssertFalse(pattern.isFound(in: String(repeating: "x", count: ChainPattern.maxSubjectBytes + 1), budget: &budget))
        XCTAssertEqual(budget, Int.max - 10 * ChainPattern.maxSubjectBytes, "a search costs program size times bytes")
        let reference = try XCTUnwrap(ChainReference(parsing: "a.body"))
        let condition = ChainCondition.any([.matches(reference, pattern), .matches(reference, pattern)])
        let documents: [String: JSONValue] = ["a": .object(["body": .string("y")])]
        counting.searches = 0
        XCTAssertTrue(condition.holds(in: documents))
        XCTAssertEqual(counting.searches, 1)
        budget = Int.max
        XCTAssertFalse(condition.holds(in: documents, searchBudget: &budget, stopped: { true }))
        XCTAssertEqual(counting.searches, 1, "nothing searched once the chain stopped")
        budget = 9
        XCTAssertFalse(condition.holds(in: documents, searchBudget: &budget), "a search past what is left does not match")
        XCTAssertEqual(counting.searches, 1)
        XCTAssertEqual(budget, 9)
    }

    func testAChainHoldsAtMost16PatternsAndAtMost20000InstructionsOfThem() throws {
        let one = #"{"path":"a.status","op":"matches","value":"\#(String(repeating: "a", count: 100))"}"#
        let conditions = Array(repeating: one, count: 17).joined(separator: ",")
        let text = #"{"steps":[{"id":"a","request":{}},{"id":"b","request":{},"when":{"all":[\#(conditions)]}}]}"#
        XCTAssertThrowsError(try ChainPlan.parse(json: Array(text.utf8), maxSteps: 10, patterns: RE2Compiler())) { error in
            XCTAssertEqual((error as? LarderError)?.field, "steps[1].when.all[16].value")
        }
        // 1,000 characters of `.` compile to about 8,000 instructions: two fit, three do not.
        let wide = #"{"path":"a.status","op":"matches","value":"\#(String(repeating: ".", count: 1000))"}"#
        let three = #"{"steps":[{"id":"a","request":{}},{"id":"b","request":{},"when":{"all":[\#(wide),\#(wide),\#(wide)]}}]}"#
        XCTAssertThrowsError(try ChainPlan.parse(json: Array(three.utf8), maxSteps: 10, patterns: RE2Compiler())) { error in
            XCTAssertEqual((error as? LarderError)?.field, "steps[1].when.all[2].value")
        }
    }

    /// A property over generated documents and reference paths: every path resolves in the
    /// pruned document to what it resolves to in the whole one.
    func testAPrunedResultResolvesEveryPathItKeeps() throws {
        var random = SeededGenerator(state: 0xD1B5_4A32_D192_ED03)
        func value(_ depth: Int) -> JSONValue {
            switch Int.random(in: 0..<(depth > 2 ? 3 : 6), using: &random) {
            case 0: return .number(JSONNumber(Int64.random(in: 0..<100, using: &random)))
            case 1: return .string(["x", "y", String(repeating: "z", count: 40)][Int.random(in: 0..<3, using: &random)])
            case 2: return .null
            case 3, 4:
                return .object(
                    Dictionary(
                        uniqueKeysWithValues: ["a", "b", "c"].prefix(Int.random(in: 0...3, using: &random)).map { ($0, value(depth + 1)) }))
            default: return .array((0..<Int.random(in: 0...3, using: &random)).map { _ in value(depth + 1) })
            }
        }
        func path() -> String {
            var text = "r"
            for _ in 0..<Int.random(in: 0...4, using: &random) {
                switch Int.random(in: 0..<5, using: &random) {
                case 0: text += "[*]"
                case 1: text += "[\(Int.random(in: 0..<3, using: &random))]"
                default: text += "." + ["a", "b", "c"][Int.random(in: 0..<3, using: &random)]
                }
            }
            return text
        }
        for _ in 0..<2_000 {
            let document = value(0)
            let references = (0..<Int.random(in: 1...4, using: &random)).compactMap { _ in ChainReference(parsing: path()) }
            let pruned = ChainReference.pruned(document, keeping: references.map { $0.segments[...] })
            for reference in references {
                XCTAssertEqual(reference.resolve(in: ["r": pruned]), reference.resolve(in: ["r": document]), "\(reference) in \(document)")
            }
            XCTAssertLessThanOrEqual(pruned.approximateFootprint, document.approximateFootprint + 56)
        }
    }

    func testPruningDropsWhatNoPathReaches() throws {
        let document = try json(#"{"body":{"items":[{"id":1,"name":"a"},{"id":2,"name":"b"},{"id":3}],"big":"x"},"status":200}"#)
        let paths = [["body", "items", 1, "id"], ["status"]].map { path in
            path.map { part -> ChainReference.Segment in (part as? Int).map { .index($0) } ?? .member(part as! String) }[...]
        }
        XCTAssertEqual(ChainReference.pruned(document, keeping: paths), try json(#"{"body":{"items":[null,{"id":2}]},"status":200}"#))
        XCTAssertEqual(ChainReference.pruned(document, keeping: [[][...]]), document, "a whole result is kept whole")
    }
}
