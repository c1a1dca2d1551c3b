// The shared store's pure parts: the entry codec (round trip; damage, truncation, values
// written without the secret and hostile fields are refused, never a trap), Redis Cluster key
// slots, command routing, and store addresses.

import CXXHash
import LarderCore
import LarderEngine
import LarderTesting
import XCTest

@testable import LarderRedis

final class RedisStoreUnitTests: XCTestCase {
    private func entry() -> StoredEntry {
        .fixture(
            "ab12.cd", primaryKey: "ab12", varyNames: ["accept-language"], variantFingerprint: "cd", namespace: "ns",
            url: "https://x.test/a?b=1", urlKey: "https://x.test/a?b=1", status: 203, headersJSON: Array(#"{"a":"b"}"#.utf8),
            body: Array(repeating: 7, count: 3000), bodyKind: .binary,
            freshness: EntryFreshness(
                storedAt: 1000.5, freshnessLifetime: 60, version: 3, staleWhileRevalidate: 5,
                staleIfError: 9, mustRevalidate: true, initialAge: 2),
            etag: "\"e\"", tags: ["t1", "t2"])
    }

    private let codec = EntryCodec(secret: Array(repeating: 1, count: 32))

    func testATakenLeaseSaysHowLongToWaitWithinWhatALeaseCanLast() {
        let wait = RedisCacheStore.remainingMilliseconds
        XCTAssertEqual(wait("instance-a 10500", 10_000, 30_000, 1000), 500)
        XCTAssertEqual(wait("instance-a 99999999", 10_000, 30_000, 1000), 30_000, "a deadline past the longest lease is not believed")
        XCTAssertEqual(wait("instance-a 9000", 10_000, 30_000, 1000), 10, "already lapsed: look again at once")
        XCTAssertEqual(wait("dead-instance", 10_000, 30_000, 1000), 1000, "a value without a deadline (another version)")
        XCTAssertEqual(wait(nil, 10_000, 30_000, 1000), 1000)
        XCTAssertEqual(wait("a b", 10_000, 30_000, 700), 700)
    }

    func testAnEntryRoundTripsThroughTheCodec() throws {
        XCTAssertEqual(try codec.decode(codec.encode(entry())), entry())
        var text = entry()
        text.body = Array("héllo\n".utf8)
        text.bodyKind = .text
        text.varyNames = []
        text.key = text.primaryKey
        XCTAssertEqual(try codec.decode(codec.encode(text)), text)
    }

    func testACompressedBodyRoundTripsMarkedInTheKindsField() throws {
        var compressed = entry()
        compressed.body = [0x28, 0xB5, 0x2F, 0xFD, 0xFF, 0x00] // not JSON: checked by its codec when read, not here
        compressed.bodyKind = .json
        compressed.bodyCoding = .zstd
        let decoded = try codec.decode(codec.encode(compressed))
        XCTAssertEqual(decoded.bodyCoding, .zstd)
        XCTAssertEqual(decoded, compressed)
        // Uncompressed values are what earlier versions wrote: the kind alone.
        var plain = entry()
        plain.bodyKind = .binary
        XCTAssertEqual(try codec.decode(codec.encode(plain)).bodyCoding, .identity)
        // A coding no Larder writes is malformed.
        let payload = EntryCodec.payload(compressed)
        var unknown = payload
        let kindOffset = try XCTUnwrap(kindFieldOffset(in: payload, kindValue: 16))
        unknown[kindOffset] = 0x30
        XCTAssertThrowsError(try codec.decode(codec.sealed(unknown)))
    }

    /// Where the body kind's field (little-endian `kindValue`) sits in a payload: the first
    /// place it appears after the body.
    private func kindFieldOffset(in payload: [UInt8], kindValue: UInt8) -> Int? {
        let field: [UInt8] = [kindValue, 0, 0, 0, 0, 0, 0, 0]
        let body: [UInt8] = [0x28, 0xB5, 0x2F, 0xFD, 0xFF, 0x00]
        guard let bodyAt = (0...(payload.count - body.count)).first(where: { Array(payload[$0..<($0 + body.count)]) == body }) else {
            return nil
        }
        let after = bodyAt + body.count
        return Array(payload[after..<(after + 8)]) == field ? after : nil
    }

    /// Operators issue: the caller's ttl an entry was stored under goes to Redis too (the admin
    /// listing and the `expired` filter read it there), as one field after the tags, so a value
    /// without it is what earlier versions wrote and read.
    func testTheTTLAnEntryWasStoredUnderRoundTripsAfterTheTags() throws {
        var withTTL = entry()
        withTTL.freshness.storedTTL = 3600
        let decoded = try codec.decode(codec.encode(withTTL))
        XCTAssertEqual(decoded.freshness.storedTTL, 3600)
        XCTAssertEqual(decoded.freshness.expiresAt, 4600.5)
        XCTAssertEqual(EntryCodec.payload(withTTL), EntryCodec.payload(entry()) + EntryCodec.payload(withTTL).suffix(8))
        XCTAssertNil(try codec.decode(codec.encode(entry())).freshness.storedTTL)
        for hostile in [-1, Double.nan, Double.infinity, 2e12] {
            let payload = EntryCodec.payload(entry()) + withUnsafeBytes(of: hostile.bitPattern.littleEndian, Array.init)
            XCTAssertThrowsError(try codec.decode(codec.sealed(payload)), "ttl \(hostile)")
        }
    }

    /// A soft purge's time follows the ttl field (-1 when there is none); values without it are
    /// what earlier versions wrote.
    func testASoftPurgesTimeRoundTripsAfterTheTTL() throws {
        var marked = entry()
        marked.freshness.invalidatedAt = 2000
        let decoded = try codec.decode(codec.encode(marked))
        XCTAssertEqual(decoded.freshness.invalidatedAt, 2000)
        XCTAssertNil(decoded.freshness.storedTTL)
        XCTAssertEqual(decoded, marked)
        marked.freshness.storedTTL = 3600
        XCTAssertEqual(try codec.decode(codec.encode(marked)).freshness.storedTTL, 3600)
        XCTAssertEqual(try codec.decode(codec.encode(marked)).freshness.invalidatedAt, 2000)
        XCTAssertEqual(EntryCodec.payload(entry()).count + 16, EntryCodec.payload(marked).count)
        let none = withUnsafeBytes(of: (-1.0).bitPattern.littleEndian, Array.init)
        for hostile in [-2, Double.nan, Double.infinity, 2e12] {
            let payload = EntryCodec.payload(entry()) + none + withUnsafeBytes(of: hostile.bitPattern.littleEndian, Array.init)
            XCTAssertThrowsError(try codec.decode(codec.sealed(payload)), "soft purge at \(hostile)")
        }
    }

    func testDamagedOrTruncatedValuesAreRefused() {
        let encoded = codec.encode(entry())
        for offset in [4, 100, encoded.count / 2, encoded.count - 1] {
            var damaged = encoded
            damaged[offset] ^= 0x01
            XCTAssertThrowsError(try codec.decode(damaged), "a flipped bit at \(offset)")
        }
        for length in 0..<encoded.count {
            XCTAssertThrowsError(try codec.decode(Array(encoded.prefix(length))), "cut to \(length) bytes")
        }
        XCTAssertThrowsError(try codec.decode(encoded + [0]))
        XCTAssertThrowsError(try codec.decode(Array("LRD2".utf8)))
    }

    // MARK: - Security review (issue 32, item 2): values written by someone else

    func testAValueWrittenWithAnotherSecretOrWithAChecksumIsNotAuthentic() {
        let other = EntryCodec(secret: Array(repeating: 2, count: 32))
        XCTAssertThrowsError(try codec.decode(other.encode(entry()))) { XCTAssertEqual($0 as? EntryCodec.Rejection, .notAuthentic) }
        // The former format (an XXH3-64 anyone can compute again) and a tag of the right size
        // that is not the HMAC.
        var payload = EntryCodec.payload(entry())
        payload.replaceSubrange(0..<4, with: Array("LRD1".utf8))
        let checksum = payload.withUnsafeBytes { XXH3_64bits($0.baseAddress, $0.count) }
        XCTAssertThrowsError(try codec.decode(payload + withUnsafeBytes(of: checksum.littleEndian, Array.init)))
        XCTAssertThrowsError(try codec.decode(EntryCodec.payload(entry()) + Array(repeating: 0xAB, count: 32))) {
            XCTAssertEqual($0 as? EntryCodec.Rejection, .notAuthentic)
        }
    }

    /// The entry's fields in the codec's order, to be altered one at a time.
    private enum Field {
        case string(String?)
        case bytes([UInt8])
        case integer(Int64)
        case double(Double)
        /// A length prefix that says `length`, followed by `bytes`.
        case lying(length: Int64, bytes: [UInt8])
    }

    private func fields() -> [Field] {
        [
            .string("ab12.cd"), .string("ab12"), .string("accept-language"), .string("cd"), .string("ns"), .string("GET"),
            .string("https://x.test/a?b=1"), .string("https://x.test/a?b=1"), .integer(203), .bytes(Array(#"{"a":"b"}"#.utf8)),
            .bytes(Array(repeating: 7, count: 3000)), .integer(2), .double(1000.5), .double(60), .integer(3), .double(5), .double(9),
            .integer(1), .double(2), .string(nil), .string("\"e\""), .string(nil), .integer(2), .string("t1"), .string("t2")
        ]
    }

    private func payload(_ fields: [Field]) -> [UInt8] {
        var out = Array("LRD2".utf8)
        func integer(_ value: Int64) { withUnsafeBytes(of: value.littleEndian) { out.append(contentsOf: $0) } }
        for field in fields {
            switch field {
            case .string(nil): integer(-1)
            case .string(let text?):
                integer(Int64(text.utf8.count))
                out += Array(text.utf8)
            case .bytes(let bytes):
                integer(Int64(bytes.count))
                out += bytes
            case .integer(let value): integer(value)
            case .double(let value): integer(Int64(bitPattern: value.bitPattern))
            case .lying(let length, let bytes):
                integer(length)
                out += bytes
            }
        }
        return out
    }

    /// `fields` with the one at `index` replaced, sealed with the right secret: what only a
    /// holder of the secret could write, so that the field checks alone stand in the way.
    private func authentic(_ index: Int, _ field: Field) -> [UInt8] {
        var altered = fields()
        altered[index] = field
        return codec.sealed(payload(altered))
    }

    func testHostileFieldsInAnAuthenticValueAreRefusedWithoutTrapping() {
        XCTAssertEqual(payload(fields()), EntryCodec.payload(entry()), "the test writes the codec's format")
        XCTAssertNoThrow(try codec.decode(codec.sealed(payload(fields()))))
        let huge = Int64.max
        let hostile: [(String, Int, Field)] = [
            ("a body length of 2^63-1", 10, .lying(length: huge, bytes: [])),
            ("a header length of 2^63-1", 9, .lying(length: huge, bytes: [])),
            ("a key length of 2^63-1", 0, .lying(length: huge, bytes: [])),
            ("a body length one past the end", 10, .lying(length: 3000 + 200, bytes: Array(repeating: 7, count: 3000))),
            ("a negative length", 10, .lying(length: -2, bytes: [])),
            ("an absent key (-1)", 0, .string(nil)),
            ("an infinite lifetime", 13, .double(.infinity)),
            ("a NaN lifetime", 13, .double(.nan)),
            ("a negative lifetime", 13, .double(-1)),
            ("a huge lifetime", 13, .double(1e300)),
            ("an infinite store time", 12, .double(.infinity)),
            ("a NaN initial age", 18, .double(.nan)),
            ("an infinite stale-if-error", 16, .double(-.infinity)),
            ("a huge stale-while-revalidate", 15, .double(.greatestFiniteMagnitude)),
            ("a status out of range", 8, .integer(Int64.min)),
            ("a body kind out of range", 11, .integer(Int64.max)),
            ("a must-revalidate flag of 2", 17, .integer(2)),
            ("a version out of range", 14, .integer(Int64.max)),
            ("a tag count of 2^63-1", 22, .integer(huge)),
            ("a negative tag count", 22, .integer(-1)),
            ("a method that is not a token", 5, .string("G T")),
            ("headers that are not a JSON object", 9, .bytes(Array("[1]".utf8))),
            ("a key that is not the primary key's", 0, .string("ffff.cd")),
            ("a key with a quote", 0, .string("ab12.\"")),
            ("a primary key that is not hex", 1, .string("{ab12}")),
            ("a namespace of 1 MB", 4, .string(String(repeating: "n", count: 1 << 20))),
            ("invalid UTF-8 in the URL", 6, .bytes([0x68, 0xFF, 0xFE])),
            ("an invalid Vary name", 2, .string("accept language")),
            ("an invalid tag", 23, .string("a,b"))
        ]
        for (name, index, field) in hostile {
            XCTAssertThrowsError(try codec.decode(authentic(index, field)), name) {
                XCTAssertEqual($0 as? EntryCodec.Rejection, .malformed, name)
            }
        }
        // Body kinds whose bodies are embedded in answers must hold what they say.
        var json = fields()
        json[11] = .integer(0)
        json[10] = .bytes(Array(#"{"a": [1, 2"#.utf8))
        XCTAssertThrowsError(try codec.decode(codec.sealed(payload(json))), "a JSON body that is not JSON")
        var text = fields()
        text[11] = .integer(1)
        text[10] = .bytes([0x61, 0xC3])
        XCTAssertThrowsError(try codec.decode(codec.sealed(payload(text))), "a text body that is not UTF-8")
        // Cut at every field boundary and inside every field, then sealed.
        let whole = payload(fields())
        for length in stride(from: 4, to: whole.count, by: 7) {
            XCTAssertThrowsError(try codec.decode(codec.sealed(Array(whole.prefix(length)))), "cut to \(length) bytes")
        }
        XCTAssertThrowsError(try codec.decode(codec.sealed(whole + [0])), "a byte past the last field")
    }

    func testClusterSlotsFollowTheHashTag() {
        // The reference value from the Redis Cluster specification.
        XCTAssertEqual(RedisCluster.slot(of: Array("123456789".utf8)), 12739)
        XCTAssertEqual(RedisCluster.slot(of: Array("larder:{abc}:e".utf8)), RedisCluster.slot(of: Array("larder:{abc}:lease".utf8)))
        XCTAssertEqual(RedisCluster.slot(of: Array("x{}y".utf8)), RedisCluster.slot(of: Array("x{}y".utf8)))
        XCTAssertNotEqual(
            RedisCluster.slot(of: Array("x{}y".utf8)), RedisCluster.slot(of: Array("{}".utf8)), "an empty tag hashes the whole key")
    }

    func testCommandsAreRoutedByTheirKey() {
        func route(_ words: [String]) -> String? { routingKey(words.map { Array($0.utf8) }).map { String(decoding: $0, as: UTF8.self) } }
        XCTAssertEqual(route(["HGETALL", "k"]), "k")
        XCTAssertEqual(route(["EVAL", "script", "1", "k", "a"]), "k")
        XCTAssertNil(route(["EVAL", "script", "0"]))
        XCTAssertNil(route(["PUBLISH", "channel", "m"]))
    }

    /// Admission on the shared store: Redis is full at 90% of its maxmemory, never without one;
    /// a reply without both figures says nothing.
    func testRedisIsFullAtNinetyPercentOfItsMaxmemory() {
        let info = "# Memory\r\nused_memory:950000\r\nused_memory_human:927.73K\r\nmaxmemory:1000000\r\nmaxmemory_policy:allkeys-lfu\r\n"
        XCTAssertEqual(RedisMemory(info: info), RedisMemory(used: 950_000, limit: 1_000_000))
        XCTAssertEqual(RedisMemory(info: info)?.isFull, true)
        XCTAssertFalse(RedisMemory(used: 899_999, limit: 1_000_000).isFull)
        XCTAssertTrue(RedisMemory(used: 900_000, limit: 1_000_000).isFull)
        XCTAssertFalse(RedisMemory(used: 5_000_000, limit: 0).isFull, "no maxmemory: Redis never evicts")
        XCTAssertNil(RedisMemory(info: "# Memory\r\nused_memory:1\r\n"))
        XCTAssertNil(RedisMemory(info: "used_memory:x\r\nmaxmemory:10\r\n"))
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
