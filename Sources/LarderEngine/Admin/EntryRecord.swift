public import LarderCore

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
    public init(
        key: CacheKey, rowKey: CacheKey, namespace: String, method: String, url: String, status: Int, bytes: Int,
        storedAt: Double, expiresAt: Double, staleUntil: Double, version: Int64, tags: [String], hits: Int,
        lastAccessAt: Double, etag: String?, lastModified: String?, varies: [String]
    ) {
        self.key = key
        self.rowKey = rowKey
        self.namespace = namespace
        self.method = method
        self.url = url
        self.status = status
        self.bytes = bytes
        self.storedAt = storedAt
        self.expiresAt = expiresAt
        self.staleUntil = staleUntil
        self.version = version
        self.tags = tags
        self.hits = hits
        self.lastAccessAt = lastAccessAt
        self.etag = etag
        self.lastModified = lastModified
        self.varies = varies
    }
}
