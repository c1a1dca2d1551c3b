// The shared store: many Larder instances keep one cache in Redis. The engine does not change:
// this implements the same ports as the SQLite store, and each instance's memory tier stays in
// front of it.
//
// Layout (P is --store-prefix, default "larder:"; {…} is the Redis Cluster hash tag, so what
// must move together shares a slot):
//   P{<primary key>}:e      hash: "e:<row key>" → entry (EntryCodec), "h:<row key>" → hits,
//                           "~vary" → the Vary names every row shares. One HGETALL is a hit.
//   P{<primary key>}:lease  the lease of the instance fetching the key (cross-instance coalescing)
//   Pt:{<tag>}              set of primary keys carrying the tag (purge by tag)
//   Pu:{<url hash>}         set of primary keys stored for a URL (invalidation, purge by URL)
//   Pnsv                    hash: namespace → current version
//   Pwarm:jobs, Pwarm:{<id>}:items   warm jobs
//   Pdict:<id>              a compression dictionary's bytes and their HMAC (DictionarySeal);
//   Pdicts                  hash: id → "trainedAt namespace", the dictionaries kept
//   Psecret-fingerprint     HMAC of a fixed label under the instance secret: instances with
//                           another secret refuse to start (the secret itself is never here)
//   Pevents                 pub/sub: forgets, namespace versions, finished leases
//   P{<primary key>}:g      ghost: a first-time object refused while Redis is full (admission)
// Every key but the dictionaries' expires with its entry's retention (freshness + stale windows
// + --retention), so Redis's own eviction (maxmemory-policy allkeys-lfu) bounds memory; while Redis is full, only
// objects asked for again are written (RedisCacheStore+Admission.swift).
//
// Whoever can write to Redis can write any value: entries and dictionaries are authenticated
// (EntryCodec, DictionarySeal: a dictionary swapped for another could decode a stored frame into
// other bytes) and every other value read back is checked before use, so a value made up
// without the secret is at worst a miss, never a crash. What authentication cannot stop: such a writer can delete
// entries, put back a value Larder wrote earlier for the same key (served until its own
// freshness ends), or set a namespace's version back (its retired entries serve again).

import CXXHash
import Crypto
import Dispatch
import Foundation
public import LarderCore
public import LarderEngine
import LarderSync
public import Logging

// @unchecked Sendable: a dispatch timer is thread-safe, and `flushTimer` is set once in init;
// everything else is immutable or behind a lock or an atomic.
public final class RedisCacheStore: OperatedStore, SharedFlights, @unchecked Sendable {
    public struct Settings: Sendable {
        public var prefix = "larder:"
        public var timeoutMs = 250
        /// Seconds an entry is kept past its freshness and stale windows (--retention).
        public var retention: Double = 7 * 86_400
        public init() {}
    }

    let backend: any RedisBackend
    let settings: Settings
    let logger: Logger
    let codec: EntryCodec
    /// Authenticates the compression dictionaries kept here.
    let dictionarySeal: DictionarySeal
    /// Hex HMAC-SHA-256 of a fixed label under the secret: the same on every instance that
    /// has the same secret, and reveals nothing of it.
    let secretFingerprint: String
    /// Stored values refused when read (not authentic, malformed): a metric.
    let rejectedEntries = Atomic<Int>(0)
    private let rejectionLog = RateLimitedWarning()
    private let fingerprintLog = RateLimitedWarning()
    /// This instance, in the messages it publishes.
    let instance = UUID().uuidString
    /// Hit counts not yet sent, sharded so that hits on different keys rarely share a lock.
    private let hitShards = (0..<16).map { _ in HitShard() }
    private let flushTimer: DispatchSourceTimer
    let events: RedisEvents
    /// Keys this instance leads across instances, and the wakes of instances waiting here.
    let leading = Locked<[CacheKey: String]>([:]) // the lease's value, to release only one's own
    let waiting = Locked<[CacheKey: [@Sendable () -> Void]]>([:])
    /// Entries and bytes as the last full SCAN found them (see `usage`).
    let usageCache = Locked<(entries: Int, bytes: Int)>((0, 0))
    private let usageRefresh = IntervalGate(nanoseconds: 60_000_000_000)
    /// Whether Redis is full, and what admission did (RedisCacheStore+Admission.swift).
    let admission = RedisAdmission()

