// POST /chain end to end: references between steps, concurrency of independent steps,
// conditions and skipping, failure and continueOnError, output templates, bad chains.

import Foundation
import LarderServiceTesting
import XCTest

final class ChainTests: IntegrationTestCase {
    private func chain(_ client: TestConnection, _ object: [String: Any], headers: [String: String] = [:]) throws -> TestResponse {
        try client.request("POST", "/chain", headers: headers, body: Array(try JSONSerialization.data(withJSONObject: object)))
    }

    private func steps(_ response: TestResponse) -> [String: [String: Any]] {
        response.json["steps"] as? [String: [String: Any]] ?? [:]
    }

    func testStepsReadEarlierResultsAndIndependentStepsOverlap() throws {
        let larder = try startLarder()
        let base = uniquePath()
        let response = try chain(
            try larder.connection(),
            [
                "steps": [
                    ["id": "a", "request": ["url": url(base + "/a", "delay=100&who=alice")]],
                    ["id": "b", "request": ["url": origin.base + base + "/b/{{a.body.query.who}}?delay=100"]],
                    ["id": "c", "request": ["url": url(base + "/c", "delay=100"), "query": ["n": "{{a.body.n}}"]]],
                    ["id": "d", "request": ["url": origin.base + base + "/d/{{b.status}}"], "dependsOn": ["b", "c"]]
                ], "output": ["who": "{{a.body.query.who}}", "both": "{{b.body.path}}+{{c.body.path}}"]
            ])
        XCTAssertEqual(response.status, 200, response.text)
        XCTAssertEqual(response.json["ok"] as? Bool, true, response.text)
        XCTAssertEqual(origin.count(base + "/b/alice"), 1)
        XCTAssertEqual(origin.requests(base + "/c").first?.target, base + "/c?delay=100&n=1")
        XCTAssertEqual(origin.count(base + "/d/200"), 1)
        XCTAssertEqual(origin.peakConcurrency, 2, "b and c were at the origin at the same time")
        let order = response.json["order"] as? [String] ?? []
        XCTAssertEqual(order.first, "a")
        XCTAssertEqual(order.last, "d")
        let output = response.json["output"] as? [String: Any]
        XCTAssertEqual(output?["who"] as? String, "alice")
        XCTAssertEqual(output?["both"] as? String, "\(base)/b/alice+\(base)/c")
        XCTAssertEqual(steps(response)["d"]?["state"] as? String, "done")
    }

