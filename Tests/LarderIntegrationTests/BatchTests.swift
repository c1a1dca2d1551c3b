// POST /batch end to end: order, hits without the origin, the concurrency limit, fail-fast
// that really closes origin connections, settle, NDJSON streaming, validation of the whole
// batch before anything runs, cancellation by a departing client, and coalescing across batches.

import Foundation
import LarderServiceTesting
import LarderSync
import XCTest

final class BatchTests: IntegrationTestCase {
    private func batch(_ client: TestConnection, _ object: [String: Any]) throws -> TestResponse {
        try client.request(
            "POST", "/batch", headers: ["Content-Type": "application/json"],
            body: Array(try JSONSerialization.data(withJSONObject: object)))
    }

    private func responses(_ response: TestResponse) -> [[String: Any]] {
        response.json["responses"] as? [[String: Any]] ?? []
    }

    func testResponsesComeInRequestOrderAndHitsDoNotReachTheOrigin() throws {
        let larder = try startLarder()
        let client = try larder.connection()
        let (a, b, c) = (uniquePath("a"), uniquePath("b"), uniquePath("c"))
        _ = try client.fetch(["url": url(a), "cache": ["ttl": 600]])
        _ = try client.fetch(["url": url(b), "cache": ["ttl": 600]])
        let response = try batch(
            client,
            [
                "requests": [
                    ["id": "first", "url": url(a), "cache": ["ttl": 600]],
                    ["url": url(c, "delay=50"), "cache": ["ttl": 600]],
                    ["id": "third", "url": url(b), "cache": ["ttl": 600]]
                ]
            ])
        XCTAssertEqual(response.status, 200, response.text)
        XCTAssertEqual(response.json["ok"] as? Bool, true)
        XCTAssertEqual(response.json["failed"] as? [String], [])
        let items = responses(response)
        XCTAssertEqual(items.map { $0["id"] as? String }, ["first", "1", "third"])
        XCTAssertEqual(items.map { $0["state"] as? String }, ["done", "done", "done"])
        XCTAssertEqual(items.map { ($0["cache"] as? [String: Any])?["outcome"] as? String }, ["hit", "miss", "hit"])
        XCTAssertEqual(items[1]["status"] as? Int, 200)
        XCTAssertEqual(origin.count(a), 1)
        XCTAssertEqual(origin.count(b), 1)
        XCTAssertEqual(origin.count(c), 1)
    }

    func testConcurrencyNeverExceedsTheLimit() throws {
        let larder = try startLarder()
        let base = uniquePath()
        let requests = (0..<10).map { ["url": url("\(base)-\($0)", "delay=100")] as [String: Any] }
        let response = try batch(try larder.connection(), ["requests": requests, "concurrency": 3])
        XCTAssertEqual(response.json["ok"] as? Bool, true, response.text)
        XCTAssertEqual(origin.peakConcurrency, 3)
    }

    func testTheFirstFailureEndsTheBatchAndClosesInFlightConnections() throws {
        let hanging = try HangingOrigin()
        let larder = try startLarder()
        let path = uniquePath()
        let response = try batch(
            try larder.connection(),
            [
                "concurrency": 2,
                "requests": [
                    ["id": "slow", "url": hanging.base + "/never"],
                    ["id": "bad", "url": url(path, "status=500&delay=100"), "validate": ["status": [200]]],
                    ["id": "later", "url": url(path + "-later")]
                ]
            ])
        XCTAssertEqual(response.json["ok"] as? Bool, false, response.text)
        XCTAssertEqual(response.json["failed"] as? [String], ["bad"])
        let items = responses(response)
        XCTAssertEqual(items.map { $0["state"] as? String }, ["cancelled", "failed", "cancelled"])
        XCTAssertEqual((items[1]["error"] as? [String: Any])?["code"] as? String, "validation_failed")
        XCTAssertTrue(hanging.waitForClosed(1), "the in-flight transfer's connection to the origin was closed")
        XCTAssertEqual(origin.count(path + "-later"), 0, "a request not started never starts")
    }

