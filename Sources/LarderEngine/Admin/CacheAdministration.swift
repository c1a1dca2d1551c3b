// What operators do to the store (the /cache admin routes): look at what is stored, remove it.
// The SQLite store implements it; the memory tier is told what was removed by the route.

public import LarderCore
import LarderSync

/// Which entries a purge removes. Conditions combine with AND; `all` stands alone.
public struct PurgeFilter: Sendable, Equatable {
    public var namespace: String?
    /// The entry's URL, as requested, starts with this.
    public var urlPrefix: String?
    /// The URL's host (lower-case, any port).
    public var host: String?
    /// Stored before this time (seconds since 1970).
    public var storedBefore: Double?
    /// Stored under a version lower than this.
    public var versionBelow: Int64?
    /// Past freshness and every stale window at this time.
    public var expiredAt: Double?
    /// Normalised URLs (UpstreamURL.keyString()): their entries in every namespace.
    public var urls: [String]?
    /// Entries carrying any of these tags.
    public var tags: [String]?
    /// Under any version but this one (a namespace's retired entries).
    public var versionOtherThan: Int64?
    /// Listing only: the response status, and still within freshness or a stale window at this time.
    public var status: Int?
    public var notExpiredAt: Double?
    public var all = false

    public init() {}

    /// No condition and not `all`: selects nothing.
    public var isEmpty: Bool { hasNoConditions && !all }

    /// No condition set (`all` aside).
    var hasNoConditions: Bool {
        namespace == nil && urlPrefix == nil && host == nil && storedBefore == nil && versionBelow == nil && expiredAt == nil
            && urls == nil && tags == nil && versionOtherThan == nil && status == nil && notExpiredAt == nil
    }
}

/// One stored row as the admin API lists it (no body).
public struct EntryRecord: Sendable, Equatable {
    /// The request's key (what /fetch reports; every variant shares it) and the row's own.
    public var key: CacheKey
    public var rowKey: CacheKey
    public var namespace: String
    public var method: String
    public var url: String
    public var status: Int
    public var bytes: Int
    public var storedAt: Double
    /// End of freshness, and end of the longest stale window after it.
    public var expiresAt: Double
    public var staleUntil: Double
    public var version: Int64
    public var tags: [String]
    public var hits: Int
    public var lastAccessAt: Double
    public var etag: String?
    public var lastModified: String?
    /// The request fields the response varies on (Vary), lower-case.
    public var varies: [String]
    public init(key: CacheKey, rowKey: CacheKey, namespace: String, method: String, url: String, status: Int, bytes: Int,
                storedAt: Double, expiresAt: Double, staleUntil: Double, version: Int64, tags: [String], hits: Int,
                lastAccessAt: Double, etag: String?, lastModified: String?, varies: [String]) {
        self.key = key; self.rowKey = rowKey; self.namespace = namespace; self.method = method; self.url = url
        self.status = status; self.bytes = bytes; self.storedAt = storedAt; self.expiresAt = expiresAt
        self.staleUntil = staleUntil; self.version = version; self.tags = tags; self.hits = hits
        self.lastAccessAt = lastAccessAt; self.etag = etag; self.lastModified = lastModified; self.varies = varies
    }
}

/// One page of a listing, in row-key order; `nextCursor` continues after its last row (nil at
/// the end). Keyset pagination: rows added or removed meanwhile never make a later page skip
/// or repeat a row that was there all along.
public struct EntryPage: Sendable, Equatable {
    public var records: [EntryRecord] = []
    public var nextCursor: String?
    public init() {}
}

public struct PurgeResult: Sendable, Equatable {
    public var removed = 0
    /// Bytes of bodies and metadata removed.
    public var bytes = 0
    /// The primary keys whose rows were removed (for the memory tier).
    public var primaryKeys: Set<CacheKey> = []
    /// The store failed before the end (unreachable, an error): what is counted went, but
    /// entries the purge should have removed may remain.
    public var failed = false
    public init() {}
}

