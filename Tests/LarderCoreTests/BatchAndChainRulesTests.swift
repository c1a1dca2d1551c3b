// Pure rules behind issue 32's fixes to /batch and /chain: the answer's budget, the status an
// item accepts without validators, and references that would leave their path segment.

import LarderCore
import XCTest

final class AnswerBudgetTests: XCTestCase {
    func testItemsFitUntilOneDoesNotThenNoneDo() {
        var budget = AnswerBudget(limit: 100)
        XCTAssertTrue(budget.admit(60))
        XCTAssertTrue(budget.admit(40), "exactly the limit fits")
        XCTAssertFalse(budget.admit(1))
        XCTAssertTrue(budget.exhausted)
        XCTAssertFalse(budget.admit(0), "once over, every later item is refused, however small")
        XCTAssertEqual(budget.used, 100)
        XCTAssertEqual(budget.refusal.code, .responseTooLarge)
    }

    func testAnItemLargerThanTheWholeBudgetIsRefused() {
        var budget = AnswerBudget(limit: 10)
        XCTAssertFalse(budget.admit(Int.max), "no overflow")
        XCTAssertEqual(AnswerBudget.defaultLimit, 64 << 20)
    }
}

final class ItemStatusTests: XCTestCase {
    func testWithoutValidatorsStatusesOutside200To399Fail() {
        for status in [200, 201, 204, 299, 301, 304, 399] {
            XCTAssertNil(ResponseValidation.itemFailure(status: status, validation: nil), "\(status)")
        }
        for status in [100, 199, 400, 404, 429, 500, 503, 599] {
            let failure = ResponseValidation.itemFailure(status: status, validation: nil)
            XCTAssertEqual(failure?.code, .upstreamStatus, "\(status)")
            XCTAssertTrue(failure?.message.contains("\(status)") == true)
        }
    }

    func testValidatorsDecideInstead() throws {
        let accepting404 = try ResponseValidation.parse(.object(["status": .array([.number(200), .number(404)])]), path: "validate")
        XCTAssertNil(
            ResponseValidation.itemFailure(status: 404, validation: accepting404),
            "the engine judged it with the request's validators already")
        XCTAssertNil(ResponseValidation.itemFailure(status: 500, validation: ResponseValidation()))
    }
}

final class ChainPathSegmentTests: XCTestCase {
    private func render(_ url: String, _ value: JSONValue, member: String = "url") throws -> String? {
        let rendered = try Template.render(
            .object([member: .string(url)]), documents: ["input": .object(["v": value])],
            encodeIn: ["url", "path"])
        guard case .object(let members) = rendered, case .string(let text)? = members[member] else { return nil }
        return text
    }

    private func assertRefused(_ url: String, _ value: String, member: String = "url", line: UInt = #line) {
        XCTAssertThrowsError(try render(url, .string(value), member: member), line: line) { error in
            let unresolved = error as? Template.Unresolved
            XCTAssertEqual(unresolved?.reference, "input.v", line: line)
            XCTAssertTrue(unresolved?.reason.contains("path segment") == true, line: line)
        }
    }

    func testAValueThatIsAWholeDotSegmentIsRefused() {
        assertRefused("http://o/users/{{input.v}}/orders", "..")
        assertRefused("http://o/users/{{input.v}}/orders", ".")
        assertRefused("http://o/users/{{input.v}}", "..")
        assertRefused("http://o/users/{{ input.v }}?x=1", "..")
        assertRefused("/users/{{input.v}}/orders", "..", member: "path")
        assertRefused("http://o/users/.{{input.v}}/orders", ".", member: "url")
        assertRefused("http://o/users/{{input.v}}{{input.v}}/orders", ".")
        // Encoded, these stay in their segment for most origins, not for one that decodes %2F
        // (or %5C) before it normalises.
        assertRefused("http://o/users/{{input.v}}/orders", "../x")
        assertRefused("http://o/users/{{input.v}}/orders", "x/..")
        assertRefused("http://o/users/{{input.v}}/orders", "..\\x")
    }

    func testOtherValuesStayInsideTheirSegment() throws {
        XCTAssertEqual(try render("http://o/users/{{input.v}}/orders", .string("%2e%2e")), "http://o/users/%252e%252e/orders")
        XCTAssertEqual(try render("http://o/users/{{input.v}}/orders", .string("/")), "http://o/users/%2F/orders")
        XCTAssertEqual(try render("http://o/users/{{input.v}}/orders", .string("?")), "http://o/users/%3F/orders")
        XCTAssertEqual(try render("http://o/users/{{input.v}}/orders", .string("#")), "http://o/users/%23/orders")
        XCTAssertEqual(try render("http://o/users/{{input.v}}/orders", .string("a/b")), "http://o/users/a%2Fb/orders")
        XCTAssertEqual(try render("http://o/search?q={{input.v}}", .string("../x")), "http://o/search?q=..%2Fx", "in the query")
        XCTAssertEqual(
            try render("http://o/users/{{input.v}}/orders", .string("...")), "http://o/users/.../orders",
            "three dots are a name, not a dot segment")
        XCTAssertEqual(try render("http://o/users/v{{input.v}}/orders", .string("..")), "http://o/users/v../orders")
        XCTAssertEqual(try render("http://o/search?q={{input.v}}", .string("..")), "http://o/search?q=..", "the query is no path")
        XCTAssertEqual(try render("http://o/a#{{input.v}}", .string("..")), "http://o/a#..")
        XCTAssertEqual(
            try render("http://o/users/../{{input.v}}", .string("x")), "http://o/users/../x",
            "the template's own dot segments are its author's")
        XCTAssertEqual(try render("{{input.v}}", .string("..")), "..", "a whole value is taken as it is (a URL read from a response)")
    }
}
