// A thin owner for SQLite connections and statements. One Swift object per C handle, freed in
// deinit; every result code converted to SQLiteError at one choke point (`check`).

import CSQLite

#if canImport(Glibc)
    import Glibc
#endif

public struct SQLiteError: Error, CustomStringConvertible, Sendable {
    public let code: Int32
    public let message: String
    public let context: String
    public var description: String { "SQLite error \(code) (\(context)): \(message)" }
    /// The file is not a database, or is damaged (SQLITE_NOTADB, SQLITE_CORRUPT).
    public var isDamagedFile: Bool { code == 26 || code == 11 }
}

/// A connection is used by one thread at a time (opened with SQLITE_OPEN_NOMUTEX); the owner
/// of each connection guarantees that, so it is not Sendable.
final class SQLiteConnection {
    let handle: OpaquePointer
    /// BEGIN, COMMIT and ROLLBACK, prepared on first use so a transaction parses no SQL. Raw
    /// handles, not SQLiteStatements: those keep their connection alive, and this one keeps them.
    private var transactionStatements: [String: OpaquePointer] = [:]
    /// What the WAL hook calls (`afterEachCommit`); kept here so it lives as long as the handle.
    private var commitObserver: CommitObserver?

    /// Set once, before the first connection initialises SQLite. False if something in the
    /// process initialised it first (SQLITE_MISUSE): its statistics then stay on, which costs
    /// speed only; the store logs it.
    static let memoryStatisticsOff: Bool = larder_sqlite3_config_no_memory_statistics() == SQLITE_OK

    /// Opens `path` with the default VFS, or the one named `vfs` (MappedReads).
    init(path: String, readOnly: Bool = false, vfs: String? = nil) throws(SQLiteError) {
        _ = Self.memoryStatisticsOff
        var handle: OpaquePointer?
        let flags = (readOnly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) | SQLITE_OPEN_NOMUTEX
        let code = sqlite3_open_v2(path, &handle, flags, vfs)
        guard code == SQLITE_OK, let handle else {
            let message = handle.map { String(cString: sqlite3_errmsg($0)) } ?? "cannot open"
            sqlite3_close_v2(handle)
            throw SQLiteError(code: code, message: message, context: "open \(path)")
        }
        self.handle = handle
        sqlite3_extended_result_codes(handle, 1)
    }

    deinit {
        for statement in transactionStatements.values { sqlite3_finalize(statement) }
        sqlite3_close_v2(handle)
    }

    /// From now on this connection changes nothing in the file: writes fail (`query_only`), and
    /// its close, whenever its last statement is freed, neither checkpoints nor deletes the WAL
    /// and shared-memory files (which SQLite does by name when it closes the file's last
    /// connection). For a connection that outlives the lock on its file.
    func stopWriting() throws(SQLiteError) {
        try check(larder_sqlite3_no_checkpoint_on_close(handle), "no checkpoint on close")
        try execute("PRAGMA query_only = ON")
    }

    func check(_ code: Int32, _ context: @autoclosure () -> String) throws(SQLiteError) {
        guard code == SQLITE_OK || code == SQLITE_ROW || code == SQLITE_DONE else {
            throw SQLiteError(code: code, message: String(cString: sqlite3_errmsg(handle)), context: context())
        }
    }

    func execute(_ sql: String) throws(SQLiteError) {
        var error: UnsafeMutablePointer<CChar>?
        let code = sqlite3_exec(handle, sql, nil, nil, &error)
        if code != SQLITE_OK {
            let message = error.map { String(cString: $0) } ?? "unknown"
            sqlite3_free(error)
            throw SQLiteError(code: code, message: message, context: sql)
        }
    }

    func prepare(_ sql: String) throws(SQLiteError) -> SQLiteStatement {
        var statement: OpaquePointer?
        try check(sqlite3_prepare_v3(handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &statement, nil), "prepare \(sql)")
        return SQLiteStatement(handle: statement!, connection: self)
    }

    func scalarInt(_ sql: String) throws(SQLiteError) -> Int64 {
        let statement = try prepare(sql)
        guard try statement.step() else { return 0 }
        return statement.int64(0)
    }

