// Cache-warming jobs end to end: progress and storing, cancellation that closes origin
// connections, resuming a cut download with Range, bad jobs, and a job that survives kill -9.

import Foundation
import LarderServiceTesting
import XCTest

#if canImport(Glibc)
    import Glibc
#endif

final class WarmJobTests: IntegrationTestCase {
    func testAJobFillsTheCacheAndReportsProgress() throws {
        let larder = try startLarder()
        let client = try larder.connection()
        let base = uniquePath()
        let urls = (0..<5).map { url("\(base)-\($0)", "size=1000") } + [url(base + "-missing", "status=404")]
        let created = try postWarmJob(client, ["urls": urls, "cache": ["ttl": 600], "concurrency": 2])
        XCTAssertEqual(created.status, 202, created.text)
        let id = try XCTUnwrap(created.json["job"] as? String)
        XCTAssertEqual(created.json["total"] as? Int, 6)
        XCTAssertEqual(created.headers["location"], "/cache/warm/\(id)")
        let status = try awaitWarmJob(larder.port, id) { $0["state"] as? String == "done" }
        XCTAssertEqual(status["state"] as? String, "done", "\(status)")
        XCTAssertEqual(status["done"] as? Int, 6)
        XCTAssertEqual(status["stored"] as? Int, 5, "the 404 is fetched but not stored")
        XCTAssertEqual(status["failed"] as? Int, 0)
        XCTAssertGreaterThanOrEqual(status["bytes"] as? Int ?? 0, 5000)
        XCTAssertGreaterThanOrEqual(status["bytesExpected"] as? Int ?? 0, 5000)
        let createdAt = try XCTUnwrap(adminTime(status["createdAt"]), "\(status)")
        let started = try XCTUnwrap(adminTime(status["startedAt"]), "\(status)")
        XCTAssertLessThanOrEqual(createdAt, started)
        XCTAssertLessThanOrEqual(started, try XCTUnwrap(adminTime(status["finishedAt"]), "\(status)"))
        // Stored: answered without the origin.
        let hit = try client.fetch(["url": urls[0], "cache": ["policy": "cache-only"]])
        XCTAssertEqual(hit.outcome, "stale", hit.text)
        XCTAssertEqual(origin.count("\(base)-0"), 1)
        let list = try client.request("GET", "/cache/warm").json["jobs"] as? [[String: Any]]
        XCTAssertEqual(list?.map { $0["job"] as? String }, [id])
    }

    func testFailuresAreCountedAndListed() throws {
        let larder = try startLarder()
        let created = try postWarmJob(
            try larder.connection(),
            [
                "requests": [
                    ["url": url(uniquePath())],
                    ["url": url(uniquePath(), "status=500&token=s3cret"), "validate": ["status": [200]]],
                    ["url": "http://[::ffff:169.254.169.254]/"]
                ]
            ])
        let id = try XCTUnwrap(created.json["job"] as? String)
        let status = try awaitWarmJob(larder.port, id) { $0["state"] as? String == "done" }
        XCTAssertEqual(status["done"] as? Int, 1)
        XCTAssertEqual(status["failed"] as? Int, 2)
        let errors = status["errors"] as? [[String: Any]] ?? []
        XCTAssertEqual(errors.map { $0["index"] as? Int }.sorted { ($0 ?? 0) < ($1 ?? 0) }, [1, 2])
        XCTAssertEqual(Set(errors.compactMap { $0["code"] as? String }), ["validation_failed", "upstream_forbidden"])
        let failedURL = try XCTUnwrap(errors.first { $0["index"] as? Int == 1 }?["url"] as? String)
        XCTAssertTrue(failedURL.hasSuffix("token=REDACTED"), "--redact-query applies to the job's errors: \(failedURL)")
    }

    func testDeletingAJobAbortsItsTransfers() throws {
        let hanging = try HangingOrigin()
        let larder = try startLarder()
        let client = try larder.connection()
        let created = try postWarmJob(client, ["urls": [hanging.base + "/a", hanging.base + "/b", hanging.base + "/c"], "concurrency": 2])
        let id = try XCTUnwrap(created.json["job"] as? String)
        XCTAssertTrue(hanging.waitForAccepted(2))
        let cancelled = try client.request("DELETE", "/cache/warm/\(id)")
        XCTAssertEqual(cancelled.status, 200)
        XCTAssertEqual(cancelled.json["state"] as? String, "cancelled")
        XCTAssertTrue(hanging.waitForClosed(2), "both transfers in flight were aborted")
        XCTAssertEqual(try client.request("GET", "/cache/warm/\(id)").json["state"] as? String, "cancelled")
        XCTAssertEqual(try client.request("GET", "/cache/warm/nope").status, 404)
        XCTAssertEqual(try client.request("PUT", "/cache/warm/\(id)").status, 405)
    }

