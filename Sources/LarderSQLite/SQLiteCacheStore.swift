// The cache in one SQLite file.
//
// - WAL journal, set once when the file is created, so readers never wait for the writer and
//   the writer never waits for readers. `synchronous=NORMAL`: in WAL mode every commit is
//   atomic and consistent; a power cut may lose the last commits but never half-writes one.
// - One writer connection, owned by a serial dispatch queue (its own thread, off Swift's
//   cooperative pool). Each entry is written by one INSERT OR REPLACE inside a transaction:
//   after a crash an entry is either wholly there or wholly absent.
// - Write-behind: `save` makes an entry visible to lookups at once (from memory) and answers;
//   the writer commits what has piled up in one transaction (a group commit), so a miss is
//   answered without waiting for SQLite, and many misses share one commit: the writer takes
//   everything queued each time it is free, and a group's first save waits at most
//   `groupCommitDelayMs` for company. Acknowledged entries not yet committed (the last few
//   milliseconds) are lost in a crash, as the last commits are with synchronous=NORMAL;
//   none is ever half there. Past `pendingByteLimit` of uncommitted bytes, saves are not
//   stored (counted), so a stalled disk costs hit ratio for a moment instead of memory or
//   every caller's time.
// - A pool of reader connections used from the server's worker threads; a hit takes one,
//   runs a prepared point lookup, and gives it back. A key never stored (a miss) is answered
//   by a Bloom filter of the stored keys without a reader (KeyFilter.swift).
// - Each body carries a checksum (BodyChecksum) checked on read: a mismatch (disk damage, a
//   hand edit) is a miss and the row is deleted.
// - Hit counters are tallied in memory in shards and written in batches, so a hit costs no
//   write transaction.
// - Bodies of at least `bodyFileThreshold` bytes are kept as files beside the database and
//   sent with sendfile (BodyFiles.swift says how they stay consistent with the rows).

import CSQLite
public import LarderCore
public import LarderEngine
public import Logging
import Dispatch
import Foundation
import LarderSync

public final class SQLiteCacheStore: CacheStore, @unchecked Sendable {
    // @unchecked Sendable: `writer` and its statements are touched only on `writerQueue`;
    // readers are handed out under `readers`'s lock and used by one thread at a time; the hit
    // shards are lock-protected. Nothing else is mutable.

    public static var schemaVersion: Int64 { Int64(migrations.count) }

    public let path: String
    let logger: Logger
    let writerQueue = DispatchQueue(label: "larder.sqlite.writer")
    let writer: SQLiteConnection
    private let insert: SQLiteStatement
    private let deleteDamaged: SQLiteStatement
    private let addHits: SQLiteStatement
    private let selectByURL: SQLiteStatement
    private let deleteByURL: SQLiteStatement
    private let dropOtherVariants: SQLiteStatement
    private let trimVariants: SQLiteStatement
    /// Variants kept per primary key (Vary); the oldest are replaced.
    public let maxVariants: Int
    private let readers = Locked<[Reader]>([])
    let closed = Atomic<Bool>(false)
    private let hitShards: [HitShard] = (0..<8).map { _ in HitShard() }
    private let flushTimer: DispatchSourceTimer
    let pending = Locked(PendingWrites())
    let droppedHandler = CallbackSlot<CacheKey>()
    private let journalsInMemory: SQLiteStatement
    private let journalsInFiles: SQLiteStatement
    private let commits = Atomic<Int>(0)
    /// Writes that failed (a full disk, a read-only file), since start.
    let writeFailures = Atomic<Int>(0)
    /// Saves not stored because too much was waiting for its commit.
    let shedWrites = Atomic<Int>(0)
    /// When the current run of failed writes began (uptime ns); 0 while writes succeed.
    private let failingSince = Atomic<UInt64>(0)
    /// While failing: when a save was last let through to find out whether writes work again.
    private let lastProbe = Atomic<UInt64>(0)
    private let lastFailureLog = Atomic<UInt64>(0)
    private let failuresSinceLog = Atomic<Int>(0)
    private let files: BodyFiles
    /// Bodies at least this large are kept in files (whole responses only; parts stay inline).
    public let bodyFileThreshold: Int
    /// Body files kept open between hits, at most (a quarter of the open-file limit, at most
    /// 16,384).
    public var keptBodyFileCapacity: Int { files.openFiles.capacity }
    /// Body files kept open now.
    var keptBodyFiles: Int { files.openFiles.count }
    private let selectDeadFiles: SQLiteStatement
    private let deleteDeadFile: SQLiteStatement
    /// Read after every group commit (capacity); prepared once, not parsed per commit.
    let selectUsedBytes: SQLiteStatement
    private let orphanSweep = DispatchGroup()
    /// A key filter (re)build under way (KeyFilter.swift).
    private let keyFilterBuild = DispatchGroup()
    private let lookupsSkipped = Atomic<Int>(0)
    /// Called by a key filter rebuild after its scan, before lookups switch to it; for tests.
    let keyFilterScanned = CallbackSlot<Void>()
    public let capacity: StoreCapacity
    let evictions = Atomic<Int>(0)
    let expiredRemovals = Atomic<Int>(0)
    /// An eviction or a sweep is under way (writer queue only).
    var trimming = false
    /// Where the age sweep goes on from at its next tick: the last rowid it looked at (writer queue only).
    var sweepCursor: Int64 = 0
    var sweepTimer: DispatchSourceTimer?
    /// Files written by the group commit under way (writer queue only), removed if it fails.
    private var writtenFiles: [String] = []

    /// Uncommitted bytes past which `save` answers only after the commit.
    public static let pendingByteLimit = 32 << 20
    /// Entries per group commit at most (a bound on one transaction's length).
    static let groupCommitLimit = 512
    /// How long the first save of a group waits for others to join it. Measured at one
    /// connection (misses at ~10k/s): committing at once pays a commit's fixed cost per miss (p99
    /// +5 ms); waiting 5 ms makes each commit a 2–3 ms CPU burst, and a client thread the kernel
    /// wakes on the writer's core waits for the burst to end (p90 +0.6 ms, p95 +1 ms); 1 ms
    /// keeps bursts short (p90 +0.3 ms, p95 +0.5 ms). Under load commits run back to back.
    static let groupCommitDelayMs = 1

    struct PendingWrite {
        let entry: StoredEntry
        let size: Int
        /// Set only when the save waits for its commit (alone over `pendingByteLimit`).
        let completion: (@Sendable (Bool) -> Void)?
        /// The key filter had never seen the primary key when this was saved: no row of it
        /// exists, so there are no other variants to delete.
        let newPrimaryKey: Bool
    }

    struct PendingWrites {
        /// Saves not yet taken by the writer, oldest first.
        var queue: [PendingWrite] = []
        /// Every save not yet committed, by primary key, oldest first: what lookups overlay.
        var visible: [CacheKey: [StoredEntry]] = [:]
        var bytes = 0
        var flushScheduled = false
        /// The filter lookups consult (nil until the first build from the database finished),
        /// and the one a rebuild is filling; saves go into both.
        var keyFilter: KeyFilter?
        var rebuildingKeyFilter: KeyFilter?
        var keyFilterRebuildScheduled = false

