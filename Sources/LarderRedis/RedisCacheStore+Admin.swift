// The admin operations and warm jobs on the shared store. What the SQLite store does with SQL
// is done here by SCAN (entries) or through the tag and URL index sets, with the filter applied
// to decoded entries (PurgeFilter.matches). Every removal is published, so each instance's
// memory tier drops what went.

import Crypto
import Dispatch
import Foundation
public import LarderCore
public import LarderEngine

extension RedisCacheStore {
    /// One SCAN step over entry hashes: the keys found and the cursor to go on with ("0": done).
    func scanEntries(from cursor: String, count: Int) throws(RedisError) -> ([CacheKey], String) {
        let (names, next) = try backend.scan(cursor: cursor, pattern: entryPattern, count: count)
        let keys = names.compactMap { name -> CacheKey? in
            guard let open = name.firstIndex(of: "{"), let close = name.firstIndex(of: "}"), open < close else { return nil }
            return CacheKey(hex: String(name[name.index(after: open)..<close]))
        }
        return (keys, next)
    }

    /// Each key's rows with their hit counts and stored sizes (one pipelined round trip).
    func rows(of keys: [CacheKey]) throws(RedisError) -> [(primaryKey: CacheKey, entries: [(entry: StoredEntry, hits: Int, bytes: Int)])] {
        guard !keys.isEmpty else { return [] }
        let replies = try backend.run(keys.map { ["HGETALL", entryKey($0)].map { Array($0.utf8) } })
        return zip(keys, replies).map { key, reply in
            let fields = reply.array
            let (hits, sizes) = Self.fields(of: fields)
            let decoded = entries(fromHash: fields, primaryKey: key, removing: false)
            return (key, decoded.map { ($0, hits[$0.key.hex] ?? 0, sizes[$0.key.hex] ?? 0) })
        }
    }

    func record(_ entry: StoredEntry, hits: Int, bytes: Int) -> EntryRecord {
        let freshness = entry.freshness
        return EntryRecord(
            key: entry.primaryKey, rowKey: entry.key, namespace: entry.namespace, method: entry.method.rawValue,
            url: entry.url, status: entry.status, bytes: bytes, storedAt: freshness.storedAt, expiresAt: freshness.expiresAt,
            staleUntil: freshness.staleUntil,
            version: freshness.version, tags: entry.tags, hits: hits, lastAccessAt: freshness.storedAt,
            etag: entry.etag, lastModified: entry.lastModified, varies: entry.varyNames)
    }

    // MARK: - CacheAdministration

    /// Every stored figure from a full SCAN (an admin call, not a request's); evictions and
    /// expiry are Redis's own counters (INFO stats), for the whole Redis.
    public func statistics() -> StoredStatistics {
        var statistics = StoredStatistics()
        var namespaces: [String: StoredStatistics.Namespace] = [:]
        do {
            var cursor = "0"
            repeat {
                let (keys, next) = try scanEntries(from: cursor, count: 1000)
                cursor = next
                for (_, rows) in try rows(of: keys) {
                    for row in rows {
                        statistics.entries += 1
                        statistics.bytes += row.bytes
                        namespaces[row.entry.namespace, default: .init(name: row.entry.namespace, entries: 0, bytes: 0)].entries += 1
                        namespaces[row.entry.namespace]!.bytes += row.bytes
                        let storedAt = row.entry.freshness.storedAt
                        statistics.oldestStoredAt = min(statistics.oldestStoredAt ?? storedAt, storedAt)
                        statistics.newestStoredAt = max(statistics.newestStoredAt ?? storedAt, storedAt)
                    }
                }
            } while cursor != "0"
            for info in try backend.onEveryNode(["INFO", "stats"]).compactMap(\.string) {
                for line in info.split(whereSeparator: \.isNewline) {
                    let parts = line.split(separator: ":")
                    guard parts.count == 2, let value = Int(parts[1].trimmingCharacters(in: .whitespaces)) else { continue }
                    if parts[0] == "evicted_keys" { statistics.evictions += value }
                    if parts[0] == "expired_keys" { statistics.expiredRemovals += value }
                }
            }
        } catch {
            logger.error("cannot read statistics from Redis", metadata: ["error": "\(error)"])
            statistics.failed = true
        }
        statistics.namespaces = namespaces.values.sorted { $0.name < $1.name }
        statistics.admission = admission.figures
        usageCache.withLock { $0 = (statistics.entries, statistics.bytes) }
        return statistics
    }

