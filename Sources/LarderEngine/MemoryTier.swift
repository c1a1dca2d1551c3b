// A bounded in-memory tier in front of the persistent store (NSURLCache's memory capacity).
//
// Hot entries are answered from memory: no SQLite read transaction (whose WAL locks are
// fcntl calls), no checksum (the body was verified when it was loaded from disk). Every
// write goes through here, so memory never holds an entry the store does not: `save` updates
// memory only after the store committed. One Larder process per database file.
//
// Eviction is CLOCK (second chance) per shard, bounded by bytes; the shards keep lock
// contention negligible with a handful of server threads.

public import LarderCore
import Synchronization

public final class MemoryTier: CacheStore {
    private let backing: any CacheStore
    private let shards: [Shard]
    private let shardBudget: Int

    private final class Shard: Sendable {
        let state = Mutex(State())
    }

    private struct State {
        var entries: [CacheKey: Slot] = [:]
        var ring: [CacheKey] = []
        var hand = 0
        var bytes = 0
    }

    private struct Slot {
        var entry: StoredEntry
        var referenced: Bool
        var size: Int
    }

    /// `capacityBytes` 0 disables the tier (every call goes to `backing`).
    public init(backing: any CacheStore, capacityBytes: Int, shardCount: Int = 16) {
        self.backing = backing
        self.shards = (0..<shardCount).map { _ in Shard() }
        self.shardBudget = capacityBytes / shardCount
    }

    private func shard(for key: CacheKey) -> Shard {
        shards[Int(key.hex.utf8.last ?? 0) % shards.count]
    }

    private static func size(of entry: StoredEntry) -> Int {
        entry.body.count + entry.headersJSON.count + entry.url.utf8.count + 256
    }

    public func lookup(_ key: CacheKey) -> StoredEntry? {
        guard shardBudget > 0 else { return backing.lookup(key) }
        let shard = shard(for: key)
        let cached: StoredEntry? = shard.state.withLock { state in
            guard var slot = state.entries[key] else { return nil }
            if !slot.referenced {
                slot.referenced = true
                let entry = slot.entry
                state.entries[key] = slot
                return entry
            }
            return slot.entry
        }
        if let cached { return cached }
        guard let loaded = backing.lookup(key) else { return nil }
        remember(loaded, in: shard)
        return loaded
    }

    public func save(_ entry: StoredEntry, completion: @escaping @Sendable (Bool) -> Void) {
        backing.save(entry) { [self] saved in
            if shardBudget > 0 {
                if saved {
                    remember(entry, in: shard(for: entry.key))
                } else {
                    forget(entry.key)
                }
            }
            completion(saved)
        }
    }

    public func recordHit(_ key: CacheKey, at time: Double) {
        backing.recordHit(key, at: time)
    }

    public func invalidate(urlKeys: [String], completion: @escaping @Sendable ([CacheKey]) -> Void) {
        backing.invalidate(urlKeys: urlKeys) { [self] removed in
            for key in removed { forget(key) }
            completion(removed)
        }
    }

    /// Drops `key` from memory (after a delete in the store).
    public func forget(_ key: CacheKey) {
        guard shardBudget > 0 else { return }
        shard(for: key).state.withLock { state in
            if let slot = state.entries.removeValue(forKey: key) {
                state.bytes -= slot.size
                state.ring.removeAll { $0 == key }
                state.hand = state.ring.isEmpty ? 0 : state.hand % state.ring.count
            }
        }
    }

    private func remember(_ entry: StoredEntry, in shard: Shard) {
        let size = Self.size(of: entry)
        // One entry may take at most a quarter of its shard.
        guard size <= shardBudget / 4 else { return forget(entry.key) }
        shard.state.withLock { state in
            if let old = state.entries[entry.key] {
                state.bytes -= old.size
            } else {
                state.ring.append(entry.key)
            }
            state.entries[entry.key] = Slot(entry: entry, referenced: false, size: size)
            state.bytes += size
            // CLOCK: sweep, clearing reference bits, evicting the first unreferenced entry.
            while state.bytes > shardBudget, !state.ring.isEmpty {
                if state.hand >= state.ring.count { state.hand = 0 }
                let candidate = state.ring[state.hand]
                if candidate != entry.key, var slot = state.entries[candidate] {
                    if slot.referenced {
                        slot.referenced = false
                        state.entries[candidate] = slot
                        state.hand += 1
                    } else {
                        state.entries.removeValue(forKey: candidate)
                        state.bytes -= slot.size
                        state.ring.remove(at: state.hand)
                    }
                } else {
                    state.hand += 1
                }
            }
        }
    }
}