        /// Whether the caller is the one to start a key filter rebuild (none is under way).
        mutating func claimKeyFilterRebuild() -> Bool {
            defer { keyFilterRebuildScheduled = true }
            return !keyFilterRebuildScheduled
        }
    }

    private struct HitTally {
        var counts: [String: (hits: Int64, lastAccess: Double)] = [:]
        var since: Double = 0
    }

    /// Locked (Mutex) is non-copyable, so each shard lives in a class to sit in an array.
    private final class HitShard: Sendable {
        let tally = Locked(HitTally())
    }

    /// A reader connection with its prepared lookup. @unchecked Sendable: it moves between
    /// threads only through the pool, and is used by one thread at a time.
    final class Reader: @unchecked Sendable {
        let connection: SQLiteConnection
        let select: SQLiteStatement
        init(path: String) throws(SQLiteError) {
            connection = try SQLiteConnection(path: path)
            try connection.execute("PRAGMA busy_timeout = 5000")
            // A small page cache per reader (SQLite's default is 2 MB): rows are found through
            // the OS page cache anyway, and hot entries are in the memory tier.
            try connection.execute("PRAGMA cache_size = -256")
            select = try connection.prepare("""
                SELECT namespace, method, url, status, headers, body, body_kind, body_checksum,
                       stored_at, freshness, version, sensitive_fp, etag, last_modified,
                       stale_while_revalidate, stale_if_error, must_revalidate, initial_age, url_key,
                       key, vary, variant_fp, body_file, body_size, tags
                FROM entries WHERE \(SQLiteCacheStore.rowsOfPrimaryKey("?1"))
                """)
        }
    }

    /// Opens (creating when absent) the database at `path`, running migrations.
    public init(path: String, maxVariants: Int = 16, bodyFileThreshold: Int = 32 << 10, capacity: StoreCapacity = StoreCapacity(),
                keptBodyFileCapacity: Int? = nil, logger: Logger) throws {
        self.path = path
        self.capacity = capacity
        self.maxVariants = max(1, maxVariants)
        self.bodyFileThreshold = max(1, bodyFileThreshold)
        self.files = BodyFiles(databasePath: path, openFileCapacity: keptBodyFileCapacity ?? OpenBodyFiles.defaultCapacity)
        self.logger = logger
        let directory = (path as NSString).deletingLastPathComponent
        if !directory.isEmpty {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        }
        writer = try SQLiteConnection(path: path)
        try writer.execute("PRAGMA busy_timeout = 5000")
        try Self.migrate(writer)
        try writer.execute("PRAGMA synchronous = NORMAL")
        // A row deleted by INSERT OR REPLACE fires delete triggers only with this on (the
        // trigger that records a deleted row's body file).
        try writer.execute("PRAGMA recursive_triggers = ON")
        // The WAL is truncated back to this after checkpoints, so disk use follows the data.
        try writer.execute("PRAGMA journal_size_limit = 16777216")
        // Checkpoint every 100 pages (400 KiB), not SQLite's 1,000: a checkpoint copies its
        // pages on the writer in one burst, and a request thread that needs the core waits for
        // it. Misses at one connection, p99: 1.62–1.89 ms at 1,000 pages, 1.09–1.15 at 250,
        // 0.79–1.14 at 100; throughput level, and 64 connections of misses for 40 s after the
        // working sets ran as fast, with fewer saves shed and no request over 30 ms.
        try writer.execute("PRAGMA wal_autocheckpoint = 100")
        insert = try writer.prepare("""
            INSERT OR REPLACE INTO entries
              (key, namespace, method, url, status, headers, body, body_kind, body_checksum, stored_at,
               freshness, version, sensitive_fp, etag, last_modified, hits, last_access,
               stale_while_revalidate, stale_if_error, must_revalidate, initial_age, url_key,
               primary_key, vary, variant_fp, body_file, body_size, tags)
            VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, 0, ?10, ?16, ?17, ?18, ?19, ?20,
                    ?21, ?22, ?23, ?24, ?25, ?26)
            """)
        selectDeadFiles = try writer.prepare("SELECT path FROM dead_files LIMIT 1024")
        deleteDeadFile = try writer.prepare("DELETE FROM dead_files WHERE path = ?1")
        selectUsedBytes = try writer.prepare("SELECT bytes FROM usage WHERE id = 1")
        deleteDamaged = try writer.prepare("DELETE FROM entries WHERE key = ?1 AND body_checksum = ?2")
        addHits = try writer.prepare("UPDATE entries SET hits = hits + ?2, last_access = max(last_access, ?3) WHERE key = ?1")
        selectByURL = try writer.prepare("SELECT DISTINCT primary_key FROM entries WHERE url_key = ?1")
        dropOtherVariants = try writer.prepare("DELETE FROM entries WHERE \(Self.rowsOfPrimaryKey("?1")) AND vary <> ?2")
        trimVariants = try writer.prepare("""
            DELETE FROM entries WHERE \(Self.rowsOfPrimaryKey("?1")) AND key NOT IN
              (SELECT key FROM entries WHERE \(Self.rowsOfPrimaryKey("?1")) ORDER BY stored_at DESC LIMIT CAST(?2 AS INTEGER))
            """)
        deleteByURL = try writer.prepare("DELETE FROM entries WHERE url_key = ?1")
        journalsInMemory = try writer.prepare("PRAGMA temp_store = MEMORY")
        journalsInFiles = try writer.prepare("PRAGMA temp_store = DEFAULT")
        flushTimer = DispatchSource.makeTimerSource(queue: writerQueue)
        // Hit counts reach the database within 10 s: one UPDATE per key per 10 s however hot
        // (a 10,000-URL working set cycled at 20k hits/s costs 1,000 updates/s, not 10,000).
        flushTimer.schedule(deadline: .now() + 1, repeating: 1)
        flushTimer.setEventHandler { [weak self] in self?.flushHits(olderThan: 10) }
        flushTimer.resume()
        // Files of rows deleted just before a crash, then files whose rows never committed.
        writerQueue.sync { reapDeadFiles() }
        startSweeping()
        let startedAt = Date().timeIntervalSince1970
        orphanSweep.enter()
        DispatchQueue.global(qos: .utility).async { [weak self] in
            self?.sweepOrphanFiles(olderThan: startedAt - 2)
            self?.orphanSweep.leave()
        }
        rebuildKeyFilterSoon()
    }

