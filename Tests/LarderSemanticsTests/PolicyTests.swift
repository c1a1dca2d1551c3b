// Every cache.policy.

import Foundation
import LarderTesting
import XCTest

final class PolicyTests: SemanticsTestCase {
    func testReloadSkipsTheCacheButStores() throws {
        try onEachStore {
            let path = uniquePath()
            XCTAssertEqual(fetch(["url": url(path), "cache": ["ttl": 300]]).outcome, "miss")
            let reloaded = fetch(["url": url(path), "cache": ["ttl": 300, "policy": "reload"]])
            XCTAssertEqual(reloaded.outcome, "miss")
            XCTAssertEqual(reloaded.originCount, 2)
            XCTAssertEqual(reloaded.cache["stored"] as? Bool, true)
            // The reloaded response replaced the entry.
            XCTAssertEqual(fetch(["url": url(path), "cache": ["ttl": 300]]).originCount, 2)
            XCTAssertEqual(origin.count(path), 2)
        }
    }

    func testCacheElseLoadServesStaleEntriesAndLoadsWhenEmpty() throws {
        try onEachStore {
            let path = uniquePath()
            let request: [String: Any] = ["url": url(path), "cache": ["ttl": 10, "policy": "cache-else-load"]]
            XCTAssertEqual(fetch(request).outcome, "miss")
            XCTAssertEqual(fetch(request).outcome, "hit")
            clock.advance(by: 3600)
            let stale = fetch(request)
            XCTAssertEqual(stale.outcome, "stale")
            XCTAssertEqual(stale.headers["x-cache"], "STALE")
            XCTAssertEqual(stale.cache["age"] as? Int, 3600)
            XCTAssertEqual(stale.cache["ttl"] as? Int, 0)
            XCTAssertEqual(origin.count(path), 1)
        }
    }

    func testCacheOnlyFailsWhenNothingIsStoredAndServesAnythingStored() throws {
        try onEachStore {
            let path = uniquePath()
            let cacheOnly: [String: Any] = ["url": url(path), "cache": ["policy": "cache-only"]]
            let missing = fetch(cacheOnly)
            XCTAssertEqual(missing.status, 504)
            XCTAssertEqual(missing.errorCode, "not_cached")
            XCTAssertEqual(origin.count(path), 0)

            XCTAssertEqual(fetch(["url": url(path)]).outcome, "miss")
            clock.advance(by: 7 * 86400)
            let served = fetch(cacheOnly)
            XCTAssertEqual(served.outcome, "stale")
            XCTAssertEqual(origin.count(path), 1)
        }
    }

    func testNoStoreNeitherReadsNorWrites() throws {
        try onEachStore {
            let path = uniquePath()
            XCTAssertEqual(fetch(["url": url(path), "cache": ["ttl": 300]]).outcome, "miss")
            let bypass = fetch(["url": url(path), "cache": ["ttl": 300, "policy": "no-store"]])
            XCTAssertEqual(bypass.outcome, "bypass")
            XCTAssertEqual(bypass.headers["x-cache"], "BYPASS")
            XCTAssertEqual(bypass.cache["stored"] as? Bool, false)
            XCTAssertEqual(bypass.originCount, 2)
            // The earlier entry is untouched (no-store did not overwrite it).
            XCTAssertEqual(fetch(["url": url(path), "cache": ["ttl": 300]]).originCount, 1)

            let never = uniquePath("never")
            _ = fetch(["url": url(never), "cache": ["ttl": 300, "policy": "no-store"]])
            XCTAssertEqual(fetch(["url": url(never), "cache": ["policy": "cache-only"]]).errorCode, "not_cached")
        }
    }

    func testCacheOnlyForAnUncacheableMethodIsABadRequest() throws {
        try onEachStore {
            let response = fetch(["url": url("/x"), "method": "PUT", "cache": ["policy": "cache-only"]])
            XCTAssertEqual(response.status, 400)
            XCTAssertEqual(response.errorField, "cache.policy")
        }
    }
}