    func testReferencesKeepTheirTypeAndArePercentEncodedInURLs() throws {
        let larder = try startLarder()
        let base = uniquePath()
        let response = try chain(
            try larder.connection(),
            [
                "steps": [
                    ["id": "a", "request": ["url": url(base + "/a", "x=a%20b%2Fc")]],
                    ["id": "items", "request": ["url": url(base + "/items", "jsonsize=12")]],
                    [
                        "id": "b",
                        "request": [
                            "url": origin.base + base + "/p/{{a.body.query.x}}", "method": "POST",
                            "body": ["n": "{{a.body.n}}", "all": "{{items.body[*]}}", "text": "n={{a.body.n}}"],
                            "cache": ["version": "{{a.body.n}}"]
                        ]
                    ]
                ], "output": ["items": "{{items.body[*]}}", "joined": "{{items.body}}", "missing": "{{a.body.nope}}"]
            ])
        XCTAssertEqual(response.json["ok"] as? Bool, true, response.text)
        let received = try XCTUnwrap(origin.requests(base + "/p/a%20b%2Fc").first, "percent-encoded in the path")
        let body = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(received.body)) as? [String: Any])
        XCTAssertEqual(body["n"] as? Int, 1, "a number stays a number")
        XCTAssertEqual(body["all"] as? [Int], [123, 123, 123, 0], "[*] gives an array")
        XCTAssertEqual(body["text"] as? String, "n=1")
        XCTAssertEqual((steps(response)["b"]?["cache"] as? [String: Any])?["version"] as? Int, 1)
        let output = response.json["output"] as? [String: Any]
        XCTAssertEqual(output?["items"] as? [Int], [123, 123, 123, 0])
        XCTAssertEqual(output?["joined"] as? [Int], [123, 123, 123, 0])
        XCTAssertTrue(output?["missing"] is NSNull, "an unresolved reference in output is null")
    }

    func testAFalseConditionSkipsTheStepAndItsDependents() throws {
        let larder = try startLarder()
        let base = uniquePath()
        let response = try chain(
            try larder.connection(),
            [
                "steps": [
                    ["id": "user", "request": ["url": url(base + "/user", "vip=no")]],
                    [
                        "id": "offers", "request": ["url": url(base + "/offers")],
                        "when": ["path": "user.body.query.vip", "op": "eq", "value": "yes"]
                    ],
                    ["id": "detail", "request": ["url": origin.base + base + "/detail/{{offers.body.n}}"]],
                    [
                        "id": "always", "request": ["url": url(base + "/always")],
                        "when": [
                            "all": [
                                ["path": "user.status", "op": "in", "value": [200, 201]],
                                ["not": ["path": "user.body.nope", "op": "exists"]],
                                [
                                    "any": [
                                        ["path": "user.body.path", "op": "matches", "value": "/user$"],
                                        ["path": "user.status", "op": "gt", "value": 500]
                                    ]
                                ]
                            ]
                        ]
                    ]
                ]
            ])
        XCTAssertEqual(response.json["ok"] as? Bool, true, response.text)
        XCTAssertEqual(
            steps(response).mapValues { $0["state"] as? String },
            ["user": "done", "offers": "skipped", "detail": "skipped", "always": "done"])
        XCTAssertEqual(origin.count(base + "/offers"), 0)
        XCTAssertEqual(origin.count(base + "/always"), 1)
    }

    func testAFailedStepEndsTheChainUnlessItMayFail() throws {
        let hanging = try HangingOrigin()
        let larder = try startLarder()
        let base = uniquePath()
        let failing = try chain(
            try larder.connection(),
            [
                "steps": [
                    ["id": "slow", "request": ["url": hanging.base + "/slow"]],
                    ["id": "bad", "request": ["url": url(base + "/bad", "status=503&delay=50"), "validate": ["status": [200]]]],
                    ["id": "after", "request": ["url": url(base + "/after")], "dependsOn": ["bad"]]
                ]
            ])
        XCTAssertEqual(failing.json["ok"] as? Bool, false, failing.text)
        XCTAssertEqual(failing.json["failed"] as? [String], ["bad"])
        XCTAssertEqual(steps(failing).mapValues { $0["state"] as? String }, ["slow": "cancelled", "bad": "failed", "after": "cancelled"])
        XCTAssertEqual((failing.json["error"] as? [String: Any])?["code"] as? String, "validation_failed")
        XCTAssertTrue(hanging.waitForClosed(1), "the running step's upstream connection was closed")
        XCTAssertEqual(origin.count(base + "/after"), 0)

        let tolerant = try chain(
            try larder.connection(),
            [
                "steps": [
                    [
                        "id": "bad", "request": ["url": url(base + "/bad2", "status=503"), "validate": ["status": [200]]],
                        "continueOnError": true
                    ],
                    ["id": "after", "request": ["url": origin.base + base + "/after/{{bad.state}}/{{bad.error.code}}"]]
                ]
            ])
        XCTAssertEqual(tolerant.json["ok"] as? Bool, true, tolerant.text)
        XCTAssertEqual(tolerant.json["failed"] as? [String], ["bad"])
        XCTAssertEqual(origin.count(base + "/after/failed/validation_failed"), 1)
    }

    func testAnUnresolvedReferenceFailsItsStep() throws {
        let larder = try startLarder()
        let response = try chain(
            try larder.connection(),
            [
                "steps": [
                    ["id": "a", "request": ["url": url("/unresolved-a")]],
                    ["id": "b", "request": ["url": origin.base + "/b/{{a.body.items[0].id}}"]]
                ]
            ])
        XCTAssertEqual(response.json["ok"] as? Bool, false)
        let error = steps(response)["b"]?["error"] as? [String: Any]
        XCTAssertEqual(error?["code"] as? String, "reference_unresolved")
        XCTAssertTrue((error?["message"] as? String)?.contains("a.body.items[0].id") == true, "\(String(describing: error))")
    }

    func testInvalidChainsAreRefusedBeforeAnythingRuns() throws {
        let larder = try startLarder { $0.maxChainSteps = 3 }
        let client = try larder.connection()
        let u = url("/never")
        let cases: [([String: Any], String, String?)] = [
            (
                ["steps": [["id": "a", "request": ["url": u], "dependsOn": ["b"]], ["id": "b", "request": ["url": "\(u)/{{a.status}}"]]]],
                "steps", "a → b → a"
            ),
            (["steps": [["id": "a", "request": ["url": "\(u)/{{zzz.status}}"]]]], "steps[0]", "zzz"),
            (["steps": [["id": "a", "request": ["url": u]], ["id": "a", "request": ["url": u]]]], "steps[1].id", nil),
            (["steps": [["id": "a", "request": ["url": u, "cache": ["tll": 1]]]]], "steps[0].request.cache.tll", "ttl"),
            (
                ["steps": [["id": "a", "request": ["url": u], "when": ["path": "a.status", "op": "near", "value": 1]]]], "steps[0].when.op",
                nil
            ),
            (["steps": Array(repeating: ["id": "x", "request": ["url": u]], count: 4)], "steps", nil),
            (["steps": [["id": "input", "request": ["url": u]]]], "steps[0].id", nil)
        ]
        for (object, field, mention) in cases {
            let response = try chain(client, object)
            XCTAssertEqual(response.status, 400, field)
            XCTAssertEqual(response.errorField, field, response.text)
            if let mention { XCTAssertTrue(response.text.contains(mention), response.text) }
        }
        XCTAssertEqual(origin.totalCount, 0)
    }

    func testIncludeOutputAndStreaming() throws {
        let larder = try startLarder()
        let base = uniquePath()
        let object: [String: Any] = [
            "steps": [["id": "a", "request": ["url": url(base)]]], "output": ["n": "{{a.body.n}}"], "include": "output"
        ]
        let compact = try chain(try larder.connection(), object)
        XCTAssertEqual(compact.json["ok"] as? Bool, true)
        XCTAssertEqual((compact.json["output"] as? [String: Any])?["n"] as? Int, 1)
        XCTAssertEqual((compact.json["steps"] as? [String: Any])?.isEmpty, true, "only failures")

        var lines: [[String: Any]] = []
        let status = try larder.connection().streamLines(
            "POST", "/chain", headers: ["Accept": "application/x-ndjson"],
            body: Array(try JSONSerialization.data(withJSONObject: object))
        ) { line in
            lines.append((try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any] ?? [:])
        }
        XCTAssertEqual(status, 200)
        XCTAssertEqual(lines.first?["id"] as? String, "a")
        XCTAssertEqual(lines.first?["state"] as? String, "done")
        XCTAssertEqual((lines.last?["output"] as? [String: Any])?["n"] as? Int, 2)
    }
}
