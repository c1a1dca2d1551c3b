// A bounded in-memory tier in front of the persistent store (NSURLCache's memory capacity).
//
// Hot entries are answered from memory: no SQLite read (two B-tree descents, the row decoded),
// no checksum (the body was verified when it was loaded from disk). Every
// write goes through here, so memory never holds an entry the store does not: `save` updates
// memory only after the store accepted the entry (its own lookups find it; the store tells
// `forget` if it later fails to commit it), and a generation count per shard keeps a lookup
// that raced a write from putting back what the write replaced. One Larder process per
// database file.
//
// Slots hold all variants of a primary key. Eviction is CLOCK (second chance) per shard,
// bounded by bytes; the shards keep lock contention negligible with a few server threads.
// A full shard takes an entry read from the store only when it was read there recently too
// (a ghost, as S3-FIFO's): a store far larger than memory, read at random, would otherwise
// swap one entry out for one that will not be asked again, on every hit, and a scan would
// flush the hot entries.
//
// Bodies the store keeps compressed (BodyCodec) are held here whole: a hit from memory sends
// what it holds, and decompressing on every one cost a quarter of a hot hit's instructions.
// Compression is for the store, where most entries sit; the tier holds the hot ones, ready.

public import LarderCore
import LarderSync

public final class MemoryTier: CacheStore {
    /// The store behind the tier.
    public let backing: any CacheStore
    private let shards: [Shard]
    private let shardBudget: Int
    /// What the tier may hold, in estimated heap bytes (its share of `--memory-mb`).
    public let capacityBytes: Int
    /// Makes compressed bodies whole before they are held; nil: held as the store gave them.
    private let bodyCodec: (any BodyCodec)?
    /// Largest body made whole here: a store's entries are trusted, this bounds a mistake.
    static let maxWholeBodyBytes = 1 << 30

    private final class Shard: Sendable {
        let state = Locked(State())
    }

    private struct State {
        var slots: [CacheKey: Slot] = [:]
        /// CLOCK's order: every key in `slots`, and the keys in `departed`.
        var ring: [CacheKey] = []
        /// Keys forgotten but still in the ring (the sweep passes over them), removed all at
        /// once when they outnumber the slots: removing each from the ring as it was forgotten
        /// cost a pass over the ring per key, under the shard's lock, when a purge forgot many.
        var departed: Set<CacheKey> = []
        var hand = 0
        var bytes = 0
        /// Bumped by every write and removal, so a lookup that started before it does not
        /// store what it read.
        var generation = 0
        /// Hashes of the keys read from the store while the shard was full and not taken, as
        /// many as the shard has slots: a key asked for again within that many refusals is taken.
        var ghosts = GhostKeys<Int>()
    }

    private struct Slot {
        var entries: [StoredEntry]
        var referenced: Bool
        var size: Int
    }

    /// `capacityBytes` 0 disables the tier (every call goes to `backing`).
    public init(backing: any CacheStore, capacityBytes: Int, shardCount: Int = 16, bodyCodec: (any BodyCodec)? = nil) {
        self.backing = backing
        self.bodyCodec = bodyCodec
        self.shards = (0..<shardCount).map { _ in Shard() }
        self.shardBudget = capacityBytes / shardCount
        self.capacityBytes = capacityBytes
    }

    private func shard(for key: CacheKey) -> Shard {
        shards[key.shardIndex % shards.count]
    }

    private static func size(of entries: [StoredEntry]) -> Int {
        entries.reduce(0) { $0 + $1.residentBytes }
    }

    public func lookup(_ primaryKey: CacheKey) -> [StoredEntry] {
        guard shardBudget > 0 else { return backing.lookup(primaryKey) }
        let shard = shard(for: primaryKey)
        let (cached, generation) = shard.state.withLock { state -> ([StoredEntry]?, Int) in
            guard var slot = state.slots[primaryKey] else { return (nil, state.generation) }
            if !slot.referenced {
                slot.referenced = true
                state.slots[primaryKey] = slot
            }
            return (slot.entries, state.generation)
        }
        if let cached { return cached }
        let loaded = backing.lookup(primaryKey).map(whole)
        if !loaded.isEmpty { remember(loaded, under: primaryKey, in: shard, ifGeneration: generation) }
        return loaded
    }

    public func save(_ entry: StoredEntry, completion: @escaping @Sendable (Bool) -> Void) {
        backing.save(entry) { [self] saved in
            if shardBudget > 0 {
                if saved, entry.varyNames.isEmpty {
                    // A response that does not vary is now the only row under its primary key.
                    remember([whole(entry)], under: entry.primaryKey, in: shard(for: entry.primaryKey), ifGeneration: nil)
                } else {
                    forget(entry.primaryKey)
                }
            }
            completion(saved)
        }
    }

