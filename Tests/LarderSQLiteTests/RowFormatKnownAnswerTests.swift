// Known answers for the SQLite row format (issue 35): instances of different releases open the
// same database file (an upgrade keeps the cache; a rollback reads what the newer one wrote), so
// a row as this release writes it is what the next must read.
//
// The row below is frozen, as SQL literals (`quote()` of each column). The columns with an
// encoding of Larder's own are the headers (a JSON object, names lower-cased), the body checksum
// (XXH3-64, big-endian: 8 bytes; a 32-byte one is a SHA-256 from before schema 7), `vary` (the
// names joined by ",") and `tags` (a JSON array). A change that makes these tests fail makes
// every stored row unreadable or different: it needs a schema migration, never an update of
// these literals.

import Foundation
import LarderCore
import LarderEngine
import LarderTesting
import Logging
import XCTest

@testable import LarderSQLite

final class RowFormatKnownAnswerTests: DatabaseTestCase {
    private let logger = Logger(label: "sqlite-row-format-test")

    /// Every column that has a value of Larder's own set: a variant, tags, validators, a sensitive
    /// fingerprint and stale windows.
    private func knownEntry() -> StoredEntry {
        var entry = StoredEntry(
            key: CacheKey(hex: "0123abcd.ef45"), primaryKey: CacheKey(hex: "0123abcd"), varyNames: ["accept", "accept-language"],
            variantFingerprint: "ef45", namespace: "ns", method: .get, url: "https://x.test/a?b=1", urlKey: "https://x.test/a?b=1",
            status: 200, headersJSON: Array(#"{"content-type":"application/json","etag":"\"v1\""}"#.utf8),
            body: Array(#"{"a":[1,2]}"#.utf8), bodyKind: .json,
            freshness: EntryFreshness(
                storedAt: 1_700_000_000.25, freshnessLifetime: 60, version: 3, staleWhileRevalidate: 5, staleIfError: 9.5,
                mustRevalidate: true, initialAge: 2),
            sensitiveFingerprint: "5e", etag: "\"v1\"", lastModified: "Tue, 14 Nov 2023 22:13:20 GMT")
        entry.tags = ["t1", "product-7"]
        return entry
    }

    private static let columns = [
        "key", "namespace", "method", "url", "url_key", "status", "headers", "body", "body_kind", "body_checksum", "stored_at",
        "freshness", "version", "stale_while_revalidate", "stale_if_error", "must_revalidate", "initial_age", "sensitive_fp",
        "etag", "last_modified", "primary_key", "vary", "variant_fp", "body_file", "body_size", "tags"
    ]

    /// `knownEntry()` as a row, one SQL literal per column of `columns`.
    private static let knownRow = [
        "'0123abcd.ef45'", "'ns'", "'GET'", "'https://x.test/a?b=1'", "'https://x.test/a?b=1'", "200",
        "X'7B22636F6E74656E742D74797065223A226170706C69636174696F6E2F6A736F6E222C2265746167223A225C2276315C22227D'",
        "X'7B2261223A5B312C325D7D'", "0", "X'7F671FE78109A6EC'", "1700000000.25", "60.0", "3", "5.0", "9.5", "1", "2.0", "'5e'",
        "'\"v1\"'", "'Tue, 14 Nov 2023 22:13:20 GMT'", "'0123abcd'", "'accept,accept-language'", "'ef45'", "NULL", "11",
        "'[\"t1\",\"product-7\"]'"
    ]

    func testAFixedEntryIsWrittenAsTheKnownRow() throws {
        let store = try SQLiteCacheStore(path: path, logger: logger)
        defer { store.close() }
        save(store, knownEntry())
        let reader = try SQLiteConnection(path: path)
        let row = try reader.prepare("SELECT \(Self.columns.map { "quote(\($0))" }.joined(separator: ", ")) FROM entries")
        XCTAssertTrue(try row.step())
        let literals = (0..<Int32(Self.columns.count)).map { row.string($0) ?? "?" }
        for (index, column) in Self.columns.enumerated() {
            XCTAssertEqual(literals[index], Self.knownRow[index], column)
        }
        XCTAssertFalse(try row.step(), "one row")
        XCTAssertEqual(
            try reader.scalarInt("SELECT count(*) FROM entry_tags WHERE entry = (SELECT rowid FROM entries WHERE key = '0123abcd.ef45')"), 2
        )
    }

    func testTheKnownRowIsReadAsTheFixedEntry() throws {
        // A file as this release leaves it, the row written without Larder's code.
        try SQLiteCacheStore(path: path, logger: logger).close()
        let writer = try SQLiteConnection(path: path)
        try writer.execute(
            """
            INSERT INTO entries (\(Self.columns.joined(separator: ", ")), hits, last_access)
            VALUES (\(Self.knownRow.joined(separator: ", ")), 0, 1700000000.25)
            """)
        let store = try SQLiteCacheStore(path: path, logger: logger)
        defer { store.close() }
        let found = store.lookup(CacheKey(hex: "0123abcd"))
        XCTAssertEqual(found, [knownEntry()], "the variant is found by its primary key, whole")
        XCTAssertEqual(found.first?.headerFields, [HeaderField("content-type", "application/json"), HeaderField("etag", "\"v1\"")])
        XCTAssertNotNil(store.readBody(of: try XCTUnwrap(found.first)), "the checksum matches the body")
    }

    func testTheBodyChecksumIsXXH3BigEndianOrALegacySHA256() {
        // XXH3-64 of no bytes is 0x2D06800538D394C2 (xxHash's own sanity table); of "abc" and of
        // the known row's body as libxxhash's C API gives them, printed with %016llX.
        XCTAssertEqual(BodyChecksum.compute([]), [0x2D, 0x06, 0x80, 0x05, 0x38, 0xD3, 0x94, 0xC2])
        let abc: [UInt8] = Array("abc".utf8)
        XCTAssertEqual(BodyChecksum.compute(abc), [0x78, 0xAF, 0x5F, 0x94, 0x89, 0x2F, 0x39, 0x50])
        abc.withUnsafeBytes { body in
            XCTAssertTrue(BodyChecksum.matches(body, BodyChecksum.compute(abc)))
            // SHA-256("abc") (FIPS 180-2, appendix B.1): a row from before schema 7.
            let sha256: [UInt8] = [
                0xBA, 0x78, 0x16, 0xBF, 0x8F, 0x01, 0xCF, 0xEA, 0x41, 0x41, 0x40, 0xDE, 0x5D, 0xAE, 0x22, 0x23,
                0xB0, 0x03, 0x61, 0xA3, 0x96, 0x17, 0x7A, 0x9C, 0xB4, 0x10, 0xFF, 0x61, 0xF2, 0x00, 0x15, 0xAD
            ]
            XCTAssertTrue(BodyChecksum.matches(body, sha256))
            var damaged = sha256
            damaged[31] ^= 1
            XCTAssertFalse(BodyChecksum.matches(body, damaged))
            XCTAssertFalse(BodyChecksum.matches(body, Array(BodyChecksum.compute(abc).prefix(7))), "no other length is a checksum")
        }
    }
}
