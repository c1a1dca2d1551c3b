// What one /chain may cost the server, end to end: a condition's pattern runs in time linear in
// its text (RE2), whatever the pattern; what a chain keeps of its results is what it reads, for
// as long as it reads it, within --max-batch-bytes.

import Dispatch
import Foundation
import LarderEngine
import LarderServiceTesting
import XCTest

final class ChainSafetyTests: IntegrationTestCase {
    private func chain(_ client: TestConnection, _ object: [String: Any]) throws -> TestResponse {
        try client.request("POST", "/chain", body: Array(try JSONSerialization.data(withJSONObject: object)))
    }

    private func steps(_ response: TestResponse) -> [String: [String: Any]] {
        response.json["steps"] as? [String: [String: Any]] ?? [:]
    }

    /// `^(a|a)*$` against 40 `a`s and a `!` takes a backtracking engine 2^40 steps; the chain
    /// must answer (the condition false) and the server keep serving, well inside the client's
    /// 20-second wait.
    func testABacktrackingPatternCostsLinearTimeAndTheServerGoesOn() throws {
        let larder = try startLarder()
        let base = uniquePath()
        let subject = String(repeating: "a", count: 40) + "!"
        let client = try TestConnection(port: larder.port, timeoutSeconds: 20)
        let response = try chain(
            client,
            [
                "steps": [
                    ["id": "a", "request": ["url": url(base + "/a", "s=" + subject)]],
                    [
                        "id": "b", "request": ["url": url(base + "/b")],
                        "when": ["path": "a.body.query.s", "op": "matches", "value": "^(a|a)*$"]
                    ],
                    [
                        "id": "c", "request": ["url": url(base + "/c")],
                        "when": ["path": "a.body.query.s", "op": "matches", "value": "^(a|a)*!$"]
                    ]
                ]
            ])
        XCTAssertEqual(response.status, 200, response.text)
        XCTAssertEqual(steps(response)["b"]?["state"] as? String, "skipped", response.text)
        XCTAssertEqual(steps(response)["c"]?["state"] as? String, "done", "the same pattern with the `!` matches")
        XCTAssertEqual(origin.count(base + "/b"), 0)
        XCTAssertEqual(origin.count(base + "/c"), 1)
        XCTAssertEqual(try TestConnection(port: larder.port, timeoutSeconds: 5).request("GET", "/healthz").status, 200)
    }

    /// A search costs at most its program's size times the text's bytes: `[ab]{1000}` (about
    /// 1,000 instructions) over 64 KiB is past one search's bound and does not match, where
    /// `[ab]{10}` over the same text does.
    func testASearchPastItsCostDoesNotMatch() throws {
        let larder = try startLarder()
        let base = uniquePath()
        let text = String(repeating: "ab", count: 32 << 10)
        let response = try chain(
            try larder.connection(),
            [
                "input": ["s": text],
                "steps": [
                    [
                        "id": "wide", "request": ["url": url(base + "/wide")],
                        "when": ["path": "input.s", "op": "matches", "value": "[ab]{1000}"]
                    ],
                    [
                        "id": "narrow", "request": ["url": url(base + "/narrow")],
                        "when": ["path": "input.s", "op": "matches", "value": "[ab]{10}"]
                    ]
                ], "include": "output"
            ])
        XCTAssertEqual(response.json["ok"] as? Bool, true, response.text)
        XCTAssertEqual(origin.count(base + "/wide"), 0)
        XCTAssertEqual(origin.count(base + "/narrow"), 1)
    }

    /// Patterns are compiled and searched on a queue of their own: while it is held, a chain
    /// whose conditions only compare values answers, and one with a pattern waits, while the
    /// server goes on.
    func testPatternWorkWaitsOnItsOwnQueueAndNothingElseDoes() throws {
        let larder = try startLarder()
        let base = uniquePath()
        let held = holdPatternQueue()
        func twoSteps(_ condition: [String: Any]) -> [String: Any] {
            [
                "steps": [
                    ["id": "a", "request": ["url": url(base + "/a")]],
                    ["id": "b", "request": ["url": url(base + "/b")], "when": condition]
                ], "include": "output"
            ]
        }
        let compared = try chain(try larder.connection(), twoSteps(["path": "a.status", "op": "eq", "value": 200]))
        XCTAssertEqual(compared.json["ok"] as? Bool, true, compared.text)
        XCTAssertEqual(origin.count(base + "/b"), 1, "judged at once, not behind the held queue")
        let patterned = try send(twoSteps(["path": "a.body.path", "op": "matches", "value": "/a$"]), to: larder)
        XCTAssertEqual(try larder.connection().request("GET", "/healthz").status, 200, "the loops go on")
        XCTAssertEqual(origin.count(base + "/a"), 1, "the patterned chain has not started: it is compiled on the held queue")
        held.signal()
        let answer = try patterned.readResponse(method: "POST")
        XCTAssertEqual(answer.json["ok"] as? Bool, true, answer.text)
        XCTAssertEqual(origin.count(base + "/b"), 2)
    }