    /// Schema migrations, applied in order; `PRAGMA user_version` records the last applied.
    static let migrations: [String] = [
        // 1: entries
        """
        CREATE TABLE entries (
          key           TEXT    NOT NULL UNIQUE,  -- hex HMAC-SHA-256, see CacheKey
          namespace     TEXT    NOT NULL,
          method        TEXT    NOT NULL,
          url           TEXT    NOT NULL,
          status        INTEGER NOT NULL,
          headers       BLOB    NOT NULL,         -- JSON object, names lower-cased, no Set-Cookie
          body          BLOB    NOT NULL,
          body_kind     INTEGER NOT NULL,         -- 0 json, 1 text, 2 binary
          body_sha256   BLOB    NOT NULL,
          stored_at     REAL    NOT NULL,         -- seconds since 1970
          freshness     REAL    NOT NULL,         -- freshness lifetime, seconds
          version       INTEGER NOT NULL,
          sensitive_fp  TEXT,                     -- HMAC of the sensitive value, never the value
          etag          TEXT,
          last_modified TEXT,
          hits          INTEGER NOT NULL DEFAULT 0,
          last_access   REAL    NOT NULL
        );
        CREATE INDEX entries_namespace ON entries(namespace);
        CREATE INDEX entries_last_access ON entries(last_access);
        """,
        // 2: stale-serving allowances from the response (RFC 5861, RFC 9111 §5.2.2.2)
        """
        ALTER TABLE entries ADD COLUMN stale_while_revalidate REAL NOT NULL DEFAULT 0;
        ALTER TABLE entries ADD COLUMN stale_if_error REAL NOT NULL DEFAULT 0;
        ALTER TABLE entries ADD COLUMN must_revalidate INTEGER NOT NULL DEFAULT 0;
        """,
        // 3: the response's age on arrival (RFC 9111 §4.2.3 corrected_initial_age)
        """
        ALTER TABLE entries ADD COLUMN initial_age REAL NOT NULL DEFAULT 0;
        """,
        // 4: the normalised URL, for invalidation by URI (RFC 9111 §4.4). Rows stored before
        // have none and are not found by invalidation.
        """
        ALTER TABLE entries ADD COLUMN url_key TEXT;
        CREATE INDEX entries_url_key ON entries(url_key);
        """,
        // 5: variants (RFC 9111 §4.1 Vary): rows share the request's primary key; `key` stays
        // the row's own, unique key.
        """
        ALTER TABLE entries ADD COLUMN primary_key TEXT;
        UPDATE entries SET primary_key = key;
        CREATE INDEX entries_primary_key ON entries(primary_key);
        ALTER TABLE entries ADD COLUMN vary TEXT NOT NULL DEFAULT '';
        ALTER TABLE entries ADD COLUMN variant_fp TEXT;
        """,
        // 6: cache-warming jobs (POST /cache/warm); specs are sealed by the service (AES-GCM
        // under a key derived from the instance secret), since they may carry credentials.
        """
        CREATE TABLE warm_jobs (
          id             TEXT    PRIMARY KEY,
          state          TEXT    NOT NULL,        -- queued, running, done, cancelled
          total          INTEGER NOT NULL,
          done           INTEGER NOT NULL DEFAULT 0,
          failed         INTEGER NOT NULL DEFAULT 0,
          stored         INTEGER NOT NULL DEFAULT 0,
          bytes          INTEGER NOT NULL DEFAULT 0,
          bytes_expected INTEGER NOT NULL DEFAULT 0,
          concurrency    INTEGER NOT NULL,
          created_at     REAL    NOT NULL,
          started_at     REAL,
          finished_at    REAL,
          errors         BLOB    NOT NULL         -- JSON array of {index, url, code}, first 100
        );
        CREATE TABLE warm_items (
          job_id TEXT    NOT NULL,
          idx    INTEGER NOT NULL,
          spec   BLOB    NOT NULL,                -- sealed /fetch spec
          state  TEXT    NOT NULL DEFAULT 'pending',
          PRIMARY KEY (job_id, idx)
        ) WITHOUT ROWID;
        """,
        // 7: the body checksum is XXH3-64 from now on (rows from before keep their SHA-256,
        // told apart by length).
        """
        ALTER TABLE entries RENAME COLUMN body_sha256 TO body_checksum;
        """,
        // 8: large bodies in files beside the database (BodyFiles): the row names its file and
        // keeps an empty body; deleting the row records the file for removal after the commit.
        """
        ALTER TABLE entries ADD COLUMN body_file TEXT;
        ALTER TABLE entries ADD COLUMN body_size INTEGER NOT NULL DEFAULT 0;
        CREATE INDEX entries_body_file ON entries(body_file) WHERE body_file IS NOT NULL;
        CREATE TABLE dead_files (path TEXT PRIMARY KEY) WITHOUT ROWID;
        CREATE TRIGGER entries_body_file_deleted AFTER DELETE ON entries WHEN OLD.body_file IS NOT NULL
        BEGIN
          INSERT OR IGNORE INTO dead_files (path) VALUES (OLD.body_file);
        END;
        """,
        // 9: what the store holds, kept by triggers so capacity checks never scan: entries and
        // bytes (bodies inline or in files, and metadata; see entryBytesSQL).
        """
        CREATE TABLE usage (id INTEGER PRIMARY KEY CHECK (id = 1), entries INTEGER NOT NULL, bytes INTEGER NOT NULL);
        INSERT INTO usage (id, entries, bytes)
          SELECT 1, count(*), coalesce(sum(length(body) + body_size * (body_file IS NOT NULL) + length(headers) + length(url) + 256), 0)
          FROM entries;
        CREATE TRIGGER entries_usage_inserted AFTER INSERT ON entries
        BEGIN
          UPDATE usage SET entries = entries + 1,
            bytes = bytes + length(NEW.body) + NEW.body_size * (NEW.body_file IS NOT NULL) + length(NEW.headers) + length(NEW.url) + 256
          WHERE id = 1;
        END;
        CREATE TRIGGER entries_usage_deleted AFTER DELETE ON entries
        BEGIN
          UPDATE usage SET entries = entries - 1,
            bytes = bytes - (length(OLD.body) + OLD.body_size * (OLD.body_file IS NOT NULL) + length(OLD.headers) + length(OLD.url) + 256)
          WHERE id = 1;
        END;
        """,
        // 10: tags (surrogate keys) kept as a JSON array on the row and indexed by tag through
        // triggers, so a purge by tag reads only its own rows; each namespace's current version.
        """
        ALTER TABLE entries ADD COLUMN tags TEXT NOT NULL DEFAULT '[]';
        CREATE TABLE entry_tags (tag TEXT NOT NULL, key TEXT NOT NULL, PRIMARY KEY (tag, key)) WITHOUT ROWID;
        CREATE INDEX entry_tags_key ON entry_tags(key);
        CREATE TRIGGER entries_tags_inserted AFTER INSERT ON entries WHEN NEW.tags <> '[]'
        BEGIN
          INSERT OR IGNORE INTO entry_tags (tag, key) SELECT value, NEW.key FROM json_each(NEW.tags);
        END;
        CREATE TRIGGER entries_tags_deleted AFTER DELETE ON entries WHEN OLD.tags <> '[]'
        BEGIN
          DELETE FROM entry_tags WHERE key = OLD.key;
        END;
        CREATE TABLE namespace_versions (namespace TEXT PRIMARY KEY, version INTEGER NOT NULL) WITHOUT ROWID;
        """,
        // 11: when a proxy entry with no validator can no longer answer anything (past its
        // freshness and every stale window), indexed for the retention sweep, which otherwise
        // scanned the whole table in one writer turn (seconds on a large cache, stalling writes).
        // A virtual column: computed from the row, nothing to keep in step on insert.
        """
        ALTER TABLE entries ADD COLUMN unusable_at REAL GENERATED ALWAYS AS (
          CASE WHEN substr(namespace, 1, 6) = 'proxy:' AND etag IS NULL AND last_modified IS NULL
               THEN stored_at - initial_age + freshness + max(stale_while_revalidate, stale_if_error) END) VIRTUAL;
        CREATE INDEX entries_unusable_at ON entries(unusable_at) WHERE unusable_at IS NOT NULL;
        """,
        // 12: a primary key's rows are found through the unique index on `key` (see
        // rowsOfPrimaryKey); the index on primary_key repeated it, one more B-tree with random
        // keys on every write.
        """
        DROP INDEX entries_primary_key;
        """,
    ]

