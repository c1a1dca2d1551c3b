// RFC 9111 freshness: the age a response arrives with, heuristic freshness, and
// which statuses are kept.

import Foundation
import LarderCore
import LarderTesting
import XCTest

final class FreshnessTests: SemanticsTestCase {
    func testTheAgeAResponseArrivesWithCountsAgainstItsFreshness() throws {
        try onEachStore {
            let path = uniquePath()
            // An upstream cache already held this response for 40 of its 60 seconds.
            let request: [String: Any] = ["url": url(path, "cc=max-age%3D60&h=Age:40")]
            let miss = fetch(request)
            XCTAssertEqual(miss.cache["age"] as? Int, 40)
            XCTAssertEqual(miss.cache["ttl"] as? Int, 20)
            clock.advance(by: 15)
            let hit = fetch(request)
            XCTAssertEqual(hit.outcome, "hit")
            XCTAssertEqual(hit.cache["age"] as? Int, 55)
            clock.advance(by: 10)
            XCTAssertEqual(fetch(request).outcome, "miss", "60 seconds of age reached")
        }
    }

    func testHeuristicFreshnessFromLastModified() throws {
        try onEachStore {
            let path = uniquePath()
            let lastModified = HTTPDate.format(clock.now - 10_000).addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
            let request: [String: Any] = ["url": url(path, "lm=\(lastModified)")]
            let miss = fetch(request)
            XCTAssertEqual(miss.cache["ttl"] as? Int, 1_000, "a tenth of the 10 000 s since Last-Modified")
            clock.advance(by: 999)
            XCTAssertEqual(fetch(request).outcome, "hit")
            XCTAssertEqual(origin.count(path), 1)
        }
    }

    func testErrorsAreKeptOnlyWhenTheOriginMakesThemFresh() throws {
        try onEachStore {
            let cached = uniquePath("cached")
            let first = fetch(["url": url(cached, "status=404&cc=max-age%3D30")])
            XCTAssertEqual(first.cache["stored"] as? Bool, true)
            let second = fetch(["url": url(cached, "status=404&cc=max-age%3D30")])
            XCTAssertEqual(second.outcome, "hit")
            XCTAssertEqual(second.json["status"] as? Int, 404)
            XCTAssertEqual(origin.count(cached), 1)

            let plain = uniquePath("plain")
            XCTAssertEqual(fetch(["url": url(plain, "status=500")]).cache["notStoredBecause"] as? String, "status_not_cacheable")
            XCTAssertEqual(fetch(["url": url(plain, "status=500")]).outcome, "miss")
            XCTAssertEqual(origin.count(plain), 2)
        }
    }
}

final class RequestDirectiveTests: SemanticsTestCase {
    private func fetch(
        _ path: String, _ cacheControl: String? = nil,
        pragma: String? = nil
    ) throws -> TestResponse {
        var headers: [String: String] = [:]
        if let cacheControl { headers["Cache-Control"] = cacheControl }
        if let pragma { headers["Pragma"] = pragma }
        return fetch(["url": url(path, "cc=max-age%3D60"), "headers": headers])
    }

    func testNoCacheAndPragmaGoToTheOrigin() throws {
        try onEachStore {
            let path = uniquePath()
            XCTAssertEqual(try fetch(path).outcome, "miss")
            XCTAssertEqual(try fetch(path, "no-cache").outcome, "miss")
            XCTAssertEqual(try fetch(path, pragma: "no-cache").outcome, "miss")
            XCTAssertEqual(origin.count(path), 3)
        }
    }

    func testMaxAgeMinFreshAndMaxStale() throws {
        try onEachStore {
            let path = uniquePath()
            XCTAssertEqual(try fetch(path).outcome, "miss")
            clock.advance(by: 30)
            XCTAssertEqual(try fetch(path, "max-age=40").outcome, "hit")
            XCTAssertEqual(try fetch(path, "max-age=20").outcome, "miss", "too old for this caller")
            clock.advance(by: 50)
            XCTAssertEqual(try fetch(path, "min-fresh=20").outcome, "miss", "only 10 s of freshness left")
            clock.advance(by: 70)
            XCTAssertEqual(try fetch(path, "max-stale=60").outcome, "stale", "10 s stale, 60 accepted")
            XCTAssertEqual(try fetch(path, "max-stale=5").outcome, "miss")
            XCTAssertEqual(origin.count(path), 4)
        }
    }

    func testOnlyIfCachedNeverReachesTheOrigin() throws {
        try onEachStore {
            let path = uniquePath()
            let missing = try fetch(path, "only-if-cached")
            XCTAssertEqual(missing.status, 504)
            XCTAssertEqual(missing.errorCode, "not_cached")
            XCTAssertEqual(origin.count(path), 0)
            XCTAssertEqual(try fetch(path).outcome, "miss")
            XCTAssertEqual(try fetch(path, "only-if-cached").outcome, "hit")
        }
    }

    func testRequestNoStoreIsNotStored() throws {
        try onEachStore {
            let path = uniquePath()
            let response = try fetch(path, "no-store")
            XCTAssertEqual(response.cache["notStoredBecause"] as? String, "request_no_store")
            XCTAssertEqual(try fetch(path).outcome, "miss")
        }
    }
}