    /// Connects (failing when Redis cannot be reached, unless `requireConnection` is false).
    /// `secret` is the instance secret every instance on the store shares (--secret-file).
    public convenience init(
        address: RedisAddress, secret: [UInt8], settings: Settings = Settings(), requireConnection: Bool = true,
        logger: Logger
    ) throws {
        try self.init(
            backend: RedisPool(address: address, timeoutMs: settings.timeoutMs), secret: secret, settings: settings,
            requireConnection: requireConnection, logger: logger)
    }

    /// On a Redis Cluster (`redis-cluster://host:port,host:port`).
    public convenience init(
        clusterURL: String, secret: [UInt8], settings: Settings = Settings(), requireConnection: Bool = true,
        logger: Logger
    ) throws {
        let cluster = try RedisCluster(url: clusterURL, timeoutMs: settings.timeoutMs)
        if requireConnection { try cluster.discover() } else { try? cluster.discover() }
        try self.init(backend: cluster, secret: secret, settings: settings, requireConnection: requireConnection, logger: logger)
    }

    public init(backend: any RedisBackend, secret: [UInt8], settings: Settings, requireConnection: Bool, logger: Logger) throws {
        self.backend = backend
        self.settings = settings
        self.logger = logger
        codec = EntryCodec(secret: secret)
        dictionarySeal = DictionarySeal(secret: secret)
        secretFingerprint = Self.fingerprint(of: secret)
        self.events = RedisEvents(addresses: { backend.subscriberAddresses() }, channel: settings.prefix + "events", logger: logger)
        if requireConnection {
            do throws(RedisError) {
                let pong = try backend.run(["PING"])
                if case .error(let message) = pong { throw RedisError(message) }
            } catch {
                throw RedisError("cannot use Redis at \(backend.display): \(error.description)")
            }
        }
        // Made only now: a dispatch source released before it was resumed traps.
        flushTimer = DispatchSource.makeTimerSource(queue: .global(qos: .utility))
        flushTimer.schedule(deadline: .now() + 10, repeating: 10)
        flushTimer.setEventHandler { [weak self] in
            self?.flushHits()
            self?.reassertSecret()
        }
        flushTimer.resume()
        events.onMessage { [weak self] verb, argument in self?.received(verb, argument) }
        events.start()
    }

    public var storageHealthy: Bool { backend.healthy }
    public var storageFailures: Int { backend.failureCount }
    /// Where the store is (host:port; never the password).
    public var addressDisplay: String { backend.display }

    /// For the metrics: entries and bytes from the last full SCAN (refreshed in the background
    /// at most once a minute, since a SCAN per scrape would cost too much on a large Redis).
    public var figures: StoreFigures {
        if usageRefresh.claim() {
            DispatchQueue.global(qos: .utility).async { [weak self] in _ = self?.statistics() }
        }
        var figures = StoreFigures()
        let usage = usageCache.withLock { $0 }
        figures.entries = usage.entries
        figures.bytes = usage.bytes
        figures.failures = storageFailures
        figures.rejectedEntries = rejectedEntries.load(ordering: .relaxed)
        figures.admission = admission.figures
        return figures
    }

    public func close() {
        flushTimer.cancel()
        flushHits()
        events.stop()
        backend.drain()
    }

    // MARK: - The secret's fingerprint

    static func fingerprint(of secret: [UInt8]) -> String {
        let code = HMAC<SHA256>.authenticationCode(for: Array("larder-secret-fingerprint/1".utf8), using: SymmetricKey(data: secret))
        let digits = Array("0123456789abcdef".utf8)
        return String(decoding: code.flatMap { [digits[Int($0 >> 4)], digits[Int($0 & 15)]] }, as: UTF8.self)
    }

    var fingerprintKey: String { "\(settings.prefix)secret-fingerprint" }