    /// The rows of a primary key, as an SQL condition on the parameter `parameter`: a row's key is
    /// its primary key, or the primary key and "." and a suffix (a variant, a part; FetchEngine),
    /// so they are the keys from P up to P + "/" ("." sorts just before "/", and every other key
    /// differs from P within its 64 hex digits): a range on the unique index on `key`.
    static func rowsOfPrimaryKey(_ parameter: String) -> String {
        "key >= \(parameter) AND key < \(parameter) || '/' AND primary_key = \(parameter)"
    }

    private static func migrate(_ connection: SQLiteConnection) throws {
        let current = try connection.scalarInt("PRAGMA user_version")
        guard current < Int64(migrations.count) else {
            if current > Int64(migrations.count) {
                throw SQLiteError(code: SQLITE_ERROR, message: "schema version \(current) is newer than this Larder knows (\(migrations.count))",
                                  context: "migrate")
            }
            return
        }
        if current == 0 {
            // Both persistent in the file, set once at creation (auto_vacuum before any table):
            // WAL, and incremental vacuum so the file can shrink after purges and evictions.
            try connection.execute("PRAGMA auto_vacuum = INCREMENTAL")
            try connection.execute("PRAGMA journal_mode = WAL")
        } else if current < 9, try connection.scalarInt("PRAGMA auto_vacuum") != 2 {
            // A file from before schema 9: rebuilt once so it can shrink from now on.
            try connection.execute("PRAGMA auto_vacuum = INCREMENTAL")
            try connection.execute("VACUUM")
        }
        try connection.immediateTransaction { () throws(SQLiteError) in
            for version in Int(current)..<migrations.count {
                try connection.execute(migrations[version])
            }
            try connection.execute("PRAGMA user_version = \(migrations.count)")
        }
    }

    // MARK: - CacheStore

    public func lookup(_ primaryKey: CacheKey) -> [StoredEntry] {
        guard !closed.load(ordering: .relaxed) else { return [] }
        // Uncommitted saves first: one that commits between this read and the SELECT below is
        // then found by the SELECT (it leaves `visible` only after its COMMIT).
        let (uncommitted, filter) = pending.withLock { ($0.visible.isEmpty ? nil : $0.visible[primaryKey], $0.keyFilter) }
        // A key the filter never saw has no row: no read transaction. (Taking the lock above
        // orders this after the save that inserted the key, once it left `visible`.)
        let mayBeStored = filter?.mayContain(KeyFilter.probe(primaryKey.hex)) ?? true
        if !mayBeStored { lookupsSkipped.add(1, ordering: .relaxed) }
        var entries = mayBeStored ? committedEntries(primaryKey) : []
        for entry in uncommitted ?? [] { Self.apply(entry, to: &entries, maxVariants: maxVariants) }
        return entries
    }

    /// What writing `entry` does to the rows of its primary key (as `write` does in SQL).
    private static func apply(_ entry: StoredEntry, to entries: inout [StoredEntry], maxVariants: Int) {
        entries.removeAll { $0.varyNames != entry.varyNames || $0.key == entry.key }
        entries.append(entry)
        if !entry.varyNames.isEmpty, entries.count > maxVariants {
            entries.sort { $0.freshness.storedAt > $1.freshness.storedAt }
            entries.removeLast(entries.count - maxVariants)
        }
    }

    private func committedEntries(_ primaryKey: CacheKey) -> [StoredEntry] {
        let reader: Reader
        do {
            reader = try takeReader()
        } catch {
            logger.error("cannot open a reader", metadata: ["error": "\(error)"])
            return []
        }
        defer { giveBack(reader) }
        let select = reader.select
        defer { select.reset() }
        var entries: [StoredEntry] = []
        do {
            try select.bind(1, primaryKey.hex)
            while try select.step() {
                let key = CacheKey(hex: select.string(19) ?? primaryKey.hex)
                let checksum = select.bytes(7)
                // Checked in SQLite's buffer, then copied once.
                let inFile = select.string(22) != nil
                let (body, intact) = select.withBlob(5) { ($0.isEmpty ? [] : Array($0), inFile || BodyChecksum.matches($0, checksum)) }
                guard intact else {
                    logger.warning("stored body fails its checksum; dropping the entry", metadata: ["key": "\(key)"])
                    writerQueue.async { [self] in removeDamaged(key, checksum: checksum) }
                    continue
                }
                guard let method = select.string(1).flatMap(HTTPMethod.init(rawValue:)),
                      let kind = BodyKind(rawValue: Int(select.int64(6))) else { continue }
                let vary = select.string(20) ?? ""
                let bodyFile = select.string(22).map { BodyFile(path: $0, size: Int(select.int64(23)), checksum: checksum) }
                entries.append(StoredEntry(
                    key: key, primaryKey: primaryKey, varyNames: vary.isEmpty ? [] : vary.split(separator: ",").map(String.init),
                    variantFingerprint: select.string(21),
                    namespace: select.string(0) ?? "", method: method, url: select.string(2) ?? "", urlKey: select.string(18),
                    status: Int(select.int64(3)), headersJSON: select.bytes(4), body: body, bodyKind: kind,
                    freshness: EntryFreshness(storedAt: select.double(8), freshnessLifetime: select.double(9), version: select.int64(10),
                                              staleWhileRevalidate: select.double(14), staleIfError: select.double(15),
                                              mustRevalidate: select.int64(16) != 0, initialAge: select.double(17)),
                    sensitiveFingerprint: select.string(11), etag: select.string(12), lastModified: select.string(13)))
                entries[entries.count - 1].bodyFile = bodyFile
                entries[entries.count - 1].tags = Self.tags(fromJSON: select.string(24))
            }
            return entries
        } catch {
            logger.error("lookup failed; answering as a miss", metadata: ["key": "\(primaryKey)", "error": "\(error)"])
            return []
        }
    }

