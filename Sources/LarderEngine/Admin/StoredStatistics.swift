/// What the store holds, read from the database.
public struct StoredStatistics: Sendable, Equatable {
    public struct Namespace: Sendable, Equatable {
        public var name: String
        public var entries: Int
        public var bytes: Int
        /// The namespace's budget (`--namespace-max-bytes`), and what it evicted since start;
        /// nil without one.
        public var maxBytes: Int?
        public var evictions: Int?
        public init(name: String, entries: Int, bytes: Int) {
            self.name = name
            self.entries = entries
            self.bytes = bytes
        }
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
    /// Objects evicted whose rows wait to be deleted in background batches (SQLite, after a
    /// large eviction); `bytes` still counts them.
    public var evictionBacklog = 0
    /// The admission policy's counts (nil: the store has none).
    public var admission: AdmissionFigures?
    /// The store could not be read (a shared Redis out of reach, a database error): the figures
    /// are not the store's, and an admin call answers `503 storage_failed` instead of them.
    public var failed = false
    public init() {}
}
