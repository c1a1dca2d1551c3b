// `--memory-mb` bounds what the memory tier really holds: its estimate of an entry
// (`StoredEntry.residentBytes`) is not below what the heap gives the entry and its slot, and
// not so far above that the budget is mostly air. And every shard of the tier is used.

import LarderCore
import LarderEngine
import LarderServiceTesting
import LarderSync
import LarderTesting
import XCTest

final class MemoryTierFootprintTests: XCTestCase {
    /// Keeps nothing, so the heap measured is the tier's alone.
    private final class NullStore: CacheStore {
        func lookup(_ primaryKey: CacheKey) -> [StoredEntry] { [] }
        func save(_ entry: StoredEntry, completion: @escaping @Sendable (Bool) -> Void) { completion(true) }
        func recordHit(_ key: CacheKey, at time: Double) {}
        func invalidate(urlKeys: [String], completion: @escaping @Sendable ([CacheKey]) -> Void) { completion([]) }
        func invalidate(tags: [String], at time: Double, completion: @escaping @Sendable ([CacheKey]) -> Void) { completion([]) }
    }

    private let keys = CacheKeyBuilder(secret: Array(repeating: 9, count: 32))

    /// An entry shaped like one the engine builds from an upstream response (or reads back from
    /// SQLite): an HMAC key, a URL and its normalised form, typical response headers (kept
    /// parsed too in the proxy's namespaces).
    private func entry(_ index: Int, bodyBytes: Int, inFile: Bool, namespace: String) throws -> StoredEntry {
        let url = "https://api.example.test/v1/catalogue/items/\(index).json?fields=name,price"
        let request = try FetchRequest.parse(json: Array(#"{"url":"\#(url)"}"#.utf8))
        let key = keys.derive(for: request).key
        // Values built at run time, as the ones libcurl hands over are (a literal is not on the heap).
        let date = "Tue, 24 Nov 2026 10:\(10 + index % 50):00 GMT"
        let (json, fields) = ResponseHeaders.rendered(
            [
                HeaderField("Content-Type", "application/json; charset=utf-\(8 + index % 1)"),
                HeaderField("Cache-Control", "public, max-age=\(3600 + index % 1)"),
                HeaderField("ETag", "\"\(index)-5f1c2a9e\""),
                HeaderField("Last-Modified", date),
                HeaderField("Date", date),
                HeaderField("Server", "origin/1.\(index % 1)")
            ], dropCookies: true)
        var entry = StoredEntry.fixture(
            key.hex, namespace: namespace, url: url, urlKey: String(url.dropLast(18)), headersJSON: json, headerFields: fields,
            body: inFile ? [] : [UInt8](repeating: UInt8(index & 0x7f), count: bodyBytes), bodyKind: .binary,
            freshness: EntryFreshness(storedAt: 1, freshnessLifetime: 3600, version: 0), etag: "\"\(index)-5f1c2a9e\"",
            lastModified: "\(date)")
        if inFile {
            entry.bodyFile = BodyFile(
                path: "/var/lib/larder/cache.sqlite-bodies/\(key.hex.prefix(2))/\(key.hex)-8f3a2b1c",
                size: bodyBytes, checksum: Array(repeating: 1, count: 8))
        }
        return entry
    }

    func testTheEstimateCoversWhatTheHeapHoldsAndLittleMore() throws {
        // Under a sanitizer another allocator serves the heap and mallinfo2 sees nothing.
        let probe = [UInt8](repeating: 1, count: 4 << 20)
        let visible = glibcHeapInUse() >= probe.count
        withExtendedLifetime(probe) {}
        guard visible else { throw skipOrFail("glibc's heap is not the one in use") }
        let proxy = FetchRequest.reservedNamespacePrefix + "api"
        for (bodyBytes, inFile, namespace) in [
            (1_024, false, ""), (0, false, ""), (65_536, true, ""), (8_000, false, ""), (1_024, false, proxy), (0, false, proxy)
        ] {
            let count = 5_000
            var least = Int.max
            var estimated = 0
            // A thread left over from another test may allocate meanwhile, which only adds: keep the least.
            for _ in 0..<3 {
                let tier = MemoryTier(backing: NullStore(), capacityBytes: Int.max / 2)
                let before = glibcHeapInUse()
                for index in 0..<count { tier.save(try entry(index, bodyBytes: bodyBytes, inFile: inFile, namespace: namespace)) { _ in } }
                least = min(least, glibcHeapInUse() - before)
                estimated = tier.bytes
                withExtendedLifetime(tier) {}
            }
            let shape = "body \(bodyBytes) B\(inFile ? " in a file" : "")\(namespace.isEmpty ? "" : " in \(namespace)")"
            print("memory tier: \(count) entries, \(shape): estimated \(estimated / count) B each, heap \(least / count) B each")
            XCTAssertGreaterThanOrEqual(estimated, least, "the estimate must not be below what the heap holds")
            XCTAssertLessThanOrEqual(Double(estimated), 1.25 * Double(least), "the estimate should be near the heap's figure")
        }
    }

    func testEveryShardTakesItsShareOfTheBudget() throws {
        // 16 shards of 64 KiB each; 4,000 entries of about 1.5 KiB offered, far more than fits.
        let capacity = 1 << 20
        let tier = MemoryTier(backing: NullStore(), capacityBytes: capacity)
        for index in 0..<4_000 { tier.save(try entry(index, bodyBytes: 1_024, inFile: false, namespace: "")) { _ in } }
        // With keys spread over 10 of 16 shards, the tier could fill only 10/16 of its budget.
        XCTAssertGreaterThan(tier.bytes, capacity * 9 / 10, "every shard fills to its share")
        XCTAssertLessThanOrEqual(tier.bytes, capacity)
    }

    func testShardIndexUsesEveryValue() {
        let seen = Set((0..<1_000).map { CacheKey(hex: String(format: "%064x", $0 &* 2_654_435_761)).shardIndex })
        XCTAssertEqual(seen, Set(0..<16))
        XCTAssertEqual(CacheKey(hex: "abcf").shardIndex, 15)
        XCTAssertEqual(CacheKey(hex: "a").shardIndex, 10)
        XCTAssertEqual(CacheKey(hex: "09").shardIndex, 9)
    }
}