    /// Makes `entry` visible to lookups and calls back at once, on the caller's thread; the
    /// writer commits it soon after. When too much is uncommitted it calls back at once with
    /// false (not stored); one entry alone over that limit is answered after its commit.
    public func save(_ entry: StoredEntry, completion: @escaping @Sendable (Bool) -> Void) {
        guard !closed.load(ordering: .relaxed) else { return completion(false) }
        // Rows are found by a range of keys (rowsOfPrimaryKey): one outside it would be lost.
        guard entry.key == entry.primaryKey || entry.key.hex.hasPrefix(entry.primaryKey.hex + ".") else {
            logger.error("not storing a row whose key is not its primary key or under it", metadata: ["key": "\(entry.key)"])
            return completion(false)
        }
        // While writes fail (the disk is full), responses pass through unstored; one save every
        // 2 s goes ahead to find out whether space came back.
        if failingSince.load(ordering: .relaxed) != 0 {
            let now = DispatchTime.now().uptimeNanoseconds
            let last = lastProbe.load(ordering: .relaxed)
            guard now - last > 2_000_000_000, lastProbe.compareExchange(expected: last, desired: now, ordering: .relaxed).exchanged else {
                return completion(false)
            }
        }
        let size = entry.approximateBytes
        let probe = KeyFilter.probe(entry.primaryKey.hex)
        var rebuildFilter = false
        let admitted = pending.withLock { pending -> (schedule: Bool, waits: Bool)? in
            // Behind by more than the limit (the disk stalled: a checkpoint's fsync under
            // writeback took seconds), the entry is not stored and the caller is answered at
            // once: waiting for the commit stalled every request with it. One entry alone over
            // the limit is stored, and answered after its commit.
            if pending.bytes > 0, pending.bytes + size > Self.pendingByteLimit { return nil }
            let waits = size > Self.pendingByteLimit
            // Asked before the insert below; nil (still being built) answers "maybe".
            let newPrimaryKey = pending.keyFilter.map { !$0.mayContain(probe) } ?? false
            pending.queue.append(PendingWrite(entry: entry, size: size, completion: waits ? completion : nil,
                                              newPrimaryKey: newPrimaryKey))
            pending.visible[entry.primaryKey, default: []].append(entry)
            pending.bytes += size
            // In the filters before the writer can commit it.
            pending.keyFilter?.insert(probe)
            pending.rebuildingKeyFilter?.insert(probe)
            if let filter = pending.keyFilter, filter.insertedCount > filter.capacity {
                rebuildFilter = pending.claimKeyFilterRebuild()
            }
            defer { pending.flushScheduled = true }
            return (!pending.flushScheduled, waits)
        }
        guard let (schedule, waits) = admitted else {
            shedWrites.add(1, ordering: .relaxed)
            return completion(false)
        }
        if schedule {
            // The wait for company is a sleep on the writer's thread, not `asyncAfter`: a
            // dispatch timer wakes libdispatch's manager thread (an eventfd write from the
            // caller) and the manager then wakes the queue's thread, two wake-ups per group
            // instead of one. Misses at one connection, alternating: 2.0–2.4k → 2.3–2.6k/s,
            // 372–437 → 334–384 µs of CPU each; at 64 connections 6.5–7.9k → 8.0–8.6k/s. Work
            // queued meanwhile (an admin call) waits for the commit it would wait for anyway.
            writerQueue.async { [self] in
                usleep(UInt32(Self.groupCommitDelayMs * 1000))
                commitPending()
            }
        }
        if rebuildFilter { scheduleKeyFilterRebuild() }
        if !waits { completion(true) }
    }

    /// Lookups the key filter answered without reading the database; for tests and metrics.
    public var lookupsSkippedByKeyFilter: Int { lookupsSkipped.load(ordering: .relaxed) }

    /// Waits for a key filter (re)build under way; for tests.
    public func waitForKeyFilter() {
        keyFilterBuild.wait()
    }

    /// Starts a rebuild of the key filter unless one is under way (at start-up; tests).
    func rebuildKeyFilterSoon() {
        if pending.withLock({ $0.claimKeyFilterRebuild() }) { scheduleKeyFilterRebuild() }
    }

    /// Keys the filter lookups consult was sized for (0 before the first build); for tests.
    var keyFilterCapacity: Int { pending.withLock { $0.keyFilter?.capacity ?? 0 } }

    /// Starts a rebuild of the key filter (the caller claimed it).
    private func scheduleKeyFilterRebuild() {
        keyFilterBuild.enter()
        DispatchQueue.global(qos: .utility).async { [self] in
            defer { keyFilterBuild.leave() }
            rebuildKeyFilter()
        }
    }

    /// Fills a new key filter with every primary key that has a row, on its own connection,
    /// 4,096 keys per read transaction (a checkpoint is never held up for long), then makes it
    /// the one lookups consult. No key is missed: saves from the start go into both filters,
    /// saves not yet committed are copied in first, and anything committed earlier is in
    /// every later read. Removed keys are left behind, which is what a rebuild is for.
    private func rebuildKeyFilter() {
        var complete = false
        var fresh: KeyFilter?
        defer {
            pending.withLock { state in
                if complete, let fresh { state.keyFilter = fresh }
                state.rebuildingKeyFilter = nil
                state.keyFilterRebuildScheduled = false
            }
        }
        guard !closed.load(ordering: .relaxed) else { return }
        do {
            let connection = try SQLiteConnection(path: path)
            try connection.execute("PRAGMA busy_timeout = 5000")
            let rows = Int(try connection.scalarInt("SELECT entries FROM usage WHERE id = 1"))
            // Room for twice the rows: rebuilt again after about as many new keys as there are rows.
            let filter = KeyFilter(capacity: max(2 * rows, 1 << 16))
            fresh = filter
            pending.withLock { state in
                state.rebuildingKeyFilter = filter
                for key in state.visible.keys { filter.insert(KeyFilter.probe(key.hex)) }
            }
            let page = try connection.prepare("SELECT key FROM entries WHERE key > ?1 ORDER BY key LIMIT 4096")
            var last = ""
            while !closed.load(ordering: .relaxed) {
                var count = 0
                try page.bind(1, last)
                while try page.step() {
                    count += 1
                    guard let key = page.string(0) else { continue }
                    for probe in KeyFilter.probes(forRowKey: key) { filter.insert(probe) }
                    last = key
                }
                page.reset()
                if count < 4096 {
                    complete = true
                    break
                }
            }
            keyFilterScanned(())
        } catch {
            logger.warning("cannot build the key filter; lookups read the database", metadata: ["error": "\(error)"])
        }
    }

    public func readBody(of entry: StoredEntry) -> [UInt8]? {
        guard let file = entry.bodyFile else { return entry.body }
        if let body = files.read(file.path, size: file.size, checksum: file.checksum) { return body }
        dropDamaged(entry, file)
        return nil
    }

    public func openBody(of entry: StoredEntry) -> OwnedDescriptor? {
        guard let file = entry.bodyFile else { return nil }
        if let opened = files.open(file.path, size: file.size) { return opened }
        dropDamaged(entry, file)
        return nil
    }

    /// A row whose body file is missing, short or damaged: a miss, and the row goes.
    private func dropDamaged(_ entry: StoredEntry, _ file: BodyFile) {
        logger.warning("stored body file is missing or damaged; dropping the entry", metadata: ["key": "\(entry.key)", "file": "\(file.path)"])
        writerQueue.async { [self] in
            removeDamaged(entry.key, checksum: file.checksum)
            reapDeadFiles()
        }
    }

