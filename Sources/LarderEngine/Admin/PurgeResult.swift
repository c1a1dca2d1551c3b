public import LarderCore

public struct PurgeResult: Sendable, Equatable {
    public var removed = 0
    /// Entries a soft purge marked stale (kept, revalidated on their next request).
    public var invalidated = 0
    /// Bytes of bodies and metadata removed.
    public var bytes = 0
    /// The primary keys whose rows were removed or marked stale (for the memory tier).
    public var primaryKeys: Set<CacheKey> = []
    /// The store failed before the end (unreachable, an error): what is counted went, but
    /// entries the purge should have removed may remain.
    public var failed = false
    public init() {}
}
