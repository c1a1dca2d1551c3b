// POST /fetch end to end: a real Larder on a loopback port, a real origin that counts
// requests, real SQLite files. A hit is proven by the origin's counter not moving. The caching
// rules themselves are tested through the engine (LarderSemanticsTests); these are what only the
// wire shows: the envelope and X-Cache as sent, what libcurl sends upstream, a cookie on the wire.

import Foundation
import LarderServiceTesting
import XCTest

final class FetchCachingTests: IntegrationTestCase {
    func testSecondCallWithinTTLIsAHitThatNeverReachesTheOrigin() throws {
        let larder = try startLarder()
        let client = try larder.connection()
        let path = uniquePath()
        let request: [String: Any] = ["url": url(path, "page=1"), "cache": ["ttl": 300, "version": 2]]

        let first = try client.fetch(request)
        XCTAssertEqual(first.status, 200)
        XCTAssertEqual(first.outcome, "miss")
        XCTAssertEqual(first.headers["x-cache"], "MISS")
        XCTAssertEqual(first.cache["stored"] as? Bool, true)
        XCTAssertEqual(first.cache["ttl"] as? Int, 300)
        XCTAssertEqual(first.cache["version"] as? Int, 2)
        XCTAssertEqual(first.json["status"] as? Int, 200)
        XCTAssertEqual(first.upstreamBody["path"] as? String, path)
        XCTAssertNotNil((first.json["timing"] as? [String: Any])?["upstreamMs"] as? Double)

        clock.advance(by: 12)
        let second = try client.fetch(request)
        XCTAssertEqual(second.outcome, "hit")
        XCTAssertEqual(second.headers["x-cache"], "HIT")
        XCTAssertEqual(second.cache["age"] as? Int, 12)
        XCTAssertEqual(second.cache["ttl"] as? Int, 288)
        XCTAssertEqual(second.cache["key"] as? String, first.cache["key"] as? String)
        XCTAssertTrue((second.json["timing"] as? [String: Any])?["upstreamMs"] is NSNull)
        XCTAssertEqual(second.upstreamBody["n"] as? Int, 1)
        XCTAssertEqual(origin.count(path), 1)
    }

    func testCallerHeadersAreForwarded() throws {
        let larder = try startLarder()
        let client = try larder.connection()
        let path = uniquePath()
        _ = try client.fetch(["url": url(path), "headers": ["X-Trace": "abc", "Accept": "application/json"]])
        let received = try XCTUnwrap(origin.requests(path).first)
        XCTAssertEqual(received.headers["x-trace"], "abc")
        XCTAssertEqual(received.headers["accept"], "application/json")
        XCTAssertEqual(received.headers["host"], "127.0.0.1:\(origin.port)")
        XCTAssertTrue(received.headers["user-agent"]?.hasPrefix("larder/") ?? false)
    }

    func testSetCookieIsPassedOnAMissButNeverStored() throws {
        let larder = try startLarder()
        let client = try larder.connection()
        let path = uniquePath()
        let request: [String: Any] = ["url": url(path, "h=Set-Cookie:session%3Dsecret-cookie-value"), "cache": ["ttl": 60]]
        let miss = try client.fetch(request)
        XCTAssertEqual((miss.json["headers"] as? [String: String])?["set-cookie"], "session=secret-cookie-value")
        let hit = try client.fetch(request)
        XCTAssertEqual(hit.outcome, "hit")
        XCTAssertNil((hit.json["headers"] as? [String: String])?["set-cookie"])
    }
}