    /// Called with the primary key of an entry the store dropped on its own, so a tier above
    /// can drop it too: acknowledged but not committed (disk full, I/O error), evicted for
    /// capacity, or removed by the retention sweep.
    public func onEntryDropped(_ handler: @escaping @Sendable (CacheKey) -> Void) {
        droppedHandler.set(handler)
    }

    /// Group commits so far; for tests.
    public var groupCommits: Int { commits.load(ordering: .relaxed) }

    /// Entries saved but not committed yet; for tests.
    public var uncommittedCount: Int { pending.withLock { $0.visible.values.reduce(0) { $0 + $1.count } } }

    /// On the writer queue: one group commit of what is queued (at most `groupCommitLimit`
    /// entries), then again while more is queued. A group that fails is written again one
    /// entry per transaction, so one failing entry is dropped alone.
    private func commitPending() {
        // Bytes per transaction are bounded too, by a twentieth of the capacity: eviction runs
        // after each commit, so what one commit adds is what the store can overshoot by. (A
        // floor of 1 MiB let a 2 MiB store overshoot by half.) A group holds one entry at least.
        let byteLimit = min(Self.pendingByteLimit, max(64 << 10, capacity.maxBytes / 20))
        let (batch, more) = pending.withLock { pending -> ([PendingWrite], Bool) in
            var count = 0, bytes = 0
            while count < min(pending.queue.count, Self.groupCommitLimit), count == 0 || bytes + pending.queue[count].size <= byteLimit {
                bytes += pending.queue[count].size
                count += 1
            }
            let batch = Array(pending.queue.prefix(count))
            pending.queue.removeFirst(count)
            if pending.queue.isEmpty { pending.flushScheduled = false }
            return (batch, !pending.queue.isEmpty)
        }
        guard !batch.isEmpty else { return }
        var written: [Bool]
        switch commitGroup(batch[...]) {
        case .committed:
            written = [Bool](repeating: true, count: batch.count)
        case .failedInside where batch.count > 1:
            written = batch.indices.map { commitGroup(batch[$0...$0]) == .committed }
        case .failedInside, .notBegun:
            written = [Bool](repeating: false, count: batch.count)
        }
        if written.contains(true) { noteWriteSuccess() }
        reapDeadFiles()
        enforceCapacity()
        pending.withLock { pending in
            for write in batch {
                let primaryKey = write.entry.primaryKey
                pending.visible[primaryKey]?.removeFirst()
                if pending.visible[primaryKey]?.isEmpty == true { pending.visible.removeValue(forKey: primaryKey) }
                pending.bytes -= write.size
            }
        }
        let dropped = droppedHandler.current
        for (write, saved) in zip(batch, written) {
            if !saved { dropped?(write.entry.primaryKey) }
            write.completion?(saved)
        }
        if more { writerQueue.async { [self] in commitPending() } }
    }

    private enum GroupResult { case committed, failedInside, notBegun }

    /// On the writer queue: `writes` in one transaction, all or none.
    ///
    /// The transaction keeps its statement journals in memory. An INSERT OR REPLACE (triggers,
    /// six indexes, pointer-map pages) keeps the pages it changes in a statement journal until
    /// it ends, in memory up to 64 KiB and in a temporary file beyond; one insert now and then
    /// passed 64 KiB, the journal then stayed a file until the commit, and every later entry of
    /// the group wrote each page it changed there too (two `pwrite`s a page, a fifth to a half
    /// of the writer's writes). An entry's journal is a few pages and freed when its statement
    /// ends. Only here: a purge's DELETE of 1,000 rows may journal megabytes, so other
    /// transactions keep SQLite's default. (Raising the spill threshold to 1 MiB instead made
    /// SQLite 3.40 fail inserts with SQLITE_FULL now and then.)
    ///
    /// No savepoint per entry: SQLite rolls the whole transaction back on some errors
    /// (SQLITE_FULL, I/O errors), so `ROLLBACK TO` failed and the whole group was lost; a group
    /// that fails is written again one entry per transaction instead.
    private func commitGroup(_ writes: ArraySlice<PendingWrite>) -> GroupResult {
        try? step(journalsInMemory)
        defer {
            writtenFiles.removeAll()
            try? step(journalsInFiles)
        }
        // The body runs only once BEGIN succeeded.
        var begun = false
        do {
            try writer.immediateTransaction { () throws(SQLiteError) in
                begun = true
                for write in writes { try self.write(write.entry, newPrimaryKey: write.newPrimaryKey) }
            }
            commits.add(1, ordering: .relaxed)
            return .committed
        } catch {
            noteWriteFailure(error)
            guard begun else { return .notBegun }
            for name in writtenFiles { files.remove(name) }
            return .failedInside
        }
    }

    /// On the writer queue: commits everything queued, before work that must see it.
    func commitAllPending() {
        while pending.withLock({ !$0.queue.isEmpty }) { commitPending() }
    }

    private func step(_ statement: SQLiteStatement) throws(SQLiteError) {
        defer { statement.reset() }
        _ = try statement.step()
    }

    public func invalidate(urlKeys: [String], completion: @escaping @Sendable ([CacheKey]) -> Void) {
        writerQueue.async { [self] in
            guard !closed.load(ordering: .relaxed) else { return completion([]) }
            commitAllPending()
            var removed: [CacheKey] = []
            do {
                try writer.immediateTransaction { () throws(SQLiteError) in
                    for urlKey in Set(urlKeys) {
                        defer { selectByURL.reset(); deleteByURL.reset() }
                        try selectByURL.bind(1, urlKey)
                        while try selectByURL.step() {
                            if let key = selectByURL.string(0) { removed.append(CacheKey(hex: key)) }
                        }
                        try deleteByURL.bind(1, urlKey)
                        _ = try deleteByURL.step()
                    }
                }
            } catch {
                logger.error("invalidation failed", metadata: ["error": "\(error)"])
                removed = []
            }
            reapDeadFiles()
            completion(removed)
        }
    }

    public func recordHit(_ key: CacheKey, at time: Double) {
        let shard = hitShards[key.shardIndex & 7]
        shard.tally.withLock { tally in
            if tally.counts.isEmpty { tally.since = time }
            // Updated in place: one hash of the key, not two.
            Self.count(&tally.counts[key.hex, default: (0, 0)], at: time)
        }
    }

    private static func count(_ tally: inout (hits: Int64, lastAccess: Double), at time: Double) {
        tally.hits += 1
        tally.lastAccess = max(tally.lastAccess, time)
    }

    /// Waits for the start-up sweep of orphaned body files; for tests.
    public func waitForOrphanSweep() {
        orphanSweep.wait()
    }

    /// Commits every save acknowledged so far, then returns; for tests and tools.
    public func commitAndWait() {
        writerQueue.sync { commitAllPending() }
    }

    /// Writes pending hit counts now; for shutdown and tests.
    public func flushHitsAndWait() {
        writerQueue.sync { commitAllPending(); flushHits(olderThan: nil) }
    }

