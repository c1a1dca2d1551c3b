// Known answers for the shared store's entry format (issue 35): instances of different releases
// share one Redis (a rolling upgrade), so what one writes the next must read, and the reverse.
//
// The value below is frozen. It was computed once from the format documented in
// Sources/LarderRedis/EntryCodec.swift, both by this code and independently (Python: the fields
// little-endian and length-prefixed after "LRD2", then HMAC-SHA-256 under the HKDF-SHA-256 key
// of the secret with info "larder-redis-entries/1"). A change that makes this test fail makes
// every entry in every shared store unreadable (refused as not authentic or malformed: a miss
// for every key at once); it needs a new magic ("LRD3") and a note in the release, never an
// update of these bytes.

import LarderCore
import LarderEngine
import XCTest

@testable import LarderRedis

final class EntryCodecKnownAnswerTests: XCTestCase {
    /// A fixed instance secret: bytes 0, 1, …, 31.
    private let codec = EntryCodec(secret: Array(0..<32))

    /// Every field set, a text body with a non-ASCII byte, one optional field absent.
    private func knownEntry() -> StoredEntry {
        var entry = StoredEntry(
            key: CacheKey(hex: "0123abcd.ef45"), primaryKey: CacheKey(hex: "0123abcd"), varyNames: ["accept", "accept-language"],
            variantFingerprint: "ef45", namespace: "ns", method: .post, url: "https://x.test/a?b=1", urlKey: "https://x.test/a?b=1",
            status: 200, headersJSON: Array(#"{"content-type":"text/plain"}"#.utf8), body: Array("héllo".utf8), bodyKind: .text,
            freshness: EntryFreshness(
                storedAt: 1_700_000_000.25, freshnessLifetime: 60, version: 3, staleWhileRevalidate: 5, staleIfError: 9.5,
                mustRevalidate: false, initialAge: 2),
            sensitiveFingerprint: "5e", etag: "\"v1\"", lastModified: nil)
        entry.tags = ["t1", "t2"]
        return entry
    }

    /// `knownEntry()` sealed under the fixed secret: the payload, then the 32-byte tag (the last
    /// 64 hex digits).
    private static let knownValueHex = [
        "4c5244320d0000000000000030313233616263642e656634350800000000000000303132336162636416000000000000006163636570742c",
        "6163636570742d6c616e677561676504000000000000006566343502000000000000006e730400000000000000504f535414000000000000",
        "0068747470733a2f2f782e746573742f613f623d31140000000000000068747470733a2f2f782e746573742f613f623d31c8000000000000",
        "001d000000000000007b22636f6e74656e742d74797065223a22746578742f706c61696e227d060000000000000068c3a96c6c6f01000000",
        "0000000000001040fc54d9410000000000004e40030000000000000000000000000014400000000000002340000000000000000000000000",
        "0000004002000000000000003565040000000000000022763122ffffffffffffffff02000000000000000200000000000000743102000000",
        "0000000074323e2ba61d7a52741c936f365a2893b258fe620e2ebb6aaecbf341926799eb1590"
    ].joined()

    private static func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }

    private static func bytes(_ hex: String) -> [UInt8] {
        let digits = Array(hex.utf8)
        return stride(from: 0, to: digits.count, by: 2).map { UInt8(String(decoding: digits[$0..<$0 + 2], as: UTF8.self), radix: 16)! }
    }

    func testAFixedEntryEncodesToTheKnownValue() {
        XCTAssertEqual(Self.hex(codec.encode(knownEntry())), Self.knownValueHex)
    }

    func testTheKnownValueDecodesToTheFixedEntry() throws {
        let decoded = try codec.decode(Self.bytes(Self.knownValueHex))
        XCTAssertEqual(decoded, knownEntry())
        // Fields `==` does not compare, derived on reading.
        XCTAssertEqual(decoded.headerFields, [HeaderField("content-type", "text/plain")])
        XCTAssertNil(decoded.bodyFile)
    }

    func testTheKnownValueIsRefusedUnderAnotherSecretAndWhenOneBitChanges() {
        let value = Self.bytes(Self.knownValueHex)
        XCTAssertThrowsError(try EntryCodec(secret: Array(1...32)).decode(value)) {
            XCTAssertEqual($0 as? EntryCodec.Rejection, .notAuthentic)
        }
        var damaged = value
        damaged[damaged.count - 1] ^= 0x80
        XCTAssertThrowsError(try codec.decode(damaged)) { XCTAssertEqual($0 as? EntryCodec.Rejection, .notAuthentic) }
    }
}