    public func purge(_ filter: PurgeFilter, completion: @escaping @Sendable (PurgeResult) -> Void) {
        DispatchQueue.global(qos: .utility).async { [self] in
            var result = PurgeResult()
            do {
                if let tags = filter.tags {
                    // Through the tag sets: only the tagged keys are read.
                    let keys = try members(of: tags.map(tagKey))
                    for start in stride(from: 0, to: keys.count, by: 500) {
                        try remove(matching: filter, among: Array(keys[start..<min(start + 500, keys.count)]), into: &result)
                    }
                } else if let urls = filter.urls {
                    try remove(matching: filter, among: try members(of: urls.map(urlIndexKey)), into: &result)
                } else {
                    var cursor = "0"
                    repeat {
                        let (keys, next) = try scanEntries(from: cursor, count: 500)
                        cursor = next
                        try remove(matching: filter, among: keys, into: &result)
                    } while cursor != "0"
                }
            } catch {
                logger.error("purge on Redis failed", metadata: ["error": "\(error)"])
                result.failed = true
            }
            publishForget(Array(result.primaryKeys))
            completion(result)
        }
    }

    /// Removes the rows of `keys` the filter matches: a key whose rows all go is deleted whole.
    /// A soft purge (`softAt`) writes them back marked stale instead.
    private func remove(matching filter: PurgeFilter, among keys: [CacheKey], into result: inout PurgeResult) throws(RedisError) {
        var commands: [[[UInt8]]] = []
        for (key, rows) in try rows(of: keys) {
            let matching = rows.filter { filter.matches($0.entry) }
            guard !matching.isEmpty else { continue }
            if let time = filter.softAt {
                // Each row written back marked, only if it is still the value read (SHA-1 of
                // its bytes): a row removed or stored again meanwhile is left as it is.
                let marks: [[[UInt8]]] = matching.map { row in
                    var marked = row.entry
                    marked.freshness.markStale(at: time)
                    let read = codec.encode(row.entry)
                    return [
                        Array("EVAL".utf8), Array(Self.markIfUnchanged.utf8), Array("1".utf8), Array(entryKey(key).utf8),
                        Array("e:\(row.entry.key.hex)".utf8), codec.encode(marked),
                        Array(Insecure.SHA1.hash(data: read).map { String(format: "%02x", $0) }.joined().utf8)
                    ]
                }
                let marked = try backend.runWrites(marks).filter { $0.integer == 1 }.count
                result.invalidated += marked
                if marked > 0 { result.primaryKeys.insert(key) }
                continue
            }
            if matching.count == rows.count {
                commands.append(["DEL", entryKey(key)].map { Array($0.utf8) })
            } else {
                commands.append(
                    ["HDEL", entryKey(key)].map { Array($0.utf8) }
                        + matching.flatMap { [Array("e:\($0.entry.key.hex)".utf8), Array("h:\($0.entry.key.hex)".utf8)] })
            }
            result.removed += matching.count
            result.bytes += matching.reduce(0) { $0 + $1.bytes }
            result.primaryKeys.insert(key)
        }
        guard !commands.isEmpty else { return }
        try backend.runWrites(commands)
    }

    /// Sets a hash field to ARGV[2] only while its value is the one read (ARGV[3], its SHA-1):
    /// a soft purge never brings back a row removed, nor an older one over a row stored again,
    /// between its read and its write. 1 when set.
    static let markIfUnchanged = """
        local current = redis.call('HGET', KEYS[1], ARGV[1])
        if current and redis.sha1hex(current) == ARGV[3] then redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) return 1 end
        return 0
        """

    public func remove(primaryKey: CacheKey, completion: @escaping @Sendable (PurgeResult) -> Void) {
        var result = PurgeResult()
        do {
            for removed in try deleteEntries([primaryKey]) {
                result.removed += removed.rows
                result.bytes += removed.bytes
                result.primaryKeys.insert(removed.primaryKey)
            }
        } catch {
            logger.error("remove on Redis failed", metadata: ["error": "\(error)"])
            result.failed = true
        }
        publishForget(Array(result.primaryKeys))
        completion(result)
    }

