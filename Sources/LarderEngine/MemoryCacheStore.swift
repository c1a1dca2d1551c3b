// An in-memory CacheStore for engine tests and experiments.

public import LarderCore
import Synchronization

public final class MemoryCacheStore: CacheStore {
    private let entries = Mutex<[CacheKey: StoredEntry]>([:])
    private let hits = Mutex<[CacheKey: Int]>([:])

    public init() {}

    public func lookup(_ key: CacheKey) -> StoredEntry? {
        entries.withLock { $0[key] }
    }

    public func save(_ entry: StoredEntry, completion: @escaping @Sendable (Bool) -> Void) {
        entries.withLock { $0[entry.key] = entry }
        completion(true)
    }

    public func recordHit(_ key: CacheKey, at time: Double) {
        hits.withLock { $0[key, default: 0] += 1 }
    }

    public func invalidate(urlKeys: [String], completion: @escaping @Sendable ([CacheKey]) -> Void) {
        let wanted = Set(urlKeys)
        let removed = entries.withLock { entries -> [CacheKey] in
            let keys = entries.values.filter { wanted.contains($0.urlKey) }.map(\.key)
            for key in keys { entries.removeValue(forKey: key) }
            return keys
        }
        completion(removed)
    }

    public func remove(_ key: CacheKey) {
        entries.withLock { _ = $0.removeValue(forKey: key) }
    }

    public func hitCount(_ key: CacheKey) -> Int {
        hits.withLock { $0[key] ?? 0 }
    }
}
