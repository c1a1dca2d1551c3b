// Lookups: uncommitted saves overlaid on the committed rows, read on a pooled reader; a key the
// key filter never saw is answered without SQLite.

public import LarderCore
public import LarderEngine

extension SQLiteCacheStore {
    public func lookup(_ primaryKey: CacheKey) -> [StoredEntry] {
        guard !closed.load(ordering: .relaxed) else { return [] }
        // Uncommitted saves first: one that commits between this read and the SELECT below is
        // then found by the SELECT (it leaves `visible` only after its COMMIT).
        let (uncommitted, held, filter) = pending.withLock {
            ($0.visible.isEmpty ? nil : $0.visible[primaryKey], Self.heldEntries(primaryKey, in: $0.held), $0.keyFilter)
        }
        // Held in memory by the admission policy: it has no row.
        if let held { return held }
        // A key the filter never saw has no row: no read transaction. (Taking the lock above
        // orders this after the save that inserted the key, once it left `visible`.)
        let mayBeStored = filter?.mayContain(KeyFilter.probe(primaryKey.hex)) ?? true
        if !mayBeStored { counters.lookupsSkipped.add(1, ordering: .relaxed) }
        var entries = mayBeStored ? committedEntries(primaryKey) : []
        for entry in uncommitted ?? [] { Self.apply(entry, to: &entries, maxVariants: maxVariants) }
        return entries
    }

    /// What writing `entry` does to the rows of its primary key (as `write` does in SQL).
    static func apply(_ entry: StoredEntry, to entries: inout [StoredEntry], maxVariants: Int) {
        entries.removeAll { $0.varyNames != entry.varyNames || $0.key == entry.key }
        entries.append(entry)
        if !entry.varyNames.isEmpty, entries.count > maxVariants {
            entries.sort { $0.freshness.storedAt > $1.freshness.storedAt }
            entries.removeLast(entries.count - maxVariants)
        }
    }

    private func committedEntries(_ primaryKey: CacheKey) -> [StoredEntry] {
        do {
            return try readers.withReader { reader throws(SQLiteError) in try entries(of: primaryKey, reading: reader.select) }
        } catch {
            logger.error("lookup failed; answering as a miss", metadata: ["key": "\(primaryKey)", "error": "\(error)"])
            return []
        }
    }

    private func entries(of primaryKey: CacheKey, reading select: SQLiteStatement) throws(SQLiteError) -> [StoredEntry] {
        defer { select.reset() }
        var entries: [StoredEntry] = []
        try select.bind(1, primaryKey.hex)
        while try select.step() {
            let key = select.text(19, equals: primaryKey.hex) ? primaryKey : CacheKey(hex: select.string(19) ?? primaryKey.hex)
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
                let kind = BodyKind(rawValue: Int(select.int64(6))),
                let coding = BodyCoding(rawValue: Int(select.int64(27)))
            else { continue }
            let vary = select.string(20) ?? ""
            let bodyFile = select.string(22).map { BodyFile(path: $0, size: Int(select.int64(23)), checksum: checksum) }
            let url = select.string(2) ?? ""
            entries.append(
                StoredEntry(
                    key: key, primaryKey: primaryKey, varyNames: vary.isEmpty ? [] : vary.split(separator: ",").map(String.init),
                    variantFingerprint: select.string(21),
                    namespace: select.string(0) ?? "", method: method, url: url,
                    urlKey: select.text(18, equals: url) ? url : select.string(18),
                    status: Int(select.int64(3)), headersJSON: select.bytes(4), body: body, bodyKind: kind,
                    freshness: EntryFreshness(
                        storedAt: select.double(8), freshnessLifetime: select.double(9), version: select.int64(10),
                        staleWhileRevalidate: select.double(14), staleIfError: select.double(15),
                        mustRevalidate: select.int64(16) != 0, initialAge: select.double(17),
                        storedTTL: select.optionalDouble(25), invalidatedAt: select.optionalDouble(26)),
                    sensitiveFingerprint: select.string(11), etag: select.string(12), lastModified: select.string(13)))
            entries[entries.count - 1].bodyFile = bodyFile
            if coding != .identity { entries[entries.count - 1].bodyCoding = coding }
            entries[entries.count - 1].tags = Self.tags(fromJSON: select.string(24))
        }
        return entries
    }
}
