// Listing entries for the admin API (GET /cache/entries, GET /cache/entries/{key}) and the
// namespace versions (POST /cache/namespaces/{ns}/version).

import CSQLite
import Foundation
public import LarderCore
public import LarderEngine

extension SQLiteCacheStore {
    static let recordColumns = """
        primary_key, key, namespace, method, url, status, \(entryBytesSQL), stored_at,
        \(expiresAtSQL), \(staleUntilSQL), version, tags, hits, last_access,
        etag, last_modified, vary
        """

    public func list(_ filter: PurgeFilter, after cursor: String?, limit: Int) -> EntryPage {
        var filter = filter
        if filter.isEmpty { filter.all = true }
        let (condition, bind) = Self.condition(for: filter)
        // Past any index the filter's own parameters use.
        let cursorIndex = Int32(900)
        let sql =
            "SELECT \(Self.recordColumns) FROM entries WHERE (\(condition))"
            + (cursor == nil ? "" : " AND key > ?\(cursorIndex)") + " ORDER BY key LIMIT \(limit + 1)"
        guard
            let records = readRecords(
                sql,
                bind: { statement throws(SQLiteError) in
                    try bind(statement)
                    if let cursor { try statement.bind(cursorIndex, cursor) }
                })
        else {
            var failed = EntryPage()
            failed.failed = true
            return failed
        }
        var page = EntryPage()
        page.records = Array(records.prefix(limit))
        if records.count > limit { page.nextCursor = page.records.last?.rowKey.hex }
        return page
    }

    public func records(primaryKey: CacheKey) -> [EntryRecord] {
        readRecords(
            "SELECT \(Self.recordColumns) FROM entries WHERE \(Schema.rowsOfPrimaryKey("?1")) ORDER BY stored_at",
            bind: { statement throws(SQLiteError) in try statement.bind(1, primaryKey.hex) }) ?? []
    }

    /// Runs a record query on the writer, after committing pending saves (so a listing shows
    /// what requests have seen), with the hits counted in memory added; nil when it fails.
    private func readRecords(_ sql: String, bind: (SQLiteStatement) throws(SQLiteError) -> Void) -> [EntryRecord]? {
        writerQueue.sync { () -> [EntryRecord]? in
            commitAllPending()
            do {
                let statement = try writer.prepare(sql)
                try bind(statement)
                var records: [EntryRecord] = []
                while try statement.step() {
                    let vary = statement.string(16) ?? ""
                    let primaryKey = CacheKey(hex: statement.string(0) ?? "")
                    let usage = usage(of: primaryKey)
                    records.append(
                        EntryRecord(
                            key: primaryKey, rowKey: CacheKey(hex: statement.string(1) ?? ""),
                            namespace: statement.string(2) ?? "", method: statement.string(3) ?? "", url: statement.string(4) ?? "",
                            status: Int(statement.int64(5)), bytes: Int(statement.int64(6)), storedAt: statement.double(7),
                            expiresAt: statement.double(8), staleUntil: statement.double(9), version: statement.int64(10),
                            tags: Self.tags(fromJSON: statement.string(11)), hits: Int(statement.int64(12)) + Int(usage?.hits ?? 0),
                            lastAccessAt: max(statement.double(13), Double(usage?.lastHit ?? 0)), etag: statement.string(14),
                            lastModified: statement.string(15),
                            varies: vary.isEmpty ? [] : vary.split(separator: ",").map(String.init)))
                }
                return records
            } catch {
                logger.error("cannot list entries", metadata: ["error": "\(error)"])
                return nil
            }
        }
    }

    // MARK: - Namespace versions

    public func namespaceVersions() -> [String: Int64] {
        writerQueue.sync {
            var versions: [String: Int64] = [:]
            do {
                let statement = try writer.prepare("SELECT namespace, version FROM namespace_versions")
                while try statement.step() { versions[statement.string(0) ?? ""] = statement.int64(1) }
            } catch {
                logger.error("cannot read namespace versions", metadata: ["error": "\(error)"])
            }
            return versions
        }
    }

    public func setNamespaceVersion(_ namespace: String, to version: Int64, completion: @escaping @Sendable (Bool) -> Void) {
        writerQueue.async { [self] in
            // Closed (shutting down): the file may be another store's by now.
            guard !closed.load(ordering: .relaxed) else { return completion(false) }
            do {
                // One row, however many entries the namespace holds: the bump touches no entry.
                let statement = try writer.prepare(
                    """
                    INSERT INTO namespace_versions (namespace, version) VALUES (?1, ?2)
                    ON CONFLICT (namespace) DO UPDATE SET version = excluded.version
                    """)
                try statement.bind(1, namespace)
                try statement.bind(2, version)
                _ = try statement.step()
                completion(true)
            } catch {
                logger.error("cannot record a namespace version", metadata: ["namespace": "\(namespace)", "error": "\(error)"])
                completion(false)
            }
        }
    }
}
