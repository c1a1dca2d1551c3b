// The reader connections. A hit takes one from the pool, runs its prepared point lookup, and
// gives it back; in WAL mode readers never wait for the writer.
//
// A reader keeps its read transaction open between lookups until the writer next commits, so
// a hit neither begins nor ends one (a WAL read mark and the file's shared lock, taken and let
// go with fcntl calls: docs/performance.md, "Read transactions kept between commits"). After
// every commit the writer's commit hook (`committed`) ends the snapshots of the idle readers,
// and a reader in use ends its own when it is given back. So a lookup never reads from before
// a commit that finished before it began, and no idle reader holds back a checkpoint or the
// WAL's return to its start. That holds because the store's writer connection is the only one
// that writes the file: one Larder process per database.

import LarderSync
import Logging

/// A reader connection with its prepared lookup. @unchecked Sendable: it moves between
/// threads only through the pool, and is used by one thread at a time: the thread that took
/// it, or, while it is out of the idle list for that, the writer's thread ending its
/// transaction after a commit.
final class Reader: @unchecked Sendable {
    let connection: SQLiteConnection
    let select: SQLiteStatement
    /// The pool's count of commits when this reader's transaction was opened; nil when none is.
    fileprivate var openedAtCommit: Int?
    /// Bytes of the file the readers read through their memory map (MappedReads: address space
    /// only; what it maps is the OS page cache). A larger file's further pages are read with pread.
    static let mapBytes = 256 << 30

    init(path: String) throws(SQLiteError) {
        // Pages read through a memory map the file's readers share (MappedReads): a page read
        // is then a memory access into the OS page cache, not a pread and a copy.
        connection = try SQLiteConnection(path: path, vfs: MappedReads.registered ? MappedReads.vfsName : nil)
        try connection.execute("PRAGMA busy_timeout = 5000")
        if MappedReads.registered { try connection.execute("PRAGMA mmap_size = \(Self.mapBytes)") }
        // A small page cache per reader (SQLite's default is 2 MB): rows are found through the
        // OS page cache anyway, and hot entries are in the memory tier. (A 16 MiB cache, which
        // keeps both B-trees' interior pages, halved the reads from the OS but not the CPU a hit.)
        try connection.execute("PRAGMA cache_size = -256")
        select = try connection.prepare(
            """
            SELECT namespace, method, url, status, headers, body, body_kind, body_checksum,
                   stored_at, freshness, version, sensitive_fp, etag, last_modified,
                   stale_while_revalidate, stale_if_error, must_revalidate, initial_age, url_key,
                   key, vary, variant_fp, body_file, body_size, tags, ttl, invalidated_at, body_coding
            FROM entries WHERE \(Schema.rowsOfPrimaryKey("?1"))
            """)
    }
}

/// Idle reader connections, used from the server's worker threads; a new one is opened when none
/// is idle. After `close`, a reader given back is dropped.
final class ReaderPool: Sendable {
    private let path: String
    private let logger: Logger
    private struct State {
        var idle: [Reader] = []
        /// Idle readers whose transaction is from before the last commit, waiting to be ended
        /// by whichever thread takes them first: the writer's, or a lookup's (`take`).
        var behind: [Reader] = []
        /// Commits seen (`committed`): a reader whose transaction was opened at another count
        /// may read from before the last of them.
        var commits = 0
    }
    private let state = Locked(State())
    private let closed = Atomic<Bool>(false)

    init(path: String, logger: Logger) {
        self.path = path
        self.logger = logger
    }

    /// Runs `body` on a reader (`take`), then gives it back. Whatever `body` creates (a
    /// statement) is gone by then: once back, an idle reader's transaction may be ended from
    /// the writer's thread.
    func withReader<T>(_ body: (Reader) throws(SQLiteError) -> T) throws(SQLiteError) -> T {
        let reader = try take()
        defer { giveBack(reader) }
        return try body(reader)
    }

    /// A reader inside a read transaction that sees every commit finished before this call.
    func take() throws(SQLiteError) -> Reader {
        let (taken, commits) = state.withLock { ($0.idle.popLast() ?? $0.behind.popLast(), $0.commits) }
        let reader: Reader
        if let taken, taken.openedAtCommit == commits || endTransaction(of: taken) {
            reader = taken
        } else {
            reader = try Reader(path: path)
        }
        // The count was read before BEGIN, and the snapshot is taken at the first read after
        // it, so the snapshot is at least as new as the count says.
        if reader.openedAtCommit == nil {
            try reader.connection.begin()
            reader.openedAtCommit = commits
        }
        return reader
    }

    /// Puts `reader` back; every statement run on it must be reset or finalised by now.
    func giveBack(_ reader: Reader) {
        guard !closed.load(ordering: .relaxed) else { return }
        let kept = state.withLock { state in
            guard reader.openedAtCommit == state.commits else { return false }
            state.idle.append(reader)
            return true
        }
        // The writer committed while it was in use.
        guard !kept, endTransaction(of: reader) else { return }
        state.withLock { $0.idle.append(reader) }
    }

    /// After each commit of the writer (its commit hook, before the hook's checkpoint, which the
    /// idle readers' snapshots would hold back). Each reader is ended outside the lock, so a
    /// lookup never waits on the writer's thread; one that needs a reader meanwhile takes one
    /// still behind and ends it itself, rather than opening another connection.
    func committed() {
        state.withLock { state in
            state.commits &+= 1
            state.behind.append(contentsOf: state.idle)
            state.idle.removeAll(keepingCapacity: true)
        }
        while let reader = state.withLock({ $0.behind.popLast() }) {
            guard endTransaction(of: reader), !closed.load(ordering: .relaxed) else { continue }
            state.withLock { $0.idle.append(reader) }
        }
    }

    /// Ends `reader`'s transaction; false when that failed, and the reader, which may still hold
    /// its snapshot, must be dropped (closing its connection ends the transaction).
    private func endTransaction(of reader: Reader) -> Bool {
        guard reader.openedAtCommit != nil else { return true }
        reader.openedAtCommit = nil
        do {
            try reader.connection.commit()
            return true
        } catch {
            logger.warning("cannot end a reader's transaction; closing the reader", metadata: ["error": "\(error)"])
            return false
        }
    }

    /// Closes the idle readers; those in use close when given back.
    func close() {
        closed.store(true, ordering: .relaxed)
        state.withLock { state in
            state.idle.removeAll()
            state.behind.removeAll()
        }
    }

    /// Reader connections open and not in use; for tests.
    var idleCount: Int { state.withLock { $0.idle.count + $0.behind.count } }
}