    var changes: Int { Int(sqlite3_changes(handle)) }

    enum TransactionKind {
        /// BEGIN IMMEDIATE: takes the write lock at once, so the body never fails half-way for
        /// want of it (SQLITE_BUSY on the first write of a deferred transaction cannot wait).
        case immediate
        /// BEGIN: takes locks as the body needs them.
        case deferred
    }

    /// Runs `body` in a transaction: BEGIN, the body, COMMIT. When the body or the COMMIT
    /// throws, rolls back and throws that error; when BEGIN throws, the body does not run.
    func transaction<T>(_ kind: TransactionKind = .immediate, _ body: () throws(SQLiteError) -> T) throws(SQLiteError) -> T {
        try runCached(kind == .immediate ? "BEGIN IMMEDIATE" : "BEGIN")
        do {
            let result = try body()
            try commit()
            return result
        } catch {
            // Some errors (SQLITE_FULL, I/O errors) have already rolled the transaction back;
            // the ROLLBACK then fails, harmlessly.
            try? runCached("ROLLBACK")
            throw error
        }
    }

    /// `transaction(.immediate, body)`.
    func immediateTransaction<T>(_ body: () throws(SQLiteError) -> T) throws(SQLiteError) -> T {
        try transaction(.immediate, body)
    }

    /// Opens a transaction that lasts until `commit()`: a reader's snapshot, taken at its
    /// first read and kept across statements.
    func begin() throws(SQLiteError) { try runCached("BEGIN") }

    /// Ends the transaction `begin()` (or `transaction`) opened.
    func commit() throws(SQLiteError) { try runCached("COMMIT") }

    /// Calls `committed` after every commit on this connection, then checkpoints the WAL
    /// (PASSIVE) once it holds `checkpointPages` pages. This is `sqlite3_wal_hook`, which SQLite
    /// calls once a commit's frames are in the WAL and the write lock is released. It replaces
    /// SQLite's own `wal_autocheckpoint` hook, so it checkpoints as that one does, and a later
    /// `PRAGMA wal_autocheckpoint` on this connection would replace it in turn. It fires for
    /// every COMMIT and every autocommit statement stepped to its end (a statement reset before
    /// its end commits without it: the writer steps its writes to the end).
    func afterEachCommit(checkpointAtPages checkpointPages: Int32, _ committed: @escaping () -> Void) {
        let observer = CommitObserver(checkpointPages: checkpointPages, committed: committed)
        // Held by this connection, which closes its handle (and with it the hook) in deinit,
        // before its properties are released: the unretained pointer never dangles.
        commitObserver = observer
        sqlite3_wal_hook(
            handle,
            { context, database, name, pages in
                guard let context else { return SQLITE_OK }
                let observer = Unmanaged<CommitObserver>.fromOpaque(context).takeUnretainedValue()
                observer.committed()
                // As SQLite's default hook: a busy checkpoint is left for the next commit.
                if pages >= observer.checkpointPages { sqlite3_wal_checkpoint_v2(database, name, SQLITE_CHECKPOINT_PASSIVE, nil, nil) }
                return SQLITE_OK
            }, Unmanaged.passUnretained(observer).toOpaque())
    }

    private final class CommitObserver {
        let checkpointPages: Int32
        let committed: () -> Void
        init(checkpointPages: Int32, committed: @escaping () -> Void) {
            self.checkpointPages = checkpointPages
            self.committed = committed
        }
    }

    private func runCached(_ sql: String) throws(SQLiteError) {
        let statement: OpaquePointer
        if let cached = transactionStatements[sql] {
            statement = cached
        } else {
            var prepared: OpaquePointer?
            try check(sqlite3_prepare_v3(handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &prepared, nil), "prepare \(sql)")
            statement = prepared!
            transactionStatements[sql] = statement
        }
        defer { sqlite3_reset(statement) }
        try check(sqlite3_step(statement), sql)
    }
}

final class SQLiteStatement {
    let handle: OpaquePointer
    // Strong: a statement keeps its connection open (sqlite3_close_v2 would defer anyway).
    private let connection: SQLiteConnection