    /// Makes sure every instance on this store has the same secret: the first to start records
    /// the secret's fingerprint, each later one compares its own and refuses to run with
    /// another (its keys would differ: the same request would be cached twice, and neither
    /// instance could read the other's entries). Removes the secret an earlier version kept in
    /// plain beside the entries (`<prefix>secret`).
    public func claimSecret() throws(RedisError) {
        let replies = try backend.run([
            ["SET", fingerprintKey, secretFingerprint, "NX"].map { Array($0.utf8) },
            ["GET", fingerprintKey].map { Array($0.utf8) },
            ["DEL", "\(settings.prefix)secret"].map { Array($0.utf8) }
        ])
        if case .error(let message) = replies[0] { throw RedisError("cannot record the secret's fingerprint in Redis: \(message)") }
        guard let recorded = replies[1].string else { throw RedisError("cannot read the secret's fingerprint back from Redis") }
        guard recorded == secretFingerprint else { throw Self.otherSecret(recorded: recorded, key: fingerprintKey, store: backend.display) }
    }

    static func otherSecret(recorded: String, key: String, store: String) -> RedisError {
        RedisError(
            "the store at \(store) is used by instances with another secret (the fingerprint in \(key) is \(recorded.prefix(12))…, "
                + "this secret's differs): give every instance the same --secret-file. To change the secret, stop every instance, "
                + "delete \(key) and start them all with the new file (or use a new --store-prefix)")
    }

    /// Every 10 s: records the fingerprint again if Redis lost it (a restart without
    /// persistence, an eviction), and says so loudly if an instance with another secret
    /// recorded its own meanwhile.
    func reassertSecret() {
        guard
            let replies = try? backend.run([
                ["SET", fingerprintKey, secretFingerprint, "NX"].map { Array($0.utf8) },
                ["GET", fingerprintKey].map { Array($0.utf8) }
            ]),
            let recorded = replies[1].string, recorded != secretFingerprint
        else { return }
        fingerprintLog.warn(
            logger, level: .error,
            "\(Self.otherSecret(recorded: recorded, key: fingerprintKey, store: backend.display).description); "
                + "this instance's entries and theirs are misses to each other")
    }

    // MARK: - Keys

    func entryKey(_ primaryKey: CacheKey) -> String { "\(settings.prefix){\(primaryKey.hex)}:e" }
    func leaseKey(_ primaryKey: CacheKey) -> String { "\(settings.prefix){\(primaryKey.hex)}:lease" }
    func tagKey(_ tag: String) -> String { "\(settings.prefix)t:{\(tag)}" }
    func urlIndexKey(_ urlKey: String) -> String {
        let hash = Array(urlKey.utf8).withUnsafeBytes { XXH3_64bits($0.baseAddress, $0.count) }
        return "\(settings.prefix)u:{\(String(hash, radix: 16))}"
    }
    var namespaceVersionsKey: String { "\(settings.prefix)nsv" }
    var entryPattern: String { "\(settings.prefix){*}:e" }

    /// Milliseconds Redis keeps an entry: its freshness and stale windows, then --retention.
    func retentionMs(_ entry: StoredEntry) -> Int64 {
        let freshness = entry.freshness
        let seconds = max(0, freshness.staleUntil - freshness.storedAt) + settings.retention
        return Int64(min(seconds, 10 * 365 * 86_400) * 1000)
    }

    // MARK: - CacheStore

    public func lookup(_ primaryKey: CacheKey) -> [StoredEntry] {
        let reply: RedisValue
        do {
            reply = try backend.run(["HGETALL", entryKey(primaryKey)])
        } catch {
            logger.debug("Redis lookup failed; answering as a miss", metadata: ["error": "\(error)"])
            return []
        }
        if case .error(let message) = reply, message.hasPrefix("WRONGTYPE") {
            // Not a hash, so not Larder's: left there, it would also fail every save of this key.
            reject(field: nil, of: primaryKey, because: "is not an entry hash")
        }
        return entries(fromHash: reply.array, primaryKey: primaryKey)
    }

    /// A value that is not Larder's own: counted, logged at most once a minute (whoever can
    /// write one can write millions), and removed (the one field, or the whole key).
    private func reject(field: String?, of primaryKey: CacheKey, because reason: String) {
        rejectedEntries.add(1, ordering: .relaxed)
        rejectionLog.warn(
            logger, level: .warning, "a value in Redis \(reason); removed and answered as a miss",
            metadata: ["key": "\(entryKey(primaryKey))", "field": "\(field ?? "-")"])
        if let field {
            _ = try? backend.run(["HDEL", entryKey(primaryKey), field, "h:" + field.dropFirst(2)])
        } else {
            _ = try? backend.run(["DEL", entryKey(primaryKey)])
        }
    }

