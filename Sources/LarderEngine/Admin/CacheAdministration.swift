// What operators do to the store (the /cache admin routes): look at what is stored, remove it.
// The SQLite store implements it; the memory tier is told what was removed by the route.

public import LarderCore

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