    init(handle: OpaquePointer, connection: SQLiteConnection) {
        self.handle = handle
        self.connection = connection
    }

    deinit {
        sqlite3_finalize(handle)
    }

    /// Resets and clears bindings so the statement can be reused.
    func reset() {
        sqlite3_reset(handle)
        sqlite3_clear_bindings(handle)
    }

    func bind(_ index: Int32, _ value: String?) throws(SQLiteError) {
        guard let value else { return try connection.check(sqlite3_bind_null(handle, index), "bind null") }
        var copy = value
        let code = copy.withUTF8 { buffer in
            larder_sqlite3_bind_text_transient(
                handle, index, UnsafeRawPointer(buffer.baseAddress!).assumingMemoryBound(to: CChar.self),
                Int32(buffer.count))
        }
        try connection.check(code, "bind text")
    }

    func bind(_ index: Int32, _ value: [UInt8]) throws(SQLiteError) {
        let code = value.withUnsafeBytes { buffer in
            larder_sqlite3_bind_blob_transient(handle, index, buffer.baseAddress, Int32(buffer.count))
        }
        try connection.check(code, "bind blob")
    }

    func bind(_ index: Int32, _ value: Int64) throws(SQLiteError) {
        try connection.check(sqlite3_bind_int64(handle, index, value), "bind int")
    }

    func bind(_ index: Int32, _ value: Double) throws(SQLiteError) {
        try connection.check(sqlite3_bind_double(handle, index, value), "bind double")
    }

    /// Steps once; true when a row is available.
    func step() throws(SQLiteError) -> Bool {
        let code = sqlite3_step(handle)
        try connection.check(code, "step")
        return code == SQLITE_ROW
    }

    func bind(_ index: Int32, _ value: Double?) throws(SQLiteError) {
        guard let value else { return try connection.check(sqlite3_bind_null(handle, index), "bind null") }
        try bind(index, value)
    }

    func optionalDouble(_ column: Int32) -> Double? {
        sqlite3_column_type(handle, column) == SQLITE_NULL ? nil : sqlite3_column_double(handle, column)
    }

    func int64(_ column: Int32) -> Int64 { sqlite3_column_int64(handle, column) }
    func double(_ column: Int32) -> Double { sqlite3_column_double(handle, column) }

    func string(_ column: Int32) -> String? {
        guard let text = sqlite3_column_text(handle, column) else { return nil }
        let count = Int(sqlite3_column_bytes(handle, column))
        return String(decoding: UnsafeBufferPointer(start: text, count: count), as: UTF8.self)
    }

    /// Whether the column's text is the bytes of `known` (so a caller can keep `known` rather
    /// than make a new string: an entry's key is nearly always its primary key, its URL key
    /// nearly always its URL).
    func text(_ column: Int32, equals known: String) -> Bool {
        guard let text = sqlite3_column_text(handle, column) else { return false }
        let count = Int(sqlite3_column_bytes(handle, column))
        var known = known
        // memcmp: the generic elementsEqual goes byte by byte through an iterator.
        return known.withUTF8 { $0.count == count && (count == 0 || memcmp($0.baseAddress!, text, count) == 0) }
    }

    /// The blob in SQLite's own buffer, valid only inside `body`.
    func withBlob<T>(_ column: Int32, _ body: (UnsafeRawBufferPointer) -> T) -> T {
        let pointer = sqlite3_column_blob(handle, column)
        let count = Int(sqlite3_column_bytes(handle, column))
        return body(UnsafeRawBufferPointer(start: count > 0 ? pointer : nil, count: count > 0 ? count : 0))
    }

    func bytes(_ column: Int32) -> [UInt8] {
        // Blob pointer first, then its size (sqlite3_column_blob docs: the size call must follow).
        let pointer = sqlite3_column_blob(handle, column)
        let count = Int(sqlite3_column_bytes(handle, column))
        guard count > 0, let pointer else { return [] }
        return Array(UnsafeRawBufferPointer(start: pointer, count: count))
    }
}