    /// The entries among a hash's fields. A value that is not authentic or not valid (written by
    /// someone without the secret, damaged, or in another format) is left out, removed,
    /// counted, and logged at most once a minute (whoever can write one can write millions).
    /// `removing`: a lookup removes what it rejects; an admin read (listing, statistics) only
    /// leaves it out, so a read never deletes (an instance started with another secret in
    /// fallback mode would otherwise delete the others' entries on every listing).
    func entries(fromHash fields: [RedisValue], primaryKey: CacheKey, removing: Bool = true) -> [StoredEntry] {
        var entries: [StoredEntry] = []
        var index = 0
        while index + 1 < fields.count {
            defer { index += 2 }
            guard let name = fields[index].string, name.hasPrefix("e:"), let value = fields[index + 1].bytes else { continue }
            let rejection: EntryCodec.Rejection
            do throws(EntryCodec.Rejection) {
                let entry = try codec.decode(value)
                // Authentic, but it must also be where it was written (not copied to another key).
                if entry.primaryKey == primaryKey, name == "e:" + entry.key.hex {
                    entries.append(entry)
                    continue
                }
                rejection = .misplaced
            } catch {
                rejection = error
            }
            if removing { reject(field: name, of: primaryKey, because: rejection.rawValue) }
        }
        return entries
    }

    /// Writes an entry and, when this instance leads the key's flight (cross-instance
    /// coalescing), releases the lease and tells the waiting instances: the entry is there
    /// before anyone is told. A response that varies differently from the rows under its key
    /// replaces them all (RFC 9111 §4.1).
    /// KEYS: entry, lease. ARGV: row key, value, Vary names, milliseconds, lease value (empty:
    /// no lease), channel, message.
    static let saveScript = """
        local current = redis.call('HGET', KEYS[1], '~vary')
        if current and current ~= ARGV[3] then redis.call('DEL', KEYS[1]) end
        redis.call('HSET', KEYS[1], '~vary', ARGV[3], 'e:' .. ARGV[1], ARGV[2])
        redis.call('PEXPIRE', KEYS[1], ARGV[4])
        if ARGV[5] ~= '' and redis.call('GET', KEYS[2]) == ARGV[5] then
          redis.call('DEL', KEYS[2])
          redis.call('PUBLISH', ARGV[6], ARGV[7])
        end
        return 1
        """

    /// The commands of a save as Redis is sent them, made once.
    static let saveCommand = (eval: Array("EVAL".utf8), script: Array(saveScript.utf8), twoKeys: Array("2".utf8))
    static let indexCommand = (script: Array(indexScript.utf8), oneKey: Array("1".utf8))

    /// Adds a primary key to an index set (a tag's, a URL's) and keeps the set as long as the
    /// entry. KEYS: the set. ARGV: primary key, milliseconds.
    static let indexScript = "redis.call('SADD', KEYS[1], ARGV[1]) redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1"

    /// Writes the entry (releasing this instance's lease on its key) and its tag and URL
    /// indexes in one pipelined round trip: one script for the entry's hash slot and one per
    /// index, since on a Redis Cluster each index lives in a slot of its own. A plain miss is
    /// then four commands in all: the lookup, the lease, the entry, its URL's index.
    /// While Redis is full, a first-time entry is not written (`admits`): answered as not stored.
    public func save(_ entry: StoredEntry, completion: @escaping @Sendable (Bool) -> Void) {
        guard admits(entry) else { return completion(false) }
        let ttl = Array(String(retentionMs(entry)).utf8)
        let primaryKey = entry.primaryKey
        let lease = leading.withLock { $0.removeValue(forKey: primaryKey) }
        let primaryHex = Array(primaryKey.hex.utf8)
        var commands: [[[UInt8]]] = [
            [
                Self.saveCommand.eval, Self.saveCommand.script, Self.saveCommand.twoKeys, Array(entryKey(primaryKey).utf8),
                Array(leaseKey(primaryKey).utf8), Array(entry.key.hex.utf8), codec.encode(entry),
                Array(entry.varyNames.joined(separator: ",").utf8), ttl, Array((lease ?? "").utf8), Array(events.channel.utf8),
                Array("done \(primaryKey.hex)".utf8)
            ]
        ]
        for index in entry.tags.map(tagKey) + [urlIndexKey(entry.urlKey)] {
            commands.append([Self.saveCommand.eval, Self.indexCommand.script, Self.indexCommand.oneKey, Array(index.utf8), primaryHex, ttl])
        }
        let saved: Bool
        do {
            let replies = try backend.run(commands)
            if case .error(let message) = replies[0] {
                logger.warning("Redis refused an entry", metadata: ["error": "\(message)"])
                saved = false
            } else {
                saved = true
            }
        } catch {
            logger.debug("Redis save failed; the response is served unstored", metadata: ["error": "\(error)"])
            saved = false
        }
        // Not written, so not released by the script: `release` (the flight's landing) does it.
        if !saved, let lease { leading.withLock { $0[primaryKey] = lease } }
        completion(saved)
    }

