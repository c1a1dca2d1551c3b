// The engine's view of persistent storage. Adapters implement it (LarderSQLite, LarderRedis);
// engine tests use the in-memory store.

public import LarderCore

/// Persistent storage of entries.
public protocol CacheStore: Sendable {
    /// The entries stored under a primary key: one, or one per variant when the response
    /// varies (at most the store's variant limit). Synchronous and safe from any thread:
    /// called on the server's worker thread so a hit is answered without a hop. Damaged rows
    /// are left out (and removed).
    func lookup(_ primaryKey: CacheKey) -> [StoredEntry]
    /// Writes atomically, replacing the row with the same key, and the primary key's rows
    /// that vary on other fields; keeps at most the variant limit. Calls back with whether it
    /// was written, once later lookups find it: possibly on the caller's thread, before it is
    /// durable (a write-behind store commits afterwards).
    func save(_ entry: StoredEntry, completion: @escaping @Sendable (Bool) -> Void)
    /// Counts a hit; may be batched.
    func recordHit(_ key: CacheKey, at time: Double)
    /// The body of an entry the store keeps in a file, read and checked; nil when the file is
    /// gone or damaged (the entry is then dropped).
    func readBody(of entry: StoredEntry) -> [UInt8]?
    /// The same file opened for sending; nil when it is gone or not the stored size.
    func openBody(of entry: StoredEntry) -> OwnedDescriptor?
    /// Removes every entry whose normalised URL is one of `urlKeys`, in every namespace and
    /// partition; calls back with the primary keys of what was removed.
    func invalidate(urlKeys: [String], completion: @escaping @Sendable ([CacheKey]) -> Void)
    /// Marks stale at `time` every entry carrying one of `tags` (a soft purge; their validators
    /// revalidate them); calls back with the primary keys of what was marked.
    func invalidate(tags: [String], at time: Double, completion: @escaping @Sendable ([CacheKey]) -> Void)
    /// Namespace versions set through the admin API (NamespaceVersions), read at start.
    func namespaceVersions() -> [String: Int64]
}

extension CacheStore {
    // Stores that keep every body inline have no files.
    public func readBody(of entry: StoredEntry) -> [UInt8]? { entry.bodyFile == nil ? entry.body : nil }
    public func openBody(of entry: StoredEntry) -> OwnedDescriptor? { nil }
    public func namespaceVersions() -> [String: Int64] { [:] }
}