    /// A chain that waited on that queue past its `timeoutMs` does not start.
    func testTheTimeAChainWaitsForItsPatternsIsPartOfItsTimeout() throws {
        let larder = try startLarder()
        let base = uniquePath()
        let held = holdPatternQueue()
        let body: [String: Any] = [
            "steps": [["id": "a", "request": ["url": url(base + "/a")], "when": ["path": "input.x", "op": "matches", "value": "y"]]],
            "input": ["x": "y"], "timeoutMs": 1000
        ]
        let waiting = try send(body, to: larder)
        XCTAssertEqual(try larder.connection().request("GET", "/healthz").status, 200, "the request is in, its chain waits")
        clock.advance(by: 2)
        held.signal()
        let answer = try waiting.readResponse(method: "POST")
        XCTAssertEqual(answer.status, 504, answer.text)
        XCTAssertEqual(answer.errorCode, "upstream_timeout")
        XCTAssertEqual(origin.count(base + "/a"), 0)
    }

    /// Blocks the queue patterns are compiled and searched on until the semaphore returned is
    /// signalled.
    private func holdPatternQueue() -> DispatchSemaphore {
        let held = DispatchSemaphore(value: 0)
        let holding = DispatchSemaphore(value: 0)
        ChainRun.conditions.async {
            holding.signal()
            held.wait()
        }
        holding.wait()
        return held
    }

    /// POSTs a chain without waiting for its answer; the connection to read it from.
    private func send(_ body: [String: Any], to larder: RunningLarder) throws -> TestConnection {
        let connection = try TestConnection(port: larder.port)
        let bytes = try JSONSerialization.data(withJSONObject: body)
        try connection.sendAll(
            Array("POST /chain HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: \(bytes.count)\r\n\r\n".utf8) + Array(bytes))
        return connection
    }

    func testPatternsAreBoundedAndWrittenInRE2() throws {
        let larder = try startLarder()
        func refusal(_ pattern: String) throws -> TestResponse {
            try chain(
                try larder.connection(),
                [
                    "steps": [
                        ["id": "a", "request": ["url": url("/a")]],
                        ["id": "b", "request": ["url": url("/b")], "when": ["path": "a.body.path", "op": "matches", "value": pattern]]
                    ]
                ])
        }
        let properties = String(repeating: "\\pL", count: 9)
        for pattern in [String(repeating: "a", count: 1025), "(", "(?=x)", "\\1", "a{1000}{1000}", "\\pL{80}", properties] {
            let refused = try refusal(pattern)
            XCTAssertEqual(refused.status, 400, "\(pattern.prefix(20)): \(refused.text)")
            XCTAssertEqual(refused.errorField, "steps[1].when.value", refused.text)
        }
        XCTAssertEqual(origin.count("/a"), 0, "refused before anything ran")
    }

    /// A chain under a 2 MiB budget: step a fetches a 200 KB JSON body (about 2.4 MB parsed),
    /// step b (`second`, given its id and request) reads it; `include: output`, so the answer
    /// holds no body. Returns the answer and the base path of the origin's paths.
    private func chainOverABigBody(_ second: (String) -> [String: Any], output: [String: Any]? = nil) throws -> (TestResponse, String) {
        let larder = try startLarder { $0.maxBatchBytes = 2 << 20 }
        let base = uniquePath()
        var body: [String: Any] = [
            "steps": [["id": "a", "request": ["url": url(base + "/a", "jsonsize=200000")]], second(base)], "include": "output"
        ]
        body["output"] = output
        return (try chain(try larder.connection(), body), base)
    }

    /// The review's case: a large JSON body read whole by a later step's condition. Its parsed
    /// form does not fit the budget: the step fails.
    func testAChainsKeptResultsCountAgainstItsBudget() throws {
        let (response, base) = try chainOverABigBody { base in
            ["id": "b", "request": ["url": self.url(base + "/b")], "when": ["path": "a.body", "op": "exists"]]
        }
        XCTAssertEqual(response.json["ok"] as? Bool, false, response.text)
        XCTAssertEqual((response.json["error"] as? [String: Any])?["code"] as? String, "response_too_large", response.text)
        XCTAssertEqual((steps(response)["a"]?["error"] as? [String: Any])?["code"] as? String, "response_too_large")
        XCTAssertEqual(origin.count(base + "/b"), 0)
    }

    /// The same body read by one element only: the chain keeps that element, and fits.
    func testAChainKeepsOnlyThePathsItsStepsRead() throws {
        let (response, base) = try chainOverABigBody(
            { base in ["id": "b", "request": ["url": self.url(base + "/b"), "query": ["first": "{{a.body[0]}}"]]] },
            output: ["last": "{{b.body.query.first}}"])
        XCTAssertEqual(response.json["ok"] as? Bool, true, response.text)
        XCTAssertEqual((response.json["output"] as? [String: Any])?["last"] as? String, "123")
        XCTAssertEqual(origin.requests(base + "/b").first?.target, base + "/b?first=123")
    }

    /// Each step reads the one before it whole. Every result alone fits the 4 MiB budget, two
    /// do not: the chain passes only because a result goes once the step that reads it started.
    func testAResultGoesOnceTheLastStepThatReadsItHasStarted() throws {
        let larder = try startLarder { $0.maxBatchBytes = 4 << 20 }
        let base = uniquePath()
        var list: [[String: Any]] = [["id": "s1", "request": ["url": url(base + "/s1", "jsonsize=200000")]]]
        for index in 2...4 {
            list.append([
                "id": "s\(index)", "request": ["url": url(base + "/s\(index)", "jsonsize=200000")],
                "when": ["path": "s\(index - 1).body", "op": "exists"]
            ])
        }
        let response = try chain(try larder.connection(), ["steps": list, "include": "output"])
        XCTAssertEqual(response.json["ok"] as? Bool, true, response.text)
        XCTAssertEqual(origin.count(base + "/s4"), 1)
    }
}