/// What the store holds, read from the database.
public struct StoredStatistics: Sendable, Equatable {
    public struct Namespace: Sendable, Equatable {
        public var name: String
        public var entries: Int
        public var bytes: Int
        public init(name: String, entries: Int, bytes: Int) { self.name = name; self.entries = entries; self.bytes = bytes }
    }
    public var entries = 0
    public var bytes = 0
    public var oldestStoredAt: Double?
    public var newestStoredAt: Double?
    public var namespaces: [Namespace] = []
    /// The store's limit (`--max-bytes`); nil when unbounded.
    public var capacityBytes: Int?
    /// Entries evicted for capacity, and removed by the retention sweep, since start.
    public var evictions = 0
    public var expiredRemovals = 0
    public init() {}
}

public protocol CacheAdministration: Sendable {
    /// Entries and bytes, overall and per namespace (committed and uncommitted alike).
    func statistics() -> StoredStatistics
    /// Removes every entry the filter matches, in batches that never hold the writer long;
    /// calls back once all are gone (uncommitted entries included), or with `failed` set when
    /// the store failed before the end.
    func purge(_ filter: PurgeFilter, completion: @escaping @Sendable (PurgeResult) -> Void)
    /// Removes every row (all variants, any part) under a primary key.
    func remove(primaryKey: CacheKey, completion: @escaping @Sendable (PurgeResult) -> Void)
    /// Up to `limit` rows matching `filter` whose row key sorts after `cursor`.
    func list(_ filter: PurgeFilter, after cursor: String?, limit: Int) -> EntryPage
    /// Every row under a primary key (all variants), oldest first.
    func records(primaryKey: CacheKey) -> [EntryRecord]
    /// Records a namespace's current version (NamespaceVersions); calls back once it is durable.
    func setNamespaceVersion(_ namespace: String, to version: Int64, completion: @escaping @Sendable (Bool) -> Void)
}

/// Where answers and upstream exchanges are reported besides the counters (the metrics).
public protocol TrafficObserver: Sendable {
    /// One answer: its outcome (nil for a failure, then `errorCode`), the request's namespace.
    func answered(outcome: CacheOutcome?, coalesced: Bool, errorCode: String?, namespace: String)
    /// One upstream exchange: `upstream` names it (a named upstream, or "fetch" for a URL),
    /// `status` its status (nil on failure, then `errorCode`), `seconds` its duration.
    func exchanged(upstream: String, status: Int?, errorCode: String?, seconds: Double)
}

/// Answers counted since the process started, by outcome and by error code. A hit adds to
/// one relaxed atomic: no lock on the hit path.
public final class TrafficCounters: Sendable {
    private let hits = Atomic<Int>(0)
    private let misses = Atomic<Int>(0)
    private let stale = Atomic<Int>(0)
    private let bypassed = Atomic<Int>(0)
    private let revalidated = Atomic<Int>(0)
    private let coalesced = Atomic<Int>(0)
    private let errors = Locked<[String: Int]>([:])
    public let startedAt: Double
    /// Read without a lock on every answer: set once, before traffic.
    nonisolated(unsafe) private var observer: (any TrafficObserver)?

    public init(startedAt: Double) { self.startedAt = startedAt }

    /// Reports to `observer` too; call once, before the first request.
    public func observe(with observer: any TrafficObserver) {
        self.observer = observer
    }

    func exchanged(upstream: String, status: Int?, errorCode: String?, seconds: Double) {
        observer?.exchanged(upstream: upstream, status: status, errorCode: errorCode, seconds: seconds)
    }

    public func count(_ answer: CacheAnswer, namespace: String) {
        if let observer {
            switch answer {
            case .served(let served):
                observer.answered(outcome: served.report.outcome, coalesced: served.report.coalesced, errorCode: nil, namespace: namespace)
            case .failed(let error):
                observer.answered(outcome: nil, coalesced: false, errorCode: error.code.rawValue, namespace: namespace)
            }
        }
        switch answer {
        case .served(let served):
            switch served.report.outcome {
            case .hit: hits.add(1, ordering: .relaxed)
            case .miss: misses.add(1, ordering: .relaxed)
            case .stale: stale.add(1, ordering: .relaxed)
            case .bypass: bypassed.add(1, ordering: .relaxed)
            case .revalidated: revalidated.add(1, ordering: .relaxed)
            }
            if served.report.coalesced { coalesced.add(1, ordering: .relaxed) }
        case .failed(let error):
            errors.withLock { $0[error.code.rawValue, default: 0] += 1 }
        }
    }

