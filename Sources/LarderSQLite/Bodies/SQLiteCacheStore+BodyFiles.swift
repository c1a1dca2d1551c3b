// The store's side of body files (BodyFiles.swift): reading and opening them, dropping a row
// whose file is damaged, unlinking the files of deleted rows after each commit, and the start-up
// sweep of files no row names.

public import LarderCore
public import LarderEngine

extension SQLiteCacheStore {
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
        logger.warning(
            "stored body file is missing or damaged; dropping the entry",
            metadata: ["key": "\(entry.key)", "file": "\(file.path)"])
        writerQueue.async { [self] in
            removeDamaged(entry.key, checksum: file.checksum)
            reapDeadFiles()
        }
    }

    /// On the writer queue, after a commit: unlinks the files of deleted rows, then forgets them.
    func reapDeadFiles() {
        assertOnWriterQueue()
        var names: [String] = []
        do {
            defer { statements.selectDeadFiles.reset() }
            while try statements.selectDeadFiles.step() {
                if let name = statements.selectDeadFiles.string(0) { names.append(name) }
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
                    defer { statements.deleteDeadFile.reset() }
                    try statements.deleteDeadFile.bind(1, name)
                    _ = try statements.deleteDeadFile.step()
                }
            }
        } catch {
            logger.warning("cannot forget removed body files", metadata: ["error": "\(error)"])
        }
        if names.count == 1024 { reapDeadFiles() }
    }

    /// Removes body files no row names, last modified before `time` (so never a file being
    /// written for a commit under way): what a crash between a file and its row left behind.
    func sweepOrphanFiles(olderThan time: Double) {
        let candidates = files.names(modifiedBefore: time)
        guard !candidates.isEmpty, let connection = try? SQLiteConnection(path: path),
            (try? connection.execute("PRAGMA busy_timeout = 5000")) != nil,
            let named = try? connection.prepare("SELECT 1 FROM entries WHERE body_file = ?1 LIMIT 1")
        else { return }
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

    func removeDamaged(_ key: CacheKey, checksum: [UInt8]) {
        assertOnWriterQueue()
        let statement = statements.deleteDamaged
        defer { statement.reset() }
        do {
            try statement.bind(1, key.hex)
            try statement.bind(2, checksum)
            _ = try statement.step()
        } catch {
            logger.error("cannot delete a damaged entry", metadata: ["key": "\(key)", "error": "\(error)"])
        }
    }

    /// Waits for the start-up sweep of orphaned body files; for tests.
    public func waitForOrphanSweep() {
        orphanSweep.wait()
    }
}
