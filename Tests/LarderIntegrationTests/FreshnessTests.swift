// RFC 9111 freshness end to end: the age a response arrives with, heuristic freshness, and
// which statuses are kept.

import Foundation
import LarderCore
import LarderServiceTesting
import XCTest

final class FreshnessIntegrationTests: IntegrationTestCase {
    func testTheAgeAResponseArrivesWithCountsAgainstItsFreshness() throws {
        let larder = try startLarder()
        let client = try larder.connection()
        let path = uniquePath()
        // An upstream cache already held this response for 40 of its 60 seconds.
        let request: [String: Any] = ["url": url(path, "cc=max-age%3D60&h=Age:40")]
        let miss = try client.fetch(request)
        XCTAssertEqual(miss.cache["age"] as? Int, 40)
        XCTAssertEqual(miss.cache["ttl"] as? Int, 20)
        clock.advance(by: 15)
        let hit = try client.fetch(request)
        XCTAssertEqual(hit.outcome, "hit")
        XCTAssertEqual(hit.cache["age"] as? Int, 55)
        clock.advance(by: 10)
        XCTAssertEqual(try client.fetch(request).outcome, "miss", "60 seconds of age reached")
    }

    func testHeuristicFreshnessFromLastModified() throws {
        let larder = try startLarder()
        let client = try larder.connection()
        let path = uniquePath()
        let lastModified = HTTPDate.format(clock.now - 10_000).addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
        let request: [String: Any] = ["url": url(path, "lm=\(lastModified)")]
        let miss = try client.fetch(request)
        XCTAssertEqual(miss.cache["ttl"] as? Int, 1_000, "a tenth of the 10 000 s since Last-Modified")
        clock.advance(by: 999)
        XCTAssertEqual(try client.fetch(request).outcome, "hit")
        XCTAssertEqual(origin.count(path), 1)
    }

    func testErrorsAreKeptOnlyWhenTheOriginMakesThemFresh() throws {
        let larder = try startLarder()
        let client = try larder.connection()
        let cached = uniquePath("cached")
        let first = try client.fetch(["url": url(cached, "status=404&cc=max-age%3D30")])
        XCTAssertEqual(first.cache["stored"] as? Bool, true)
        let second = try client.fetch(["url": url(cached, "status=404&cc=max-age%3D30")])
        XCTAssertEqual(second.outcome, "hit")
        XCTAssertEqual(second.json["status"] as? Int, 404)
        XCTAssertEqual(origin.count(cached), 1)

        let plain = uniquePath("plain")
        XCTAssertEqual(try client.fetch(["url": url(plain, "status=500")]).cache["notStoredBecause"] as? String, "status_not_cacheable")
        XCTAssertEqual(try client.fetch(["url": url(plain, "status=500")]).outcome, "miss")
        XCTAssertEqual(origin.count(plain), 2)
    }
}

final class RequestDirectiveTests: IntegrationTestCase {
    private func fetch(
        _ client: TestConnection, _ path: String, _ cacheControl: String? = nil,
        pragma: String? = nil
    ) throws -> TestResponse {
        var headers: [String: String] = [:]
        if let cacheControl { headers["Cache-Control"] = cacheControl }
        if let pragma { headers["Pragma"] = pragma }
        return try client.fetch(["url": url(path, "cc=max-age%3D60"), "headers": headers])
    }

    func testNoCacheAndPragmaGoToTheOrigin() throws {
        let larder = try startLarder()
        let client = try larder.connection()
        let path = uniquePath()
        XCTAssertEqual(try fetch(client, path).outcome, "miss")
        XCTAssertEqual(try fetch(client, path, "no-cache").outcome, "miss")
        XCTAssertEqual(try fetch(client, path, pragma: "no-cache").outcome, "miss")
        XCTAssertEqual(origin.count(path), 3)
    }

    func testMaxAgeMinFreshAndMaxStale() throws {
        let larder = try startLarder()
        let client = try larder.connection()
        let path = uniquePath()
        XCTAssertEqual(try fetch(client, path).outcome, "miss")
        clock.advance(by: 30)
        XCTAssertEqual(try fetch(client, path, "max-age=40").outcome, "hit")
        XCTAssertEqual(try fetch(client, path, "max-age=20").outcome, "miss", "too old for this caller")
        clock.advance(by: 50)
        XCTAssertEqual(try fetch(client, path, "min-fresh=20").outcome, "miss", "only 10 s of freshness left")
        clock.advance(by: 70)
        XCTAssertEqual(try fetch(client, path, "max-stale=60").outcome, "stale", "10 s stale, 60 accepted")
        XCTAssertEqual(try fetch(client, path, "max-stale=5").outcome, "miss")
        XCTAssertEqual(origin.count(path), 4)
    }

    func testOnlyIfCachedNeverReachesTheOrigin() throws {
        let larder = try startLarder()
        let client = try larder.connection()
        let path = uniquePath()
        let missing = try fetch(client, path, "only-if-cached")
        XCTAssertEqual(missing.status, 504)
        XCTAssertEqual(missing.errorCode, "not_cached")
        XCTAssertEqual(origin.count(path), 0)
        XCTAssertEqual(try fetch(client, path).outcome, "miss")
        XCTAssertEqual(try fetch(client, path, "only-if-cached").outcome, "hit")
    }

    func testRequestNoStoreIsNotStored() throws {
        let larder = try startLarder()
        let client = try larder.connection()
        let path = uniquePath()
        let response = try fetch(client, path, "no-store")
        XCTAssertEqual(response.cache["notStoredBecause"] as? String, "request_no_store")
        XCTAssertEqual(try fetch(client, path).outcome, "miss")
    }
}