    func testACutDownloadIsResumedWithRangeAndStoredWhole() throws {
        let body = (0..<200_000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
        let cut = 70_000
        let origin = try RawOrigin { number, request in
            let text = String(decoding: request, as: UTF8.self)
            if number == 0 {
                // The whole response announced, a part sent, then the connection closed.
                return Array(
                    ("HTTP/1.1 200 OK\r\nContent-Length: \(body.count)\r\nContent-Type: application/octet-stream\r\n"
                        + "ETag: \"v1\"\r\nAccept-Ranges: bytes\r\nCache-Control: max-age=600\r\n\r\n")
                        .utf8)
                    + body[0..<cut]
            }
            guard text.contains("Range: bytes=\(cut)-"), text.contains("If-Range: \"v1\"") else {
                return Array("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n".utf8)
            }
            return Array(
                ("HTTP/1.1 206 Partial Content\r\nContent-Length: \(body.count - cut)\r\n"
                    + "Content-Range: bytes \(cut)-\(body.count - 1)/\(body.count)\r\nETag: \"v1\"\r\n\r\n")
                    .utf8)
                + body[cut...]
        }
        let larder = try startLarder()
        let target = "http://127.0.0.1:\(origin.port)/big.bin"
        let created = try postWarmJob(try larder.connection(), ["urls": [target]])
        let id = try XCTUnwrap(created.json["job"] as? String)
        let status = try awaitWarmJob(larder.port, id) { $0["state"] as? String == "done" }
        XCTAssertEqual(status["stored"] as? Int, 1, "\(status)")
        XCTAssertEqual(origin.requests.count, 2, "one cut transfer, one ranged request")
        let stored = try larder.connection().fetch(["url": target, "cache": ["policy": "cache-only"]])
        XCTAssertEqual(stored.json["bodyBase64"] as? String, Data(body).base64EncodedString(), "byte-identical to the origin's")
    }

    func testAnInvalidJobIsRefusedWhole() throws {
        let larder = try startLarder()
        let client = try larder.connection()
        for (object, field) in [
            (["requests": [["url": url("/x")], ["url": "ftp://x"]]] as [String: Any], "requests[1].url"),
            (["urls": [url("/x")], "requests": []], "urls"),
            (["urls": [url("/x")], "concurency": 2], "concurency")
        ] {
            let response = try postWarmJob(client, object)
            XCTAssertEqual(response.status, 400, field)
            XCTAssertEqual(response.errorField, field, response.text)
        }
        XCTAssertEqual(origin.count("/x"), 0)
    }

    func testAJobSurvivesKill9AndGoesOnWithWhatWasNotStored() throws {
        let base = uniquePath()
        let count = 6
        let urls = (0..<count).map { url("\(base)-\($0)", "delay=300") }
        let (first, firstErrors) = try launch(["serve", "--port", "0", "--db", databasePath, "--no-access-log"])
        defer { if first.isRunning { kill(first.processIdentifier, SIGKILL) } }
        let port = try waitForPort(firstErrors)
        let created = try postWarmJob(try TestConnection(port: port), ["urls": urls, "concurrency": 1, "cache": ["ttl": 600]])
        let id = try XCTUnwrap(created.json["job"] as? String, created.text)
        _ = try awaitWarmJob(port, id) { ($0["done"] as? Int ?? 0) >= 2 }
        kill(first.processIdentifier, SIGKILL)
        XCTAssertTrue(waitForExit(first))

        let (second, secondErrors) = try launch(["serve", "--port", "0", "--db", databasePath, "--no-access-log"])
        defer {
            kill(second.processIdentifier, SIGKILL)
            _ = waitForExit(second)
        }
        let restartedPort = try waitForPort(secondErrors)
        let status = try awaitWarmJob(restartedPort, id, timeout: 30) { $0["state"] as? String == "done" }
        XCTAssertEqual(status["state"] as? String, "done", "\(status)")
        XCTAssertEqual(status["done"] as? Int, count)
        let perURL = (0..<count).map { origin.count("\(base)-\($0)") }
        XCTAssertEqual(perURL.prefix(2), [1, 1], "items stored before the crash were not fetched again")
        XCTAssertTrue(perURL.allSatisfy { $0 >= 1 && $0 <= 2 }, "\(perURL): at most the item in flight at the crash twice")
        for target in urls {
            XCTAssertEqual(try TestConnection(port: restartedPort).fetch(["url": target, "cache": ["ttl": 600]]).outcome, "hit")
        }
    }
}
