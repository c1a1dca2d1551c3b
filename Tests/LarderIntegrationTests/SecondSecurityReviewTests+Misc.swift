// Regression tests for the second security review (issue 32), items 8 to 11: JSON numbers in
// keys and upstream bodies, the whole-section header deadline, empty tokens, and framing fields
// in entries written by hand. Each goes through the real server (or the real executable).

import Foundation
import LarderCore
import LarderService
import XCTest
#if canImport(Glibc)
import Glibc
#endif

final class SecondSecurityReviewMiscTests: IntegrationTestCase {
    // MARK: 8. JSON numbers keep their text

    func testBodiesDifferingOnlyInALargeOrPreciseNumberGetTheirOwnEntriesAndGoUpstreamAsWritten() throws {
        let larder = try startLarder()
        let client = try larder.connection()
        // Each pair was one double before: 1.2345678901234567e+19, and 0.1.
        for (first, second) in [("12345678901234567890", "12345678901234567891"), ("0.1000000000000000055511151231257827", "0.1")] {
            let path = uniquePath()
            func post(_ number: String) throws -> TestResponse {
                try client.fetchRaw(#"{"url":"\#(url(path))","method":"POST","cache":{"ttl":300},"body":{ "n" : \#(number) , "a":[1.0,-0,2E-7]}}"#)
            }
            XCTAssertEqual(try post(first).outcome, "miss")
            XCTAssertEqual(try post(second).outcome, "miss", "\(second) is not \(first)'s entry")
            XCTAssertEqual(try post(first).outcome, "hit")
            XCTAssertEqual(origin.count(path), 2)
            // Only whitespace and member order are normalised.
            XCTAssertEqual(origin.requests(path).map { String(decoding: $0.body, as: UTF8.self) },
                           [#"{"a":[1.0,-0,2E-7],"n":\#(first)}"#, #"{"a":[1.0,-0,2E-7],"n":\#(second)}"#])
        }
    }

    func testNumbersReadFromBodiesByChainsAndValidatorsStillWork() throws {
        let document = #"{"n":12345678901234567890,"x":0.1000000000000000055511151231257827,"i":7}"#
        let raw = try RawOrigin(reply: Array("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: \(document.utf8.count)\r\nConnection: close\r\n\r\n\(document)".utf8))
        let larder = try startLarder()
        let client = try larder.connection()
        let source = "http://127.0.0.1:\(raw.port)/doc"

        let validated = try client.fetch(["url": source, "validate": ["json": ["n": "integer", "x": "number", "i": "integer"]]])
        XCTAssertEqual(validated.status, 200, validated.text)
        let refused = try client.fetch(["url": source, "validate": ["json": ["x": "integer"]]])
        XCTAssertEqual(refused.errorCode, "validation_failed", refused.text)

        let path = uniquePath()
        let chain = #"""
        {"steps":[{"id":"a","request":{"url":"\#(source)"}},
                  {"id":"b","request":{"url":"\#(url(path))","method":"POST","body":{"n":"{{a.body.n}}","x":"{{a.body.x}}"}},
                   "when":{"all":[{"path":"a.body.n","op":"gt","value":1e19},{"path":"a.body.i","op":"eq","value":7.0}]}}],
         "output":{"n":"{{a.body.n}}","text":"n={{a.body.n}}"}}
        """#
        let response = try client.request("POST", "/chain", headers: ["Content-Type": "application/json"], body: Array(chain.utf8))
        XCTAssertEqual(response.json["ok"] as? Bool, true, response.text)
        XCTAssertEqual(origin.requests(path).map { String(decoding: $0.body, as: UTF8.self) },
                       [#"{"n":12345678901234567890,"x":0.1000000000000000055511151231257827}"#], "the conditions held and the numbers went on as written")
        XCTAssertTrue(response.text.contains(#""n":12345678901234567890"#), response.text)
        XCTAssertTrue(response.text.contains(#""text":"n=12345678901234567890""#), response.text)
    }
}
