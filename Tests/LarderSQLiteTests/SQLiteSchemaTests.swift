// The schema's migrations (Sources/LarderSQLite/Schema): older databases migrated keeping their
// entries and tags; a newer one refused.

import Crypto
import Foundation
import LarderCore
import XCTest

@testable import LarderEngine
@testable import LarderSQLite

final class SQLiteSchemaTests: SQLiteStoreTestCase {
    func testAVersion1DatabaseIsMigratedKeepingItsEntries() throws {
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let old = try SQLiteConnection(path: path)
        try old.execute("PRAGMA journal_mode = WAL")
        try old.execute(Schema.migrations[0])
        try old.execute("PRAGMA user_version = 1")
        try old.execute(
            """
            INSERT INTO entries (key, namespace, method, url, status, headers, body, body_kind, body_sha256, stored_at,
                                 freshness, version, hits, last_access)
            VALUES ('old', 'default', 'GET', 'http://a.test/', 200, X'7B7D', X'5B315D', 0,
                    X'\(SHA256.hash(data: Array("[1]".utf8)).map { String(format: "%02X", $0) }.joined())', 5, 60, 0, 0, 5)
            """)
        let store = try SQLiteCacheStore(path: path, logger: logger)
        defer { store.close() }
        XCTAssertEqual(try SQLiteConnection(path: path).scalarInt("PRAGMA user_version"), SQLiteCacheStore.schemaVersion)
        // Its SHA-256 (the checksum before schema 7) is still checked and accepted.
        let migrated = try XCTUnwrap(store.lookup(CacheKey(hex: "old")).first)
        XCTAssertEqual(migrated.body, Array("[1]".utf8))
        XCTAssertEqual(migrated.freshness, EntryFreshness(storedAt: 5, freshnessLifetime: 60, version: 0))
        // New columns round-trip.
        var fresh = entry("new")
        fresh.freshness = EntryFreshness(
            storedAt: 1, freshnessLifetime: 2, version: 3, staleWhileRevalidate: 4, staleIfError: 5,
            mustRevalidate: true, storedTTL: 6)
        save(store, fresh)
        XCTAssertEqual(store.lookup(CacheKey(hex: "new")).first?.freshness, fresh.freshness)
        // The row from before has no ttl: its expiry is its HTTP freshness, as before.
        XCTAssertEqual(store.records(primaryKey: CacheKey(hex: "old")).first?.expiresAt, 65)
        XCTAssertEqual(store.records(primaryKey: CacheKey(hex: "new")).first?.expiresAt, 7)
    }

    /// Schema 15 names tagged rows by rowid: the tags of rows written before it still purge
    /// them, and a row replaced afterwards leaves no tag entry behind.
    func testTagsOfRowsFromSchema14AreKeptByTheMigration() throws {
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let old = try SQLiteConnection(path: path)
        try old.execute("PRAGMA journal_mode = WAL")
        for migration in Schema.migrations.prefix(14) { try old.execute(migration) }
        try old.execute("PRAGMA user_version = 14")
        for (rowid, key) in [(1, "a"), (2, "b"), (3, "c")] {
            try old.execute(
                """
                INSERT INTO entries (rowid, key, primary_key, namespace, method, url, status, headers, body, body_kind,
                                     body_checksum, stored_at, freshness, version, hits, last_access, tags)
                VALUES (\(rowid), '\(key)', '\(key)', 'default', 'GET', 'http://a.test/\(key)', 200, X'7B7D', X'5B315D', 0,
                        X'\(BodyChecksum.compute(Array("[1]".utf8)).map { String(format: "%02X", $0) }.joined())', 5, 60, 0, 0, 5,
                        '\(key == "c" ? "[\"other\"]" : "[\"t\",\"u\"]")')
                """)
        }
        let store = try SQLiteCacheStore(path: path, logger: logger)
        defer { store.close() }
        let reader = try SQLiteConnection(path: path)
        XCTAssertEqual(try reader.scalarInt("SELECT count(*) FROM entry_tags"), 5)
        var replaced = entry("b")
        replaced.tags = ["v"]
        save(store, replaced)
        store.commitAndWait()
        XCTAssertEqual(try reader.scalarInt("SELECT count(*) FROM entry_tags WHERE tag IN ('t', 'u')"), 2, "b's old tags left with its row")
        let purged = expectation(description: "purged")
        var filter = PurgeFilter()
        filter.tags = ["t"]
        store.purge(filter) { result in
            XCTAssertEqual(result.removed, 1)
            purged.fulfill()
        }
        wait(for: [purged], timeout: 10)
        XCTAssertNil(store.lookup(CacheKey(hex: "a")).first)
        XCTAssertNotNil(store.lookup(CacheKey(hex: "b")).first, "stored again under another tag")
        XCTAssertNotNil(store.lookup(CacheKey(hex: "c")).first)
        XCTAssertEqual(try reader.scalarInt("SELECT count(*) FROM entry_tags"), 2, "b's v and c's other")
    }

    func testADatabaseFromANewerLarderIsRefused() throws {
        let store = try SQLiteCacheStore(path: path, logger: logger)
        store.close()
        try SQLiteConnection(path: path).execute("PRAGMA user_version = 99")
        XCTAssertThrowsError(try SQLiteCacheStore(path: path, logger: logger))
    }
}