    /// Flushes counters and closes every connection. Idempotent.
    public func close() {
        guard !closed.exchange(true, ordering: .relaxed) else { return }
        flushTimer.cancel()
        sweepTimer?.cancel()
        writerQueue.sync {
            commitAllPending()
            flushHits(olderThan: nil)
            try? writer.execute("PRAGMA wal_checkpoint(PASSIVE)")
        }
        readers.withLock { $0.removeAll() }
        files.openFiles.closeAll()
        keyFilterBuild.wait()
        // Nothing of this store touches the file after close: the start-up sweep of orphan
        // body files (its own connection) is let finish.
        orphanSweep.wait()
    }

    // MARK: - Writer-queue work

    /// Inside a transaction: drop the primary key's rows that vary on other fields (the
    /// resource changed how it varies), replace the row, keep the newest `maxVariants` variants.
    /// For a primary key the key filter had never seen, there is nothing to drop: the DELETE's
    /// index search was 8 % of the writer's CPU on misses.
    private func write(_ entry: StoredEntry, newPrimaryKey: Bool) throws(SQLiteError) {
        if !newPrimaryKey {
            try run(dropOtherVariants, entry.primaryKey.hex, entry.varyNames.joined(separator: ","))
        }
        try insertRow(entry)
        if !entry.varyNames.isEmpty {
            try run(trimVariants, entry.primaryKey.hex, String(maxVariants))
        }
    }

    private func run(_ statement: SQLiteStatement, _ first: String, _ second: String) throws(SQLiteError) {
        defer { statement.reset() }
        try statement.bind(1, first)
        try statement.bind(2, second)
        _ = try statement.step()
    }

    private func insertRow(_ entry: StoredEntry) throws(SQLiteError) {
        // A large whole response goes to a file first; the row names it (parts stay inline:
        // the range fetcher cuts them in memory).
        var bodyFile: String?
        if entry.body.count >= bodyFileThreshold, entry.status != 206 {
            bodyFile = try files.write(entry.body, key: entry.key)
            writtenFiles.append(bodyFile!)
        }
        let statement = insert
        defer { statement.reset() }
        try statement.bind(24, bodyFile)
        try statement.bind(25, Int64(entry.body.count))
        try statement.bind(1, entry.key.hex)
        try statement.bind(2, entry.namespace)
        try statement.bind(3, entry.method.rawValue)
        try statement.bind(4, entry.url)
        try statement.bind(5, Int64(entry.status))
        try statement.bind(6, entry.headersJSON)
        try statement.bind(7, bodyFile == nil ? entry.body : [])
        try statement.bind(8, Int64(entry.bodyKind.rawValue))
        try statement.bind(9, BodyChecksum.compute(entry.body))
        try statement.bind(10, entry.freshness.storedAt)
        try statement.bind(11, entry.freshness.freshnessLifetime)
        try statement.bind(12, entry.freshness.version)
        try statement.bind(13, entry.sensitiveFingerprint)
        try statement.bind(14, entry.etag)
        try statement.bind(15, entry.lastModified)
        try statement.bind(16, entry.freshness.staleWhileRevalidate)
        try statement.bind(17, entry.freshness.staleIfError)
        try statement.bind(18, Int64(entry.freshness.mustRevalidate ? 1 : 0))
        try statement.bind(19, entry.freshness.initialAge)
        try statement.bind(20, entry.urlKey)
        try statement.bind(21, entry.primaryKey.hex)
        try statement.bind(22, entry.varyNames.joined(separator: ","))
        try statement.bind(23, entry.variantFingerprint)
        try statement.bind(26, Self.tagsJSON(entry.tags))
        _ = try statement.step()
    }

    /// Tags as the row keeps them: a JSON array of strings.
    static func tagsJSON(_ tags: [String]) -> String {
        tags.isEmpty ? "[]" : String(decoding: JSONValue.array(tags.map(JSONValue.string)).canonicalBytes, as: UTF8.self)
    }

    static func tags(fromJSON text: String?) -> [String] {
        guard let text, text != "[]", case .array(let items)? = try? JSONParser.parse(Array(text.utf8)) else { return [] }
        return items.compactMap { if case .string(let tag) = $0 { tag } else { nil } }
    }

    /// On the writer queue, after a commit: unlinks the files of deleted rows, then forgets them.
    func reapDeadFiles() {
        var names: [String] = []
        do {
            defer { selectDeadFiles.reset() }
            while try selectDeadFiles.step() {
                if let name = selectDeadFiles.string(0) { names.append(name) }
            }
        } catch {
            logger.warning("cannot list removed body files", metadata: ["error": "\(error)"])
            return
        }
        guard !names.isEmpty else { return }
        for name in names { files.remove(name) }
        do {
            try writer.immediateTransaction { () throws(SQLiteError) in
                for name in names {
                    defer { deleteDeadFile.reset() }
                    try deleteDeadFile.bind(1, name)
                    _ = try deleteDeadFile.step()
                }
            }
        } catch {
            logger.warning("cannot forget removed body files", metadata: ["error": "\(error)"])
        }
        if names.count == 1024 { reapDeadFiles() }
    }

    /// Removes body files no row names, last modified before `time` (so never a file being
    /// written for a commit under way): what a crash between a file and its row left behind.
    private func sweepOrphanFiles(olderThan time: Double) {
        let candidates = files.names(modifiedBefore: time)
        guard !candidates.isEmpty, let connection = try? SQLiteConnection(path: path),
              (try? connection.execute("PRAGMA busy_timeout = 5000")) != nil,
              let named = try? connection.prepare("SELECT 1 FROM entries WHERE body_file = ?1 LIMIT 1") else { return }
        var removed = 0
        for name in candidates {
            defer { named.reset() }
            guard (try? named.bind(1, name)) != nil, let found = try? named.step() else { continue }
            if !found {
                files.remove(name)
                removed += 1
            }
        }
        if removed > 0 { logger.info("removed body files no entry names", metadata: ["files": "\(removed)"]) }
    }

    private func removeDamaged(_ key: CacheKey, checksum: [UInt8]) {
        let statement = deleteDamaged
        defer { statement.reset() }
        do {
            try statement.bind(1, key.hex)
            try statement.bind(2, checksum)
            _ = try statement.step()
        } catch {
            logger.error("cannot delete a damaged entry", metadata: ["key": "\(key)", "error": "\(error)"])
        }
    }

    /// Whether writes succeed (false while the disk is full, say).
    public var writesSucceed: Bool { failingSince.load(ordering: .relaxed) == 0 }

    /// Counts a failed write and logs it — once a minute at most, with how many failed since,
    /// so a full disk is one clear line per minute rather than one per request.
    func noteWriteFailure(_ error: any Error) {
        writeFailures.add(1, ordering: .relaxed)
        failuresSinceLog.add(1, ordering: .relaxed)
        let now = DispatchTime.now().uptimeNanoseconds
        _ = failingSince.compareExchange(expected: 0, desired: now, ordering: .relaxed)
        let last = lastFailureLog.load(ordering: .relaxed)
        guard last == 0 || now - last > 60_000_000_000,
              lastFailureLog.compareExchange(expected: last, desired: now, ordering: .relaxed).exchanged else { return }
        let count = failuresSinceLog.exchange(0, ordering: .relaxed)
        logger.error("cannot store responses: \(error) (\(count) failed writes since the last report); answering uncached until writes succeed again",
                     metadata: ["database": "\(path)"])
    }