    /// A page by SCAN: the cursor is Redis's. Every entry there for the whole listing is listed
    /// at least once (SCAN's guarantee; one can appear twice while Redis rehashes); a page holds
    /// whole keys, so it may pass `limit` by a key's other variants.
    public func list(_ filter: PurgeFilter, after cursor: String?, limit: Int) -> EntryPage {
        var page = EntryPage()
        var filter = filter
        if filter.isEmpty { filter.all = true }
        var position = cursor ?? "0"
        do {
            repeat {
                let (keys, next) = try scanEntries(from: position, count: max(10, limit))
                position = next
                for (_, rows) in try rows(of: keys) {
                    for row in rows where filter.matches(row.entry) {
                        page.records.append(record(row.entry, hits: row.hits, bytes: row.bytes))
                    }
                }
            } while position != "0" && page.records.count < limit
        } catch {
            logger.error("listing Redis failed", metadata: ["error": "\(error)"])
            page.failed = true
            return page
        }
        page.nextCursor = position == "0" ? nil : position
        return page
    }

    public func records(primaryKey: CacheKey) -> [EntryRecord] {
        guard let found = try? rows(of: [primaryKey]).first else { return [] }
        return found.entries.sorted { $0.entry.freshness.storedAt < $1.entry.freshness.storedAt }
            .map { record($0.entry, hits: $0.hits, bytes: $0.bytes) }
    }

    public func setNamespaceVersion(_ namespace: String, to version: Int64, completion: @escaping @Sendable (Bool) -> Void) {
        do {
            let reply = try backend.run(["HSET", namespaceVersionsKey, namespace, String(version)])
            if case .error = reply { return completion(false) }
        } catch {
            return completion(false)
        }
        // Every instance switches at once; the bump itself wrote one field.
        events.publish(backend, "version", "\(version) \(namespace)")
        completion(true)
    }

    // MARK: - WarmJobStore

    var warmJobsKey: String { "\(settings.prefix)warm:jobs" }
    func warmItemsKey(_ id: String) -> String { "\(settings.prefix)warm:{\(id)}:items" }

    public func createJob(_ record: WarmJobRecord, sealedSpecs: [[UInt8]], completion: @escaping @Sendable (Bool) -> Void) {
        var commands: [[[UInt8]]] = [["HSET", warmJobsKey, record.id].map { Array($0.utf8) } + [Self.encode(record)]]
        for start in stride(from: 0, to: sealedSpecs.count, by: 500) {
            var command = ["HSET", warmItemsKey(record.id)].map { Array($0.utf8) }
            for index in start..<min(start + 500, sealedSpecs.count) { command += [Array(String(index).utf8), sealedSpecs[index]] }
            commands.append(command)
        }
        completion((try? backend.runWrites(commands)) != nil)
    }

    public func finishItem(_ index: Int, state: String, job: WarmJobRecord, completion: @escaping @Sendable () -> Void) {
        _ = try? backend.run([
            ["HDEL", warmItemsKey(job.id), String(index)].map { Array($0.utf8) },
            ["HSET", warmJobsKey, job.id].map { Array($0.utf8) } + [Self.encode(job)]
        ])
        completion()
    }

    public func updateJob(_ record: WarmJobRecord, completion: @escaping @Sendable (_ saved: Bool) -> Void) {
        var commands: [[[UInt8]]] = [["HSET", warmJobsKey, record.id].map { Array($0.utf8) } + [Self.encode(record)]]
        if record.state == .done || record.state == .cancelled { commands.append(["DEL", warmItemsKey(record.id)].map { Array($0.utf8) }) }
        completion((try? backend.runWrites(commands)) != nil)
    }

    public func deleteJobs(_ ids: [String], completion: @escaping @Sendable (_ saved: Bool) -> Void) {
        guard !ids.isEmpty else { return completion(true) }
        var commands: [[[UInt8]]] = [(["HDEL", warmJobsKey] + ids).map { Array($0.utf8) }]
        for id in ids { commands.append(["DEL", warmItemsKey(id)].map { Array($0.utf8) }) }
        completion((try? backend.runWrites(commands)) != nil)
    }