    public func recordHit(_ key: CacheKey, at time: Double) {
        hitShards[key.shardIndex].tally.withLock { tally in
            if tally[key.hex] != nil {
                tally[key.hex]!.hits += 1
                return
            }
            // A variant's row key is its primary key, a dot and its fingerprint.
            tally[key.hex] = (CacheKey(hex: String(key.hex.prefix { $0 != "." })), 1)
        }
    }

    static let hitScript = "if redis.call('EXISTS', KEYS[1]) == 1 then return redis.call('HINCRBY', KEYS[1], ARGV[1], ARGV[2]) end return 0"

    /// Hit counts reach Redis every 10 s, one pipelined round trip for all keys.
    func flushHits() {
        var tally: [String: (primaryKey: CacheKey, hits: Int64)] = [:]
        for shard in hitShards {
            tally.merge(
                shard.tally.withLock { taken in
                    defer { taken = [:] }
                    return taken
                }
            ) { ($0.primaryKey, $0.hits + $1.hits) }
        }
        guard !tally.isEmpty else { return }
        let commands = tally.map { rowKey, count in
            ["EVAL", Self.hitScript, "1", entryKey(count.primaryKey), "h:" + rowKey, String(count.hits)].map { Array($0.utf8) }
        }
        _ = try? backend.run(commands)
    }

    public func invalidate(urlKeys: [String], completion: @escaping @Sendable ([CacheKey]) -> Void) {
        var removed: [CacheKey] = []
        do {
            removed = try deleteEntries(try members(of: urlKeys.map(urlIndexKey)), alsoDelete: urlKeys.map(urlIndexKey)).map(\.primaryKey)
        } catch {
            logger.warning("Redis invalidation failed", metadata: ["error": "\(error)"])
        }
        publishForget(removed)
        completion(removed)
    }

    /// A soft purge by tags (CacheStore), every instance told.
    public func invalidate(tags: [String], at time: Double, completion: @escaping @Sendable ([CacheKey]) -> Void) {
        purge(PurgeFilter(markingStale: tags, at: time)) { result in completion(Array(result.primaryKeys)) }
    }

    /// The longest namespace a request may name (FetchRequest); longer names in Redis are not Larder's.
    static let maxNamespaceBytes = 256

    public func namespaceVersions() -> [String: Int64] {
        guard let reply = try? backend.run(["HGETALL", namespaceVersionsKey])
        else { return [:] }
        var versions: [String: Int64] = [:]
        let fields = reply.array
        for index in stride(from: 0, to: fields.count - 1, by: 2) {
            // As any value read from Redis: used only when it is one the admin API could have set.
            if let name = fields[index].string, !name.isEmpty, name.utf8.count <= Self.maxNamespaceBytes,
                let version = fields[index + 1].string.flatMap({ Int64($0) }), CacheOptions.versions.contains(version)
            {
                versions[name] = version
            }
        }
        return versions
    }

    /// The primary keys the index sets hold (tags, URLs), each once.
    func members(of indexKeys: [String]) throws(RedisError) -> [CacheKey] {
        let replies = try backend.run(indexKeys.map { ["SMEMBERS", $0].map { Array($0.utf8) } })
        return Array(Set(replies.flatMap { $0.array.compactMap { $0.string.map(CacheKey.init(hex:)) } }))
    }

