// The reader connections. A hit takes one from the pool, runs its prepared point lookup, and
// gives it back; in WAL mode readers never wait for the writer.
//
// A reader keeps its read transaction open between lookups until the writer next commits:
// beginning and ending one (a WAL read mark and the file's shared lock taken and let go, with
// their fcntl calls) was about 8% of the CPU of a hit read from a million-entry store. The
// writer's commit hook (`committed`) ends the snapshots of the idle readers at once, and a reader
// in use ends its own when it is given back, so a lookup never reads from before a commit that
// finished before it began, and no idle reader holds back a checkpoint or the WAL's restart
// (docs/performance.md, "Read transactions kept between commits"). That holds because the
// store's writer connection is the only one that writes the file (one Larder process per
// database).

import LarderSync

/// A reader connection with its prepared lookup. @unchecked Sendable: it moves between
/// threads only through the pool, and is used by one thread at a time.
final class Reader: @unchecked Sendable {
    let connection: SQLiteConnection
    let select: SQLiteStatement
    /// The pool's commit count when this reader's transaction was opened; nil when none is.
    /// Changed only by the thread that took the reader, or under the pool's lock while idle.
    fileprivate var snapshot: Int?
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
    private struct State {
        var idle: [Reader] = []
        /// Commits seen (`committed`): a reader whose snapshot began at another count is stale.
        var commits = 0
    }
    private let state = Locked(State())
    private let closed = Atomic<Bool>(false)

    init(path: String) {
        self.path = path
    }

    /// A reader inside a read transaction that sees every commit made before this call.
    func take() throws -> Reader {
        let (idle, commits) = state.withLock { ($0.idle.popLast(), $0.commits) }
        let reader = try idle ?? Reader(path: path)
        if reader.snapshot != commits {
            Self.end(reader)
            // Read before BEGIN: the snapshot, taken at the first read, is then at least as new.
            try reader.connection.begin()
            reader.snapshot = commits
        }
        return reader
    }

    func giveBack(_ reader: Reader) {
        guard !closed.load(ordering: .relaxed) else { return }
        let kept = state.withLock { state in
            guard reader.snapshot == state.commits else { return false }
            state.idle.append(reader)
            return true
        }
        guard !kept else { return }
        // The writer committed while it was in use.
        Self.end(reader)
        state.withLock { $0.idle.append(reader) }
    }

    /// After each commit of the writer (its commit hook): the idle readers let go of their
    /// snapshots, before the hook's checkpoint, which they would otherwise hold back.
    func committed() {
        state.withLock { state in
            state.commits &+= 1
            for reader in state.idle { Self.end(reader) }
        }
    }

    private static func end(_ reader: Reader) {
        guard reader.snapshot != nil else { return }
        reader.snapshot = nil
        // A failed COMMIT of a read-only transaction leaves nothing to keep: it is ended anyway
        // when the connection closes.
        try? reader.connection.commit()
    }

    /// Closes the idle readers; those in use close when given back.
    func close() {
        closed.store(true, ordering: .relaxed)
        state.withLock { $0.idle.removeAll() }
    }
}
