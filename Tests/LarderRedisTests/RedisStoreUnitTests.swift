// The shared store's pure parts: the entry codec (round trip; damage and truncation are
// refused), Redis Cluster key slots, command routing, and store addresses.

@testable import LarderRedis
import LarderCore
import LarderEngine
import XCTest

final class RedisStoreUnitTests: XCTestCase {
    private func entry() -> StoredEntry {
        var entry = StoredEntry(key: CacheKey(hex: "ab12.cd"), primaryKey: CacheKey(hex: "ab12"), varyNames: ["accept-language"],
                                variantFingerprint: "cd", namespace: "ns", method: .get, url: "https://x.test/a?b=1",
                                urlKey: "https://x.test/a?b=1", status: 203, headersJSON: Array(#"{"a":"b"}"#.utf8),
                                body: Array(repeating: 7, count: 3000), bodyKind: .binary,
                                freshness: EntryFreshness(storedAt: 1000.5, freshnessLifetime: 60, version: 3, staleWhileRevalidate: 5,
                                                          staleIfError: 9, mustRevalidate: true, initialAge: 2),
                                sensitiveFingerprint: nil, etag: "\"e\"", lastModified: nil)
        entry.tags = ["t1", "t2"]
        return entry
    }

    func testAnEntryRoundTripsThroughTheCodec() {
        XCTAssertEqual(EntryCodec.decode(EntryCodec.encode(entry())), entry())
    }

    func testDamagedOrTruncatedValuesAreRefused() {
        let encoded = EntryCodec.encode(entry())
        for offset in [4, 100, encoded.count / 2, encoded.count - 1] {
            var damaged = encoded
            damaged[offset] ^= 0x01
            XCTAssertNil(EntryCodec.decode(damaged), "a flipped bit at \(offset)")
        }
        XCTAssertNil(EntryCodec.decode(Array(encoded.dropLast(10))))
        XCTAssertNil(EntryCodec.decode(Array("LRD1".utf8)))
        XCTAssertNil(EntryCodec.decode([]))
    }

    func testClusterSlotsFollowTheHashTag() {
        // The reference value from the Redis Cluster specification.
        XCTAssertEqual(RedisCluster.slot(of: Array("123456789".utf8)), 12739)
        XCTAssertEqual(RedisCluster.slot(of: Array("larder:{abc}:e".utf8)), RedisCluster.slot(of: Array("larder:{abc}:lease".utf8)))
        XCTAssertEqual(RedisCluster.slot(of: Array("x{}y".utf8)), RedisCluster.slot(of: Array("x{}y".utf8)))
        XCTAssertNotEqual(RedisCluster.slot(of: Array("x{}y".utf8)), RedisCluster.slot(of: Array("{}".utf8)), "an empty tag hashes the whole key")
    }

    func testCommandsAreRoutedByTheirKey() {
        func route(_ words: [String]) -> String? { routingKey(words.map { Array($0.utf8) }).map { String(decoding: $0, as: UTF8.self) } }
        XCTAssertEqual(route(["HGETALL", "k"]), "k")
        XCTAssertEqual(route(["EVAL", "script", "1", "k", "a"]), "k")
        XCTAssertNil(route(["EVAL", "script", "0"]))
        XCTAssertNil(route(["PUBLISH", "channel", "m"]))
    }

    func testStoreAddresses() throws {
        let address = try RedisAddress(url: "redis://user:p%40ss@cache.internal:6380/2")
        XCTAssertEqual(address.host, "cache.internal")
        XCTAssertEqual(address.port, 6380)
        XCTAssertEqual(address.user, "user")
        XCTAssertEqual(address.password, "p@ss")
        XCTAssertEqual(address.database, 2)
        XCTAssertFalse(address.display.contains("p@ss"))
        XCTAssertThrowsError(try RedisAddress(url: "rediss://cache:6379"))
        XCTAssertThrowsError(try RedisAddress(url: "http://cache:6379"))
        XCTAssertThrowsError(try RedisCluster(url: "redis-cluster://", timeoutMs: 100))
    }
}
