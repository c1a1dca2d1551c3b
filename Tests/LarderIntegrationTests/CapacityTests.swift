// Capacity through the real server: the database stays under --max-bytes while three times
// that volume is fetched, and responses over --max-object-bytes are served but not stored.

import Foundation
import LarderCore
import LarderService
import LarderServiceTesting
import XCTest

final class CapacityTests: IntegrationTestCase {
    func testTheDatabaseStaysUnderMaxBytesWhileThreeTimesThatIsFetched() throws {
        let maxBytes = 2 << 20
        let larder = try startLarder { configuration in
            configuration.maxBytes = maxBytes
            configuration.memoryCapacityBytes = 0
        }
        let client = try larder.connection()
        let base = uniquePath()
        // 20 KB bodies (inline rows): 300 of them are 6 MB. The file is measured after every
        // fetch: a sample every 25 could miss the peak.
        var peak = 0
        for index in 0..<300 {
            XCTAssertEqual(try client.fetch(["url": url("\(base)/\(index)", "size=20000"), "cache": ["ttl": 600]]).status, 200)
            let size = try XCTUnwrap(FileManager.default.attributesOfItem(atPath: databasePath)[.size] as? Int)
            peak = max(peak, size)
        }
        let stats = try client.request("GET", "/cache/stats").json["stored"] as? [String: Any] ?? [:]
        XCTAssertLessThanOrEqual(stats["bytes"] as? Int ?? .max, maxBytes)
        XCTAssertGreaterThan(stats["evictions"] as? Int ?? 0, 150)
        XCTAssertEqual(stats["capacityBytes"] as? Int, maxBytes)
        XCTAssertLessThanOrEqual(peak, maxBytes * 115 / 100, "the database file (its WAL aside) follows --max-bytes")
        // The most recent responses are the ones kept.
        XCTAssertEqual(try client.fetch(["url": url("\(base)/299", "size=20000"), "cache": ["ttl": 600]]).outcome, "hit")
        XCTAssertEqual(try client.fetch(["url": url("\(base)/0", "size=20000"), "cache": ["ttl": 600]]).outcome, "miss")
    }

    func testAResponseOverMaxObjectBytesIsServedButNotStored() throws {
        // 5% of 1 MiB is 52,428 bytes.
        let client = try startLarder { $0.maxBytes = 1 << 20 }.connection()
        let path = uniquePath()
        let large = try client.fetch(["url": url(path, "size=60000"), "cache": ["ttl": 600]])
        XCTAssertEqual(large.status, 200)
        XCTAssertEqual((large.json["bodyText"] as? String)?.count, 60000, "served whole")
        XCTAssertEqual(large.cache["stored"] as? Bool, false)
        XCTAssertEqual(large.cache["notStoredBecause"] as? String, "object_too_large")
        XCTAssertEqual(try client.fetch(["url": url(path, "size=60000"), "cache": ["ttl": 600]]).outcome, "miss")
        XCTAssertEqual(try client.fetch(["url": url(path, "size=40000"), "cache": ["ttl": 600]]).cache["stored"] as? Bool, true)
    }
}