    public func loadJobs() -> [(record: WarmJobRecord, pending: [(index: Int, sealedSpec: [UInt8])])] {
        guard let jobs = try? backend.run(["HGETALL", warmJobsKey]).array
        else { return [] }
        var result: [(record: WarmJobRecord, pending: [(index: Int, sealedSpec: [UInt8])])] = []
        for index in stride(from: 0, to: jobs.count - 1, by: 2) {
            guard let bytes = jobs[index + 1].bytes, let record = Self.decodeJob(bytes) else { continue }
            var pending: [(index: Int, sealedSpec: [UInt8])] = []
            if record.state == .queued || record.state == .running,
                let items = try? backend.run(["HGETALL", warmItemsKey(record.id)]).array
            {
                for item in stride(from: 0, to: items.count - 1, by: 2) {
                    if let position = items[item].string.flatMap(Int.init), let spec = items[item + 1].bytes {
                        pending.append((position, spec))
                    }
                }
            }
            result.append((record, pending.sorted { $0.index < $1.index }))
        }
        return result.sorted { $0.record.createdAt < $1.record.createdAt }
    }

    static func encode(_ record: WarmJobRecord) -> [UInt8] {
        var object: [String: Any] = [
            "id": record.id, "state": record.state.rawValue, "total": record.total, "done": record.done,
            "failed": record.failed, "stored": record.stored, "bytes": record.bytes,
            "bytesExpected": record.bytesExpected, "concurrency": record.concurrency,
            "createdAt": record.createdAt,
            "errors": record.errors.map { ["index": $0.index, "url": $0.url, "code": $0.code] }
        ]
        if let startedAt = record.startedAt { object["startedAt"] = startedAt }
        if let finishedAt = record.finishedAt { object["finishedAt"] = finishedAt }
        return Array((try? JSONSerialization.data(withJSONObject: object)) ?? Data())
    }

    /// A job record as `encode` wrote it; nil when any field is missing or out of its range (a
    /// value planted in Redis must not drive a counter past its bounds).
    static func decodeJob(_ bytes: [UInt8]) -> WarmJobRecord? {
        guard let object = try? JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any],
            let id = object["id"] as? String, (1...64).contains(id.utf8.count),
            let state = (object["state"] as? String).flatMap(WarmJobRecord.State.init(rawValue:)),
            let total = object["total"] as? Int, (0...WarmJobRequest.maxRequests).contains(total),
            let concurrency = object["concurrency"] as? Int, (1...BatchRequest.maxConcurrency).contains(concurrency),
            let createdAt = time(object["createdAt"])
        else { return nil }
        var record = WarmJobRecord(id: id, state: state, total: total, concurrency: concurrency, createdAt: createdAt)
        func count(_ name: String, upTo limit: Int) -> Int? {
            guard let value = object[name] else { return 0 }
            guard let number = value as? Int, (0...limit).contains(number) else { return nil }
            return number
        }
        guard let done = count("done", upTo: total), let failed = count("failed", upTo: total - done),
            let stored = count("stored", upTo: done),
            let received = count("bytes", upTo: 1 << 53), let expected = count("bytesExpected", upTo: 1 << 53)
        else { return nil }
        record.done = done
        record.failed = failed
        record.stored = stored
        record.bytes = received
        record.bytesExpected = expected
        for (name, keyPath) in [("startedAt", \WarmJobRecord.startedAt), ("finishedAt", \WarmJobRecord.finishedAt)] {
            guard let value = object[name] else { continue }
            guard let seconds = time(value) else { return nil }
            record[keyPath: keyPath] = seconds
        }
        record.errors = (object["errors"] as? [[String: Any]] ?? []).prefix(100).compactMap { item in
            guard let index = item["index"] as? Int, (0..<max(1, total)).contains(index), let url = item["url"] as? String,
                let code = item["code"] as? String
            else { return nil }
            return .init(index: index, url: url, code: code)
        }
        return record
    }

    /// Seconds since 1970, finite and within the codec's bounds.
    private static func time(_ value: Any?) -> Double? {
        guard let seconds = (value as? Double) ?? (value as? Int).map(Double.init), seconds.isFinite,
            (0...EntryCodec.maxSeconds).contains(seconds)
        else { return nil }
        return seconds
    }
}
