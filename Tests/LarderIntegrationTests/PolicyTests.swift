// Every cache.policy, end to end.

import Foundation
import LarderServiceTesting
import XCTest

final class PolicyTests: IntegrationTestCase {
    func testReloadSkipsTheCacheButStores() throws {
        let larder = try startLarder()
        let client = try larder.connection()
        let path = uniquePath()
        XCTAssertEqual(try client.fetch(["url": url(path), "cache": ["ttl": 300]]).outcome, "miss")
        let reloaded = try client.fetch(["url": url(path), "cache": ["ttl": 300, "policy": "reload"]])
        XCTAssertEqual(reloaded.outcome, "miss")
        XCTAssertEqual(reloaded.originCount, 2)
        XCTAssertEqual(reloaded.cache["stored"] as? Bool, true)
        // The reloaded response replaced the entry.
        XCTAssertEqual(try client.fetch(["url": url(path), "cache": ["ttl": 300]]).originCount, 2)
        XCTAssertEqual(origin.count(path), 2)
    }

    func testCacheElseLoadServesStaleEntriesAndLoadsWhenEmpty() throws {
        let larder = try startLarder()
        let client = try larder.connection()
        let path = uniquePath()
        let request: [String: Any] = ["url": url(path), "cache": ["ttl": 10, "policy": "cache-else-load"]]
        XCTAssertEqual(try client.fetch(request).outcome, "miss")
        XCTAssertEqual(try client.fetch(request).outcome, "hit")
        clock.advance(by: 3600)
        let stale = try client.fetch(request)
        XCTAssertEqual(stale.outcome, "stale")
        XCTAssertEqual(stale.headers["x-cache"], "STALE")
        XCTAssertEqual(stale.cache["age"] as? Int, 3600)
        XCTAssertEqual(stale.cache["ttl"] as? Int, 0)
        XCTAssertEqual(origin.count(path), 1)
    }

    func testCacheOnlyFailsWhenNothingIsStoredAndServesAnythingStored() throws {
        let larder = try startLarder()
        let client = try larder.connection()
        let path = uniquePath()
        let cacheOnly: [String: Any] = ["url": url(path), "cache": ["policy": "cache-only"]]
        let missing = try client.fetch(cacheOnly)
        XCTAssertEqual(missing.status, 504)
        XCTAssertEqual(missing.errorCode, "not_cached")
        XCTAssertEqual(origin.count(path), 0)

        XCTAssertEqual(try client.fetch(["url": url(path)]).outcome, "miss")
        clock.advance(by: 7 * 86400)
        let served = try client.fetch(cacheOnly)
        XCTAssertEqual(served.outcome, "stale")
        XCTAssertEqual(origin.count(path), 1)
    }

    func testNoStoreNeitherReadsNorWrites() throws {
        let larder = try startLarder()
        let client = try larder.connection()
        let path = uniquePath()
        XCTAssertEqual(try client.fetch(["url": url(path), "cache": ["ttl": 300]]).outcome, "miss")
        let bypass = try client.fetch(["url": url(path), "cache": ["ttl": 300, "policy": "no-store"]])
        XCTAssertEqual(bypass.outcome, "bypass")
        XCTAssertEqual(bypass.headers["x-cache"], "BYPASS")
        XCTAssertEqual(bypass.cache["stored"] as? Bool, false)
        XCTAssertEqual(bypass.originCount, 2)
        // The earlier entry is untouched (no-store did not overwrite it).
        XCTAssertEqual(try client.fetch(["url": url(path), "cache": ["ttl": 300]]).originCount, 1)

        let never = uniquePath("never")
        _ = try client.fetch(["url": url(never), "cache": ["ttl": 300, "policy": "no-store"]])
        XCTAssertEqual(try client.fetch(["url": url(never), "cache": ["policy": "cache-only"]]).errorCode, "not_cached")
    }

    func testCacheOnlyForAnUncacheableMethodIsABadRequest() throws {
        let larder = try startLarder()
        let client = try larder.connection()
        let response = try client.fetch(["url": url("/x"), "method": "PUT", "cache": ["policy": "cache-only"]])
        XCTAssertEqual(response.status, 400)
        XCTAssertEqual(response.errorField, "cache.policy")
    }
}
