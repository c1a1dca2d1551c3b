/// What the metrics read from a store on each scrape (cheap: no scan).
public struct StoreFigures: Sendable, Equatable {
    public var entries = 0
    public var bytes = 0
    /// The configured limit; nil where the store has none of its own (Redis: maxmemory).
    public var capacityBytes: Int?
    public var evictions = 0
    public var expiredRemovals = 0
    /// As StoredStatistics.evictionBacklog.
    public var evictionBacklog = 0
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
    /// The admission policy's counts (nil: the store has none).
    public var admission: AdmissionFigures?
    /// Namespaces with a budget of their own, by name (SQLite: `--namespace-max-bytes`).
    public var namespaceBudgets: [String: NamespaceBudgetFigures] = [:]
    public init() {}
}

/// A budgeted namespace: its budget, what it held after the last commit, and the entries its
/// budget evicted since start.
public struct NamespaceBudgetFigures: Sendable, Equatable {
    public var maxBytes: Int
    public var entries = 0
    public var bytes = 0
    public var evictions = 0
    public init(maxBytes: Int) { self.maxBytes = maxBytes }
}