    /// `entry` with a compressed body it keeps inline made whole; as it is otherwise (a body
    /// in a file is read when it is sent; one that does not decompress is left for the engine,
    /// which answers it as a miss).
    private func whole(_ entry: StoredEntry) -> StoredEntry {
        guard entry.bodyCoding != .identity, entry.bodyFile == nil, let codec = bodyCodec, codec.coding == entry.bodyCoding,
            let body = codec.decompress(entry.body, maxBytes: Self.maxWholeBodyBytes)
        else { return entry }
        var whole = entry
        whole.body = body
        whole.bodyCoding = .identity
        return whole
    }

    public func recordHit(_ key: CacheKey, at time: Double) {
        backing.recordHit(key, at: time)
    }

    public func readBody(of entry: StoredEntry) -> [UInt8]? {
        if let body = backing.readBody(of: entry) { return body }
        forget(entry.primaryKey)
        return nil
    }

    public func openBody(of entry: StoredEntry) -> OwnedDescriptor? {
        if let opened = backing.openBody(of: entry) { return opened }
        forget(entry.primaryKey)
        return nil
    }

    public func namespaceVersions() -> [String: Int64] { backing.namespaceVersions() }

    public func invalidate(urlKeys: [String], completion: @escaping @Sendable ([CacheKey]) -> Void) {
        backing.invalidate(urlKeys: urlKeys) { [self] removed in
            for primaryKey in removed { forget(primaryKey) }
            completion(removed)
        }
    }

    public func invalidate(tags: [String], at time: Double, completion: @escaping @Sendable ([CacheKey]) -> Void) {
        backing.invalidate(tags: tags, at: time) { [self] marked in
            for primaryKey in marked { forget(primaryKey) }
            completion(marked)
        }
    }

    /// Keys in the CLOCK rings, forgotten ones not yet removed included; for tests.
    var ringLength: Int {
        shards.reduce(0) { total, shard in total + shard.state.withLock { $0.ring.count } }
    }

    /// Bytes held now (as counted against the capacity).
    public var bytes: Int {
        shards.reduce(0) { total, shard in total + shard.state.withLock { $0.bytes } }
    }

    /// Drops everything (after a purge of the whole store or of very many keys).
    public func forgetAll() {
        for shard in shards {
            shard.state.withLock { state in
                state.generation += 1
                state.slots.removeAll()
                state.ring.removeAll()
                state.departed.removeAll()
                state.hand = 0
                state.bytes = 0
            }
        }
    }

    /// Drops a primary key from memory (after a change in the store).
    public func forget(_ primaryKey: CacheKey) {
        guard shardBudget > 0 else { return }
        shard(for: primaryKey).state.withLock { state in
            state.generation += 1
            if let slot = state.slots.removeValue(forKey: primaryKey) {
                state.bytes -= slot.size
                state.departed.insert(primaryKey)
                if state.departed.count > max(64, state.slots.count) {
                    // The hand keeps its place among the keys that stay.
                    state.hand = state.ring.prefix(state.hand).count { !state.departed.contains($0) }
                    state.ring.removeAll { state.departed.contains($0) }
                    state.departed.removeAll()
                }
            }
        }
    }

    /// Keeps `entries` under `primaryKey`; with `ifGeneration` (read from the store), only when
    /// nothing was written to the shard since that generation was read, and when the shard has
    /// room or turned the key away lately.
    private func remember(_ entries: [StoredEntry], under primaryKey: CacheKey, in shard: Shard, ifGeneration: Int?) {
        let size = Self.size(of: entries)
        // One slot may take at most a quarter of its shard.
        guard size <= shardBudget / 4 else { return forget(primaryKey) }
        shard.state.withLock { state in
            if let expected = ifGeneration, expected != state.generation { return }
            let old = state.slots[primaryKey]
            if ifGeneration == nil {
                state.generation += 1
            } else if state.bytes - (old?.size ?? 0) + size > shardBudget {
                let ghost = primaryKey.hashValue
                if !state.ghosts.remove(ghost) {
                    // Read from the store into a full shard for the first time lately: not taken.
                    state.ghosts.insert(ghost, limit: state.slots.count)
                    return
                }
            }
            if let old {
                state.bytes -= old.size
            } else if state.departed.remove(primaryKey) == nil {
                state.ring.append(primaryKey)
            }
            state.slots[primaryKey] = Slot(entries: entries, referenced: false, size: size)
            state.bytes += size
            // CLOCK: sweep, clearing reference bits, evicting the first unreferenced slot.
            while state.bytes > shardBudget, !state.ring.isEmpty {
                if state.hand >= state.ring.count { state.hand = 0 }
                let candidate = state.ring[state.hand]
                if candidate != primaryKey, var slot = state.slots[candidate] {
                    if slot.referenced {
                        slot.referenced = false
                        state.slots[candidate] = slot
                        state.hand += 1
                    } else {
                        state.slots.removeValue(forKey: candidate)
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
