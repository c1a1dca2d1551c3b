// Revalidating stale entries with their validators (RFC 9111 §4.3).

import Foundation
import LarderTesting
import XCTest

final class RevalidationTests: SemanticsTestCase {
    func testStaleEntryWithETagIsRevalidatedAnd304ServesTheStoredBody() throws {
        try onEachStore {
            let path = uniquePath()
            let request: [String: Any] = ["url": url(path, "etag=%22v1%22&cc=max-age%3D10")]
            XCTAssertEqual(fetch(request).outcome, "miss")
            clock.advance(by: 20)
            let revalidated = fetch(request)
            XCTAssertEqual(revalidated.outcome, "revalidated")
            XCTAssertEqual(revalidated.headers["x-cache"], "REVALIDATED")
            XCTAssertEqual(revalidated.json["status"] as? Int, 200, "the stored response, not the 304")
            XCTAssertEqual(revalidated.originCount, 1, "the stored body")
            XCTAssertEqual(revalidated.cache["ttl"] as? Int, 10, "freshness restarts from the 304")
            XCTAssertEqual(origin.requests(path).last?.headers["if-none-match"], "\"v1\"")
            XCTAssertEqual(origin.count(path), 2)
            // Fresh again: a hit without asking.
            XCTAssertEqual(fetch(request).outcome, "hit")
            XCTAssertEqual(origin.count(path), 2)
        }
    }

    func testLastModifiedIsUsedWhenThereIsNoETag() throws {
        try onEachStore {
            let path = uniquePath()
            let date = "Sun, 06 Nov 1994 08:49:37 GMT"
            let request: [String: Any] = [
                "url": url(path, "lm=\(date.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!)"),
                "cache": ["ttl": 5]
            ]
            XCTAssertEqual(fetch(request).outcome, "miss")
            clock.advance(by: 10)
            XCTAssertEqual(fetch(request).outcome, "revalidated")
            XCTAssertEqual(origin.requests(path).last?.headers["if-modified-since"], date)
            XCTAssertNil(origin.requests(path).last?.headers["if-none-match"])
        }
    }

    func testA304UpdatesTheStoredHeaders() throws {
        try onEachStore {
            let path = uniquePath()
            func fetch(version: Int) throws -> TestResponse {
                self.fetch(["url": url(path, "etag=%22e%22&cc=max-age%3D10&h=X-Version:\(version)"), "cache": ["ignoreQuery": ["h"]]])
            }
            let first = try fetch(version: 1)
            XCTAssertEqual((first.json["headers"] as? [String: String])?["x-version"], "1")
            clock.advance(by: 20)
            let revalidated = try fetch(version: 2)
            XCTAssertEqual(revalidated.outcome, "revalidated")
            XCTAssertEqual((revalidated.json["headers"] as? [String: String])?["x-version"], "2")
            XCTAssertEqual(
                (revalidated.json["headers"] as? [String: String])?["content-type"], "application/json", "kept from the stored response")
            let hit = try fetch(version: 3)
            XCTAssertEqual(hit.outcome, "hit")
            XCTAssertEqual((hit.json["headers"] as? [String: String])?["x-version"], "2", "stored from the 304")
        }
    }

    func testTheCallersOwnConditionalRequestIsPassedThrough() throws {
        try onEachStore {
            let path = uniquePath()
            let response = fetch(["url": url(path, "etag=%22x%22"), "headers": ["If-None-Match": "\"x\""]])
            XCTAssertEqual(response.json["status"] as? Int, 304)
            XCTAssertEqual(response.cache["stored"] as? Bool, false)
        }
    }

    func testNoValidatorMeansAFullFetch() throws {
        try onEachStore {
            let path = uniquePath()
            let request: [String: Any] = ["url": url(path, "cc=max-age%3D10")]
            XCTAssertEqual(fetch(request).outcome, "miss")
            clock.advance(by: 20)
            XCTAssertEqual(fetch(request).outcome, "miss")
            XCTAssertNil(origin.requests(path).last?.headers["if-none-match"])
        }
    }
}