    func testABatchPastItsTimeIsStoppedAndItsTransfersAborted() throws {
        let hanging = try HangingOrigin()
        let larder = try startLarder()
        let path = uniquePath()
        let response = try batch(
            try larder.connection(),
            [
                // Long enough for the quick item on a slow machine; the stuck one never ends.
                "timeoutMs": 2_000, "concurrency": 1,
                "requests": [
                    ["id": "quick", "url": url(path)], ["id": "stuck", "url": hanging.base + "/stuck"],
                    ["id": "never", "url": url(path + "-never")]
                ]
            ])
        XCTAssertEqual(response.json["ok"] as? Bool, false, response.text)
        XCTAssertEqual(responses(response).map { $0["state"] as? String }, ["done", "cancelled", "cancelled"])
        XCTAssertTrue(hanging.waitForClosed(1))
        XCTAssertEqual(origin.count(path + "-never"), 0)
    }

    func testSettleReportsEveryRequest() throws {
        let larder = try startLarder()
        let path = uniquePath()
        let response = try batch(
            try larder.connection(),
            [
                "mode": "settle",
                "requests": [
                    ["id": "bad", "url": url(path, "status=500"), "validate": ["status": [200]]],
                    ["id": "good", "url": url(path + "-good", "delay=50")],
                    ["id": "refused", "url": "http://[::ffff:169.254.169.254]/"]
                ]
            ])
        XCTAssertEqual(response.json["ok"] as? Bool, false)
        XCTAssertEqual(response.json["failed"] as? [String], ["bad", "refused"])
        XCTAssertEqual(responses(response).map { $0["state"] as? String }, ["failed", "done", "failed"])
        XCTAssertEqual(origin.count(path + "-good"), 1)
    }

    func testNDJSONLinesArriveAsRequestsComplete() throws {
        let larder = try startLarder()
        let path = uniquePath()
        let body = Array(
            try JSONSerialization.data(withJSONObject: [
                "requests": [
                    ["id": "slow", "url": url(path + "-slow", "delay=1500")],
                    ["id": "fast", "url": url(path + "-fast")]
                ]
            ]))
        var lines: [[String: Any]] = []
        var slowPendingAtFirstLine: Int?
        let status = try larder.connection().streamLines("POST", "/batch", headers: ["Accept": "application/x-ndjson"], body: body) {
            line in
            if lines.isEmpty { slowPendingAtFirstLine = origin.pendingDelayed }
            lines.append((try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any] ?? [:])
        }
        XCTAssertEqual(status, 200)
        XCTAssertEqual(lines.count, 3)
        XCTAssertEqual(lines[0]["id"] as? String, "fast")
        XCTAssertEqual(lines[0]["index"] as? Int, 1)
        XCTAssertEqual(slowPendingAtFirstLine, 1, "the first line arrived while the slow request was still at the origin")
        XCTAssertEqual(lines[1]["id"] as? String, "slow")
        XCTAssertEqual(lines[2]["ok"] as? Bool, true, "a summary line last")
    }

    func testAnInvalidBatchIsRefusedWholeNamingTheIndexAndField() throws {
        let larder = try startLarder { $0.maxBatch = 3 }
        let client = try larder.connection()
        let cases: [([String: Any], String)] = [
            (["requests": [["url": url("/x")], ["url": url("/x"), "cache": ["tll": 60]]]], "requests[1].cache.tll"),
            (["requests": [["url": url("/x")], ["method": "GET"]]], "requests[1].url"),
            (["requests": [["id": "a", "url": url("/x")], ["id": "a", "url": url("/x")]]], "requests[1].id"),
            (["requests": Array(repeating: ["url": url("/x")], count: 4)], "requests"),
            (["requests": [["url": url("/x")]], "concurrency": 65], "concurrency"),
            (["requests": [["url": url("/x")]], "mode": "some"], "mode"),
            (["request": []], "request")
        ]
        for (object, field) in cases {
            let response = try batch(client, object)
            XCTAssertEqual(response.status, 400, field)
            XCTAssertEqual(response.errorField, field, response.text)
        }
        XCTAssertEqual(origin.count("/x"), 0, "nothing ran")
        XCTAssertEqual(try client.request("GET", "/batch").status, 405)
    }

