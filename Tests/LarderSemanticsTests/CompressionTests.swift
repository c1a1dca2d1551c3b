// Bodies compressed at rest (CompressionRules, ZstdCodec): what is stored is smaller, what is
// served is the body as the origin sent it, byte for byte, on every path that reads a stored
// entry (a hit, a revalidation, a restart); what should not be compressed is stored as it came.

import Foundation
import LarderCore
import LarderEngine
import LarderTesting
import LarderZstd
import XCTest

final class CompressionTests: SemanticsTestCase {
    override func setUp() {
        super.setUp()
        bodyCodec = ZstdCodec()
    }

    /// The rows stored under the key the answer reports.
    private func storedRows(_ answer: TestResponse) throws -> [StoredEntry] {
        store.lookup(CacheKey(hex: try XCTUnwrap(answer.cache["key"] as? String)))
    }

    func testAJSONBodyIsStoredCompressedAndServedByteForByte() throws {
        try onEachStore {
            let path = uniquePath()
            let spec: [String: Any] = ["url": url(path, "jsonsize=8000&cc=max-age%3D600")]
            let miss = fetch(spec)
            XCTAssertEqual(miss.outcome, "miss")
            let sent = try XCTUnwrap(miss.json["body"] as? [Any])
            let row = try XCTUnwrap(try storedRows(miss).first)
            XCTAssertEqual(row.bodyCoding, .zstd)
            XCTAssertLessThan(row.body.count, 8000 / 4, "stored compressed: \(row.body.count) bytes")
            let hit = fetch(spec)
            XCTAssertEqual(hit.outcome, "hit")
            XCTAssertEqual(hit.json["body"] as? NSArray, sent as NSArray)
            XCTAssertEqual(origin.count(path), 1)
            XCTAssertEqual(engine.compressionFigures.stored, 1)
            XCTAssertGreaterThan(engine.compressionFigures.savedBytes, 6000)
        }
    }

    func testTheProxySendsTheBodyAsTheOriginSentIt() throws {
        try onEachStore {
            let path = uniquePath()
            let first = try proxy("\(path)?text=20000&cc=max-age%3D600")
            let expected = OriginScript.fill(path: path, size: 20000)
            XCTAssertEqual(first.served?.body, expected)
            let hit = try proxy("\(path)?text=20000&cc=max-age%3D600")
            XCTAssertEqual(hit.outcome, .hit)
            XCTAssertEqual(hit.served?.body, expected)
            XCTAssertEqual(origin.count(path), 1)
        }
    }

    func testCompressedEntriesReadAfterARestart() throws {
        try onEachStore(persistent: true) {
            let path = uniquePath()
            let spec: [String: Any] = ["url": url(path, "jsonsize=4000&cc=max-age%3D600")]
            let miss = fetch(spec)
            try reopenStore()
            let hit = fetch(spec)
            XCTAssertEqual(hit.outcome, "hit")
            XCTAssertEqual(hit.json["body"] as? NSArray, miss.json["body"] as? NSArray)
            XCTAssertEqual(try storedRows(hit).first?.bodyCoding, .zstd)
            XCTAssertEqual(origin.count(path), 1)
        }
    }

    func testARevalidatedEntryStaysCompressedAndWhole() throws {
        try onEachStore {
            let path = uniquePath()
            let spec: [String: Any] = ["url": url(path, "jsonsize=4000&cc=max-age%3D10&etag=%22v1%22")]
            let miss = fetch(spec)
            clock.advance(by: 20)
            let revalidated = fetch(spec)
            XCTAssertEqual(revalidated.outcome, "revalidated")
            XCTAssertEqual(revalidated.json["body"] as? NSArray, miss.json["body"] as? NSArray)
            XCTAssertEqual(try storedRows(revalidated).first?.bodyCoding, .zstd)
            XCTAssertEqual(fetch(spec).json["body"] as? NSArray, miss.json["body"] as? NSArray)
            XCTAssertEqual(origin.count(path), 2)
            XCTAssertEqual(engine.compressionFigures.stored, 1, "a 304's refresh is not a new compressed body")
        }
    }

    func testWhatShouldNotBeCompressedIsStoredAsItCame() throws {
        try onEachStore {
            let cases = [
                ("encoded by the origin", "text=4000&h=Content-Encoding:gzip"),
                ("too small", "text=300"),
                ("a type not listed", "fill=4000"),
                ("a body that would not shrink enough", "binary=1")
            ]
            for (reason, query) in cases {
                let path = uniquePath() + reason.filter(\.isLetter)
                let miss = fetch(["url": url(path, query + "&cc=max-age%3D600")])
                XCTAssertEqual(try storedRows(miss).first?.bodyCoding, .identity, reason)
            }
            var off = FetchEngine.Limits()
            off.compression = .off
            restartEngine(limits: off)
            let path = uniquePath()
            let miss = fetch(["url": url(path, "jsonsize=4000&cc=max-age%3D600")])
            XCTAssertEqual(try storedRows(miss).first?.bodyCoding, .identity, "compression off")
        }
    }

    func testEntriesStayReadableWhenCompressionIsTurnedOff() throws {
        try onEachStore {
            let path = uniquePath()
            let spec: [String: Any] = ["url": url(path, "jsonsize=4000&cc=max-age%3D600")]
            let miss = fetch(spec)
            var off = FetchEngine.Limits()
            off.compression = .off
            restartEngine(limits: off)
            let hit = fetch(spec)
            XCTAssertEqual(hit.outcome, "hit")
            XCTAssertEqual(hit.json["body"] as? NSArray, miss.json["body"] as? NSArray)
        }
    }

    func testADamagedCompressedBodyIsAMissNeverServed() throws {
        try onEachStore {
            let path = uniquePath()
            let spec: [String: Any] = ["url": url(path, "jsonsize=4000&cc=max-age%3D600")]
            let miss = fetch(spec)
            var damaged = try XCTUnwrap(try storedRows(miss).first)
            damaged.body[damaged.body.count / 2] ^= 0xFF
            damaged.body.removeLast(7)
            let saved = DispatchSemaphore(value: 0)
            store.save(damaged) { _ in saved.signal() }
            XCTAssertEqual(saved.wait(timeout: .now() + 10), .success)
            let again = fetch(spec)
            XCTAssertEqual(again.outcome, "miss", again.text)
            XCTAssertEqual(origin.count(path), 2)
        }
    }
}
