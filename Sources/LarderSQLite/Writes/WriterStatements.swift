// The writer connection's statements, prepared once when the store opens so no write parses SQL.

/// Used on the writer queue only, as the writer connection is.
struct WriterStatements {
    let insert: SQLiteStatement
    let dropOtherVariants: SQLiteStatement
    let trimVariants: SQLiteStatement
    let selectByURL: SQLiteStatement
    let deleteByURL: SQLiteStatement
    let deleteDamaged: SQLiteStatement
    let selectDeadFiles: SQLiteStatement
    let deleteDeadFile: SQLiteStatement
    /// Read after every group commit (capacity).
    let selectUsedBytes: SQLiteStatement
    /// Statement journals in memory, for a group commit (see `commitGroup`), and back.
    let journalsInMemory: SQLiteStatement
    let journalsInFiles: SQLiteStatement
    /// The rows of an object the admission policy evicted: by its key's first 16 bytes (?1, and
    /// ?2 that prefix and "\u{7F}"), or by the whole key when it is shorter (PolicyKey).
    let deleteEvictedByPrefix: SQLiteStatement
    let deleteEvictedWhole: SQLiteStatement
    /// Whether a primary key (?1) has a row left (forgetInPolicy).
    let selectRowOfPrimaryKey: SQLiteStatement
    /// What each budgeted namespace holds (SQLiteCacheStore+NamespaceBudgets.swift).
    let selectNamespaceUsage: SQLiteStatement

    init(_ writer: SQLiteConnection) throws(SQLiteError) {
        insert = try writer.prepare(
            """
            INSERT OR REPLACE INTO entries
              (key, namespace, method, url, status, headers, body, body_kind, body_checksum, stored_at,
               freshness, version, sensitive_fp, etag, last_modified, hits, last_access,
               stale_while_revalidate, stale_if_error, must_revalidate, initial_age, url_key,
               primary_key, vary, variant_fp, body_file, body_size, tags, rowid, ttl, invalidated_at, body_coding)
            VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, 0, ?10, ?16, ?17, ?18, ?19, ?20,
                    ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30)
            """)
        selectDeadFiles = try writer.prepare("SELECT path FROM dead_files LIMIT 1024")
        deleteDeadFile = try writer.prepare("DELETE FROM dead_files WHERE path = ?1")
        selectUsedBytes = try writer.prepare("SELECT bytes FROM usage WHERE id = 1")
        deleteDamaged = try writer.prepare("DELETE FROM entries WHERE key = ?1 AND body_checksum = ?2")
        selectByURL = try writer.prepare("SELECT DISTINCT primary_key FROM entries WHERE url_key = ?1")
        dropOtherVariants = try writer.prepare("DELETE FROM entries WHERE \(Schema.rowsOfPrimaryKey("?1")) AND vary <> ?2")
        trimVariants = try writer.prepare(
            """
            DELETE FROM entries WHERE \(Schema.rowsOfPrimaryKey("?1")) AND key NOT IN
              (SELECT key FROM entries WHERE \(Schema.rowsOfPrimaryKey("?1")) ORDER BY stored_at DESC LIMIT CAST(?2 AS INTEGER))
            """)
        deleteByURL = try writer.prepare("DELETE FROM entries WHERE url_key = ?1")
        journalsInMemory = try writer.prepare("PRAGMA temp_store = MEMORY")
        journalsInFiles = try writer.prepare("PRAGMA temp_store = DEFAULT")
        deleteEvictedByPrefix = try writer.prepare("DELETE FROM entries WHERE key >= ?1 AND key < ?2 RETURNING primary_key")
        deleteEvictedWhole = try writer.prepare("DELETE FROM entries WHERE \(Schema.rowsOfPrimaryKey("?1")) RETURNING primary_key")
        selectRowOfPrimaryKey = try writer.prepare("SELECT 1 FROM entries WHERE \(Schema.rowsOfPrimaryKey("?1")) LIMIT 1")
        selectNamespaceUsage = try writer.prepare("SELECT namespace, entries, bytes FROM namespace_usage")
    }
}