    /// An entry hash's hit counts and stored sizes, by row key.
    static func fields(of hash: [RedisValue]) -> (hits: [String: Int], sizes: [String: Int]) {
        var hits: [String: Int] = [:]
        var sizes: [String: Int] = [:]
        for index in stride(from: 0, to: hash.count - 1, by: 2) {
            guard let name = hash[index].string else { continue }
            if name.hasPrefix("h:") { hits[String(name.dropFirst(2))] = Int(hash[index + 1].string ?? "") ?? 0 }
            if name.hasPrefix("e:") { sizes[String(name.dropFirst(2))] = hash[index + 1].bytes?.count ?? 0 }
        }
        return (hits, sizes)
    }

    /// Deletes whole entry hashes (every variant) and `alsoDelete`; returns what went, with
    /// the bytes the entries took.
    func deleteEntries(_ keys: [CacheKey], alsoDelete extra: [String] = [])
        throws(RedisError) -> [(primaryKey: CacheKey, bytes: Int, rows: Int)]
    {
        guard !keys.isEmpty || !extra.isEmpty else { return [] }
        var removed: [(primaryKey: CacheKey, bytes: Int, rows: Int)] = []
        for chunk in stride(from: 0, to: keys.count, by: 500).map({ Array(keys[$0..<min($0 + 500, keys.count)]) }) {
            let sizes = try backend.run(
                chunk.map { ["HGETALL", entryKey($0)].map { Array($0.utf8) } }
                    + chunk.map { ["DEL", entryKey($0)].map { Array($0.utf8) } })
            do {
                try requireNoErrorReply(sizes[chunk.count...])
            } catch {
                // Some deletes may have run (on a cluster, one node refused): every instance
                // forgets the whole chunk, so none keeps serving what did go.
                publishForget(chunk)
                throw error
            }
            for (index, key) in chunk.enumerated() {
                let rows = Self.fields(of: sizes[index].array).sizes
                if !rows.isEmpty { removed.append((key, rows.values.reduce(0, +), rows.count)) }
            }
        }
        if !extra.isEmpty {
            try backend.runWrites(extra.map { ["DEL", $0].map { Array($0.utf8) } })
        }
        return removed
    }

    // MARK: - Cross-instance messages

    /// Tells every instance to drop these keys from its memory tier (all of it past 1,000).
    func publishForget(_ keys: [CacheKey]) {
        guard !keys.isEmpty else { return }
        if keys.count > 1000 { return events.publish(backend, "forget-all", "") }
        for key in keys { events.publish(backend, "forget", key.hex) }
    }

    private let forgetHandler = CallbackSlot<CacheKey?>()
    private let versionHandler = CallbackSlot<(namespace: String, version: Int64)>()

    /// `handler(key)` when another instance removed a key, `handler(nil)` when everything must
    /// go (a big purge, or messages may have been missed while disconnected).
    public func onForget(_ handler: @escaping @Sendable (CacheKey?) -> Void) { forgetHandler.set(handler) }
    /// `handler(namespace, version)` when an instance set a namespace's version.
    public func onNamespaceVersion(_ handler: @escaping @Sendable (String, Int64) -> Void) {
        versionHandler.set { handler($0.namespace, $0.version) }
    }

    private func received(_ verb: String, _ argument: String) {
        switch verb {
        case "forget":
            forgetHandler(CacheKey(hex: argument))
        case "forget-all", "resync":
            forgetHandler(nil)
            if verb == "resync", let handler = versionHandler.current {
                for (namespace, version) in namespaceVersions() { handler((namespace, version)) }
            }
        case "version":
            // The message is only a hint to look: the version applied is the one the hash holds,
            // so a message alone (anyone who can PUBLISH) changes nothing and adds no namespace.
            let parts = argument.split(separator: " ", maxSplits: 1)
            guard parts.count == 2, let version = Int64(parts[0]), CacheOptions.versions.contains(version),
                parts[1].utf8.count <= Self.maxNamespaceBytes,
                let stored = try? backend.run(["HGET", namespaceVersionsKey, String(parts[1])]).string.flatMap({ Int64($0) }),
                stored == version
            else { return }
            versionHandler((namespace: String(parts[1]), version: version))
        case "done":
            let key = CacheKey(hex: argument)
            for wake in waiting.withLock({ $0.removeValue(forKey: key) ?? [] }) { DispatchQueue.global().async(execute: wake) }
        default:
            break
        }
    }
}

/// Locked (Mutex) is non-copyable, so each shard lives in a class to sit in an array.
private final class HitShard: Sendable {
    let tally = Locked<[String: (primaryKey: CacheKey, hits: Int64)]>([:])
}
