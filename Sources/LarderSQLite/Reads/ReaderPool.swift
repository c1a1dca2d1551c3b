// The reader connections. A hit takes one from the pool, runs its prepared point lookup, and
// gives it back; in WAL mode readers never wait for the writer.

import LarderSync

/// A reader connection with its prepared lookup. @unchecked Sendable: it moves between
/// threads only through the pool, and is used by one thread at a time.
final class Reader: @unchecked Sendable {
    let connection: SQLiteConnection
    let select: SQLiteStatement
    init(path: String) throws(SQLiteError) {
        connection = try SQLiteConnection(path: path)
        try connection.execute("PRAGMA busy_timeout = 5000")
        // A small page cache per reader (SQLite's default is 2 MB): rows are found through
        // the OS page cache anyway, and hot entries are in the memory tier. (A memory map of the
        // file instead, one per reader, put every page a reader touched into the process's RSS
        // once per reader, 3× the RSS after scripts/bench's workloads, and hits over 10,000 URLs
        // took more CPU, not less.)
        try connection.execute("PRAGMA cache_size = -256")
        select = try connection.prepare(
            """
            SELECT namespace, method, url, status, headers, body, body_kind, body_checksum,
                   stored_at, freshness, version, sensitive_fp, etag, last_modified,
                   stale_while_revalidate, stale_if_error, must_revalidate, initial_age, url_key,
                   key, vary, variant_fp, body_file, body_size, tags, ttl
            FROM entries WHERE \(Schema.rowsOfPrimaryKey("?1"))
            """)
    }
}

/// Idle reader connections, used from the server's worker threads; a new one is opened when none
/// is idle. After `close`, a reader given back is dropped.
final class ReaderPool: Sendable {
    private let path: String
    private let idle = Locked<[Reader]>([])
    private let closed = Atomic<Bool>(false)

    init(path: String) {
        self.path = path
    }

    func take() throws -> Reader {
        if let reader = idle.withLock({ $0.popLast() }) { return reader }
        return try Reader(path: path)
    }

    func giveBack(_ reader: Reader) {
        guard !closed.load(ordering: .relaxed) else { return }
        idle.withLock { $0.append(reader) }
    }

    /// Closes the idle readers; those in use close when given back.
    func close() {
        closed.store(true, ordering: .relaxed)
        idle.withLock { $0.removeAll() }
    }
}
