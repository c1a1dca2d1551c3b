// The database's schema: its migrations, applied in order when the store opens, and the SQL
// that finds a primary key's rows.

import CSQLite

enum Schema {
    /// Applied in order; `PRAGMA user_version` records the last applied.
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
        // 13: eviction follows the admission policy (S3-FIFO, in memory), and the capacity check
        // that backs it up takes the oldest rows: nothing orders by last_access any more, whose
        // index cost a random B-tree update per hit flushed. The column stays (listings show it).
        """
        DROP INDEX entries_last_access;
        """,
        // 14: the caller's ttl an entry was stored under (`cache.ttl`), so listings, the
        // `expired` filter and retention see the lifetime callers asked for. NULL: stored under
        // the response's own freshness (and every row from before, whose ttl was not kept).
        // unusable_at (11) needs no change: the proxy never stores under a caller's ttl.
        """
        ALTER TABLE entries ADD COLUMN ttl REAL;
        """,
        // 15: tags name their rows by rowid, not key. Rowids follow write order (insertRow), so a
        // new row's tag entries go at the end of each tag's range, one page that stays hot; by
        // key they went to a random page of the tag's range and of `entry_tags_key`, two of the
        // four random B-tree pages a tagged insert wrote (the writer ran at a quarter of this speed
        // on a large store). A deleted row's entries are found through its own tags. Rowids never
        // change: nothing runs a full VACUUM after the migrations (incremental vacuum moves pages,
        // not rowids).
        """
        DROP TRIGGER entries_tags_inserted;
        DROP TRIGGER entries_tags_deleted;
        DROP TABLE entry_tags;
        CREATE TABLE entry_tags (tag TEXT NOT NULL, entry INTEGER NOT NULL, PRIMARY KEY (tag, entry)) WITHOUT ROWID;
        INSERT OR IGNORE INTO entry_tags (tag, entry)
          SELECT tag.value, entries.rowid FROM entries, json_each(entries.tags) AS tag WHERE entries.tags <> '[]';
        CREATE TRIGGER entries_tags_inserted AFTER INSERT ON entries WHEN NEW.tags <> '[]'
        BEGIN
          INSERT OR IGNORE INTO entry_tags (tag, entry) SELECT value, NEW.rowid FROM json_each(NEW.tags);
        END;
        CREATE TRIGGER entries_tags_deleted AFTER DELETE ON entries WHEN OLD.tags <> '[]'
        BEGIN
          DELETE FROM entry_tags WHERE tag IN (SELECT value FROM json_each(OLD.tags)) AND entry = OLD.rowid;
        END;
        """,
        // 16: when a soft purge marked the entry stale (EntryFreshness.invalidatedAt); NULL: never.
        """
        ALTER TABLE entries ADD COLUMN invalidated_at REAL;
        """,
        // 17: how the body is kept (BodyCoding: 0 as it came, 1 zstd); `body_size` and the
        // capacity count its stored bytes.
        """
        ALTER TABLE entries ADD COLUMN body_coding INTEGER NOT NULL DEFAULT 0;
        """,
        // 18: what each namespace with a budget (--namespace-max-bytes) holds, kept by triggers as
        // `usage` is, so the budgets are checked after a commit without a scan. Only budgeted
        // namespaces have a row (the store sets them when it opens); for the others the update
        // finds none.
        """
        CREATE TABLE namespace_usage (namespace TEXT PRIMARY KEY, entries INTEGER NOT NULL, bytes INTEGER NOT NULL) WITHOUT ROWID;
        CREATE TRIGGER entries_namespace_usage_inserted AFTER INSERT ON entries
        BEGIN
          UPDATE namespace_usage SET entries = entries + 1,
            bytes = bytes + length(NEW.body) + NEW.body_size * (NEW.body_file IS NOT NULL) + length(NEW.headers) + length(NEW.url) + 256
          WHERE namespace = NEW.namespace;
        END;
        CREATE TRIGGER entries_namespace_usage_deleted AFTER DELETE ON entries
        BEGIN
          UPDATE namespace_usage SET entries = entries - 1,
            bytes = bytes - (length(OLD.body) + OLD.body_size * (OLD.body_file IS NOT NULL) + length(OLD.headers) + length(OLD.url) + 256)
          WHERE namespace = OLD.namespace;
        END;
        """,
        // 19: the compression dictionaries namespaces' bodies are stored with (BodyDictionaries);
        // a stored frame names its dictionary's id.
        """
        CREATE TABLE body_dictionaries (
          id         INTEGER PRIMARY KEY,
          namespace  TEXT NOT NULL,
          trained_at REAL NOT NULL,
          content    BLOB NOT NULL
        );
        """
    ]

    /// The rows of a primary key, as an SQL condition on the parameter `parameter`: a row's key is
    /// its primary key, or the primary key and "." and a suffix (a variant, a part; FetchEngine),
    /// so they are the keys from P up to P + "/" ("." sorts just before "/", and every other key
    /// differs from P within its 64 hex digits): a range on the unique index on `key`.
    static func rowsOfPrimaryKey(_ parameter: String) -> String {
        "key >= \(parameter) AND key < \(parameter) || '/' AND primary_key = \(parameter)"
    }

    /// Brings the file at `connection` to the current schema: sets WAL and incremental vacuum on a
    /// new file, then applies the migrations it lacks in one transaction.
    static func migrate(_ connection: SQLiteConnection) throws {
        let current = try connection.scalarInt("PRAGMA user_version")
        guard current < Int64(migrations.count) else {
            if current > Int64(migrations.count) {
                throw SQLiteError(
                    code: SQLITE_ERROR,
                    message: "schema version \(current) is newer than this Larder knows (\(migrations.count))",
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
}
