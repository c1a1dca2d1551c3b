// An in-memory CacheStore for engine tests and experiments.

public import LarderCore
import LarderSync

public final class MemoryCacheStore: CacheStore {
    private let entries = Locked<[CacheKey: [StoredEntry]]>([:])
    private let hits = Locked<[CacheKey: Int]>([:])
    private let maxVariants: Int

    public init(maxVariants: Int = 16) {
        self.maxVariants = maxVariants
    }

    public func lookup(_ primaryKey: CacheKey) -> [StoredEntry] {
        entries.withLock { $0[primaryKey] ?? [] }
    }

    public func save(_ entry: StoredEntry, completion: @escaping @Sendable (Bool) -> Void) {
        entries.withLock { entries in
            var variants = (entries[entry.primaryKey] ?? []).filter { $0.varyNames == entry.varyNames && $0.key != entry.key }
            variants.append(entry)
            entries[entry.primaryKey] = Array(variants.sorted { $0.freshness.storedAt > $1.freshness.storedAt }.prefix(maxVariants))
        }
        completion(true)
    }

    public func recordHit(_ key: CacheKey, at time: Double) {
        hits.withLock { $0[key, default: 0] += 1 }
    }

    public func invalidate(urlKeys: [String], completion: @escaping @Sendable ([CacheKey]) -> Void) {
        let wanted = Set(urlKeys)
        let removed = entries.withLock { entries -> [CacheKey] in
            var primaries: [CacheKey] = []
            for (primary, variants) in entries where variants.contains(where: { wanted.contains($0.urlKey) }) {
                entries[primary] = variants.filter { !wanted.contains($0.urlKey) }
                primaries.append(primary)
            }
            return primaries
        }
        completion(removed)
    }

    public func invalidate(tags: [String], at time: Double, completion: @escaping @Sendable ([CacheKey]) -> Void) {
        let marked = entries.withLock { entries -> [CacheKey] in
            var primaries: [CacheKey] = []
            for (primary, variants) in entries where variants.contains(where: { $0.tags.contains(where: tags.contains) }) {
                entries[primary] = variants.map { entry in
                    guard entry.tags.contains(where: tags.contains) else { return entry }
                    var marked = entry
                    marked.freshness.markStale(at: time)
                    return marked
                }
                primaries.append(primary)
            }
            return primaries
        }
        completion(marked)
    }

    /// Removes everything under a primary key.
    public func remove(_ primaryKey: CacheKey) {
        entries.withLock { _ = $0.removeValue(forKey: primaryKey) }
    }

    public func hitCount(_ key: CacheKey) -> Int {
        hits.withLock { $0[key] ?? 0 }
    }
}