    func testAClientThatGoesAwayCancelsItsBatch() throws {
        let hanging = try HangingOrigin()
        let larder = try startLarder()
        let client = try larder.connection()
        let body = Array(
            try JSONSerialization.data(withJSONObject: ["requests": [["url": hanging.base + "/a"], ["url": hanging.base + "/b"]]]))
        try client.sendAll(Array("POST /batch HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: \(body.count)\r\n\r\n".utf8) + body)
        XCTAssertTrue(hanging.waitForAccepted(2))
        client.closeSocket()
        XCTAssertTrue(hanging.waitForClosed(2), "both upstream transfers were aborted")
    }

    func testACancelledBatchLeavesACoalescedFetchToTheCallersWaitingOnIt() throws {
        let larder = try startLarder()
        let path = uniquePath()
        let spec: [String: Any] = ["url": url(path, "delay=400"), "cache": ["ttl": 60]]
        let leaver = try larder.connection()
        let body = Array(try JSONSerialization.data(withJSONObject: ["requests": [spec]]))
        try leaver.sendAll(Array("POST /batch HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: \(body.count)\r\n\r\n".utf8) + body)
        XCTAssertTrue(origin.waitForCount(path, atLeast: 1), "the batch's fetch leads the flight")
        let port = larder.port
        let waiter = Locked<TestResponse?>(nil)
        let finished = DispatchSemaphore(value: 0)
        let fetchBody = Array(try JSONSerialization.data(withJSONObject: spec))
        Thread.detachNewThread {
            waiter.withLock { $0 = try? TestConnection(port: port).request("POST", "/fetch", body: fetchBody) }
            finished.signal()
        }
        // The /fetch joins the flight (coalesced), then the batch's client goes away.
        eventually { larder.service.coalescedCount >= 1 } // no event marks a request joining
        XCTAssertEqual(larder.service.coalescedCount, 1)
        leaver.closeSocket()
        XCTAssertEqual(finished.wait(timeout: .now() + 10), .success)
        let response = waiter.withLock { $0 }
        XCTAssertEqual(response?.status, 200, response?.text ?? "no response")
        XCTAssertEqual(response?.cache["coalesced"] as? Bool, true)
        XCTAssertEqual(origin.count(path), 1, "the transfer went on for the waiting caller")
    }

    func testConcurrentBatchesShareOneUpstreamRequestPerURL() throws {
        let larder = try startLarder()
        let base = uniquePath()
        // Each batch starts one item per URL (concurrency 10); the origin answers once the first
        // items of all 100 batches are in flight (990 of them waiting on the 10 fetches), so the
        // URLs are shared by coalescing, not only by the cache.
        let requests = (0..<50).map { ["url": url("\(base)-\($0 % 10)", "hold=gate"), "cache": ["ttl": 300]] as [String: Any] }
        let released = release((0..<10).map { "\(base)-\($0)" }, whenCoalesced: 990, on: larder.service)
        let body = Array(try JSONSerialization.data(withJSONObject: ["requests": requests, "concurrency": 10]))
        let port = larder.port
        let okCount = Atomic<Int>(0)
        XCTAssertTrue(
            concurrently(100) { _ in
                let response = try? TestConnection(port: port).request("POST", "/batch", body: body)
                if response?.json["ok"] as? Bool == true { okCount.add(1, ordering: .relaxed) }
            })
        XCTAssertTrue(released.waitForRelease(), "the requests overlapped")
        XCTAssertEqual(okCount.load(ordering: .relaxed), 100)
        XCTAssertEqual((0..<10).map { origin.count("\(base)-\($0)") }, Array(repeating: 1, count: 10))
    }
}