    /// A commit went through: storing works (again).
    func noteWriteSuccess() {
        guard failingSince.exchange(0, ordering: .relaxed) != 0 else { return }
        logger.notice("storing responses again", metadata: ["database": "\(path)"])
    }

    /// On the writer queue: every hit count so far into the database.
    func flushHitsNow() { flushHits(olderThan: nil) }

    /// Writes the tallies of shards older than `olderThan` seconds (all when nil) in one transaction.
    private func flushHits(olderThan age: Double?) {
        let now = Date().timeIntervalSince1970
        var batch: [String: (hits: Int64, lastAccess: Double)] = [:]
        for shard in hitShards {
            let taken = shard.tally.withLock { tally -> [String: (hits: Int64, lastAccess: Double)] in
                guard !tally.counts.isEmpty else { return [:] }
                if let age, now - tally.since < age, tally.counts.count < 16_384 { return [:] }
                defer { tally.counts = [:] }
                return tally.counts
            }
            batch.merge(taken) { ($0.hits + $1.hits, max($0.lastAccess, $1.lastAccess)) }
        }
        guard !batch.isEmpty else { return }
        do {
            try writer.transaction(.deferred) { () throws(SQLiteError) in
                for (key, tally) in batch {
                    defer { addHits.reset() }
                    try addHits.bind(1, key)
                    try addHits.bind(2, tally.hits)
                    try addHits.bind(3, tally.lastAccess)
                    _ = try addHits.step()
                }
            }
        } catch {
            logger.warning("cannot record hit counts", metadata: ["error": "\(error)"])
        }
    }

    // MARK: - Reader pool

    func takeReader() throws -> Reader {
        if let reader = readers.withLock({ $0.popLast() }) { return reader }
        return try Reader(path: path)
    }

    func giveBack(_ reader: Reader) {
        guard !closed.load(ordering: .relaxed) else { return }
        readers.withLock { $0.append(reader) }
    }
}

// MARK: - Warm jobs

extension SQLiteCacheStore: WarmJobStore {
    public func createJob(_ record: WarmJobRecord, sealedSpecs: [[UInt8]], completion: @escaping @Sendable (Bool) -> Void) {
        writerQueue.async { [self] in
            do {
                try writer.immediateTransaction { () throws(SQLiteError) in
                    try saveJob(record)
                    let insert = try writer.prepare("INSERT INTO warm_items (job_id, idx, spec) VALUES (?1, ?2, ?3)")
                    for (index, spec) in sealedSpecs.enumerated() {
                        try insert.bind(1, record.id)
                        try insert.bind(2, Int64(index))
                        try insert.bind(3, spec)
                        _ = try insert.step()
                        insert.reset()
                    }
                }
                completion(true)
            } catch {
                logger.error("cannot save warm job", metadata: ["job": "\(record.id)", "error": "\(error)"])
                completion(false)
            }
        }
    }

    public func finishItem(_ index: Int, state: String, job: WarmJobRecord, completion: @escaping @Sendable () -> Void) {
        writerQueue.async { [self] in
            defer { completion() }
            // The item's entry (saved before this call) commits first: a job never says an
            // item is done when a crash could still lose what it stored.
            commitAllPending()
            do {
                try writer.immediateTransaction { () throws(SQLiteError) in
                    let update = try writer.prepare("UPDATE warm_items SET state = ?3 WHERE job_id = ?1 AND idx = ?2")
                    try update.bind(1, job.id)
                    try update.bind(2, Int64(index))
                    try update.bind(3, state)
                    _ = try update.step()
                    try saveJob(job)
                }
            } catch {
                logger.error("cannot save warm job progress", metadata: ["job": "\(job.id)", "error": "\(error)"])
            }
        }
    }

    public func updateJob(_ record: WarmJobRecord, completion: @escaping @Sendable (_ saved: Bool) -> Void) {
        writerQueue.async { [self] in
            commitAllPending()
            do {
                try saveJob(record)
                completion(true)
            } catch {
                logger.error("cannot save warm job", metadata: ["job": "\(record.id)", "error": "\(error)"])
                completion(false)
            }
        }
    }

    public func loadJobs() -> [(record: WarmJobRecord, pending: [(index: Int, sealedSpec: [UInt8])])] {
        writerQueue.sync { [self] in
            do {
                var jobs: [(record: WarmJobRecord, pending: [(index: Int, sealedSpec: [UInt8])])] = []
                let select = try writer.prepare("""
                    SELECT id, state, total, done, failed, stored, bytes, bytes_expected, concurrency, created_at,
                           started_at, finished_at, errors FROM warm_jobs ORDER BY created_at
                    """)
                while try select.step() {
                    var record = WarmJobRecord(id: select.string(0) ?? "", state: WarmJobRecord.State(rawValue: select.string(1) ?? "") ?? .done,
                                               total: Int(select.int64(2)), concurrency: Int(select.int64(8)), createdAt: select.double(9))
                    record.done = Int(select.int64(3))
                    record.failed = Int(select.int64(4))
                    record.stored = Int(select.int64(5))
                    record.bytes = Int(select.int64(6))
                    record.bytesExpected = Int(select.int64(7))
                    record.startedAt = select.optionalDouble(10)
                    record.finishedAt = select.optionalDouble(11)
                    record.errors = WarmJobRecord.errors(fromJSON: select.bytes(12))
                    jobs.append((record, []))
                }
                select.reset()
                let items = try writer.prepare("SELECT idx, spec FROM warm_items WHERE job_id = ?1 AND state = 'pending' ORDER BY idx")
                for index in jobs.indices where jobs[index].record.state == .queued || jobs[index].record.state == .running {
                    try items.bind(1, jobs[index].record.id)
                    while try items.step() {
                        jobs[index].pending.append((Int(items.int64(0)), items.bytes(1)))
                    }
                    items.reset()
                }
                return jobs
            } catch {
                logger.error("cannot load warm jobs", metadata: ["error": "\(error)"])
                return []
            }
        }
    }

    /// On the writer queue.
    private func saveJob(_ record: WarmJobRecord) throws(SQLiteError) {
        let upsert = try writer.prepare("""
            INSERT OR REPLACE INTO warm_jobs (id, state, total, done, failed, stored, bytes, bytes_expected, concurrency,
                                              created_at, started_at, finished_at, errors)
            VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)
            """)
        try upsert.bind(1, record.id)
        try upsert.bind(2, record.state.rawValue)
        for (position, value) in [record.total, record.done, record.failed, record.stored, record.bytes, record.bytesExpected,
                                  record.concurrency].enumerated() {
            try upsert.bind(Int32(position + 3), Int64(value))
        }
        try upsert.bind(10, record.createdAt)
        try upsert.bind(11, record.startedAt)
        try upsert.bind(12, record.finishedAt)
        try upsert.bind(13, record.errorsJSON)
        _ = try upsert.step()
        upsert.reset()
    }
}