    public struct Snapshot: Sendable, Equatable {
        public var hits = 0, misses = 0, stale = 0, bypassed = 0, revalidated = 0, coalesced = 0
        /// Failed answers by error code.
        public var errors: [String: Int] = [:]
        public var requests: Int { hits + misses + stale + bypassed + revalidated + errors.values.reduce(0, +) }
        /// Answers from the cache (hits, stale, revalidated) over answers that could have come from it.
        public var hitRatio: Double? {
            let served = hits + stale + revalidated
            let total = served + misses
            return total == 0 ? nil : Double(served) / Double(total)
        }
    }

    public func snapshot() -> Snapshot {
        var snapshot = Snapshot()
        snapshot.hits = hits.load(ordering: .relaxed)
        snapshot.misses = misses.load(ordering: .relaxed)
        snapshot.stale = stale.load(ordering: .relaxed)
        snapshot.bypassed = bypassed.load(ordering: .relaxed)
        snapshot.revalidated = revalidated.load(ordering: .relaxed)
        snapshot.coalesced = coalesced.load(ordering: .relaxed)
        snapshot.errors = errors.withLock { $0 }
        return snapshot
    }
}

extension PurgeFilter {
    /// Whether `entry` is one this filter selects: the same rules the SQLite store applies in
    /// SQL, for stores that filter in memory (Redis).
    public func matches(_ entry: StoredEntry) -> Bool {
        if hasNoConditions { return all }
        let freshness = entry.freshness
        let end = freshness.staleUntil
        if let namespace, entry.namespace != namespace { return false }
        if let urlPrefix, !entry.url.hasPrefix(urlPrefix) { return false }
        if let host {
            let lower = host.lowercased()
            let starts = ["http", "https"].contains { scheme in
                ["/", ":"].contains { entry.urlKey.hasPrefix("\(scheme)://\(lower)\($0)") }
            }
            if !starts { return false }
        }
        if let storedBefore, !(freshness.storedAt < storedBefore) { return false }
        if let versionBelow, !(freshness.version < versionBelow) { return false }
        if let urls, !urls.contains(entry.urlKey) { return false }
        if let tags, !entry.tags.contains(where: tags.contains) { return false }
        if let versionOtherThan, freshness.version == versionOtherThan { return false }
        if let status, entry.status != status { return false }
        if let expiredAt, !(end <= expiredAt) { return false }
        if let notExpiredAt, !(end > notExpiredAt) { return false }
        return true
    }
}

/// Several instances coalescing one key's misses into one upstream request (a shared store's
/// leases). The engine asks before it sends a request upstream for a key it leads locally.
public protocol SharedFlights: Sendable {
    /// Tries to lead `key` across instances for at most `seconds`; false when another instance
    /// leads. Then `wake` is called once, when that leader is done or its lease has lapsed
    /// (never when this instance leads).
    func claim(_ key: CacheKey, forSeconds seconds: Double, wake: @escaping @Sendable () -> Void) -> Bool
    /// This instance's lead on `key` (if it has one) is over: release it and wake the others.
    func release(_ key: CacheKey)
}

/// Whether the store can be reached (a shared store can be lost while Larder runs).
public protocol StorageHealth: Sendable {
    var storageHealthy: Bool { get }
}

/// What the metrics read from a store on each scrape (cheap: no scan).
public struct StoreFigures: Sendable, Equatable {
    public var entries = 0
    public var bytes = 0
    /// The configured limit; nil where the store has none of its own (Redis: maxmemory).
    public var capacityBytes: Int?
    public var evictions = 0
    public var expiredRemovals = 0
    /// Store operations that failed since start (a shared store out of reach).
    public var failures = 0
    /// Responses answered but not stored because the store was too far behind.
    public var shedWrites = 0
    /// Lookups of keys never stored answered without reading the store (SQLite's key filter).
    public var lookupsSkipped = 0
    /// Body files whose descriptors are kept open between hits (SQLite's body files).
    public var bodyFilesOpen = 0
    /// Stored values refused when read, removed and answered as misses (a shared store's values
    /// that fail authentication or are malformed).
    public var rejectedEntries = 0
    public init() {}
}

/// Everything the service needs of a store: the cache, the admin API, warm jobs, health.
public protocol OperatedStore: CacheStore, CacheAdministration, WarmJobStore, StorageHealth {
    var figures: StoreFigures { get }
    func close()
}
