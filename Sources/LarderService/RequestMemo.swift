// Remembers recently seen /fetch (and /batch, /chain, proxy) requests, parsed and with their
// cache keys derived.
//
// Callers repeat the same request bodies (that is what makes them cache hits), and parsing
// JSON, normalising the URL and computing the HMAC key cost more than the SQLite lookup. The
// result is a pure function of the body bytes and the instance secret, so reusing it for
// identical bytes is exact. Each memo has a budget in bytes, split over its shards; a shard
// that would go over its share makes room by dropping entries chosen at random, so what the
// memos hold is bounded however many distinct requests arrive (docs/architecture.md, "Memory"). Random
// replacement rather than LRU or emptying the shard: callers often cycle through a working set
// somewhat larger than the memo (a list of URLs polled in turn), where LRU and emptying keep
// nothing that comes back, and random replacement still keeps a share of it; it also needs no
// bookkeeping on a hit.
//
// A request is remembered the second time it is seen, not the first (a doorkeeper, as in
// TinyLFU): most one-off requests (misses on unique URLs, a crawler's scan) would only push out
// requests that come back, and remembering one adds to the cost of a miss (evicting another
// entry frees its parsed request). The doorkeeper is a Bloom filter of two bits per
// request, cleared after an eighth of its size in requests, so it is bounded too (2 KiB a
// shard) and wrongly says "seen before" for at most 5 % of new requests (2 % on average).

import LarderCore
import LarderEngine
import LarderSync

/// What the memo keeps: a prepared /fetch, or a prepared batch. (An enum rather than a generic
/// class: the /fetch hit path must not go through unspecialised generic code.)
enum Memoized: Sendable {
    case fetch(PreparedFetch)
    case batch(BatchRoute.PreparedBatch)
    case chain(ChainPlan)

    /// Requests a value holds (each a parsed request and its derived keys).
    var requestCount: Int {
        switch self {
        case .fetch: 1
        case .batch(let batch): batch.items.count
        case .chain(let plan): plan.steps.count
        }
    }
}

/// How `--request-memo-mb` is shared among the memos, in thirtieths (the default 30 MiB gives
/// 8 MiB to /fetch bodies, 16 MiB to proxy requests, whose sets of URLs polled in turn are the
/// largest, and 2 MiB each to /batch bodies, /chain bodies and chain steps).
struct RequestMemoBudgets: Sendable {
    let fetch: Int, proxy: Int, batch: Int, chain: Int, chainSteps: Int

    init(totalBytes: Int) {
        let thirtieth = totalBytes / 30
        fetch = 8 * thirtieth
        proxy = 16 * thirtieth
        batch = 2 * thirtieth
        chain = 2 * thirtieth
        chainSteps = 2 * thirtieth
    }
}

final class RequestMemo: Sendable {
    typealias Value = Memoized
    /// Bodies larger than this are not remembered.
    let maxBodyBytes: Int
    /// What all shards together may hold, in estimated bytes.
    let budgetBytes: Int
    static let shardCount = 8

    /// The estimated cost of remembering `value` under `bytes`: the key's bytes, the parsed
    /// request (its strings come from those bytes: the URL is kept as sent and normalised) and,
    /// per request, a fixed share for its objects and derived keys. RequestMemoTests measures
    /// the heap against this estimate for small, typical and long bodies.
    static func cost(keyBytes: Int, _ value: Value) -> Int {
        4 * keyBytes + 1344 * value.requestCount
    }

    /// Whether a request is remembered only when seen a second time (see the top of the file).
    let admitsOnSecondSight: Bool

    init(maxBodyBytes: Int = 4096, budgetBytes: Int, admitsOnSecondSight: Bool = true) {
        self.maxBodyBytes = maxBodyBytes
        self.budgetBytes = budgetBytes
        self.admitsOnSecondSight = admitsOnSecondSight
    }

    /// Doorkeeper bits per shard.
    static let doorkeeperBits = 16_384

    private struct BodyKey: Hashable, Sendable {
        let bytes: [UInt8]
        let hash: Int
        func hash(into hasher: inout Hasher) { hasher.combine(hash) }
        static func == (lhs: BodyKey, rhs: BodyKey) -> Bool { lhs.hash == rhs.hash && lhs.bytes == rhs.bytes }
    }

    private struct Contents {
        /// The value and where its key is in `slots`.
        var entries: [BodyKey: (value: Value, slot: Int)] = [:]
        /// Every key with its cost, in no order: a random victim is one index away.
        var slots: [(key: BodyKey, cost: Int)] = []
        var bytes = 0
        /// Two bits per request seen once (allocated on first use).
        var seen: [UInt64] = []
        var seenCount = 0

        /// Whether `hash` was seen since the doorkeeper was last cleared; records it if not.
        mutating func seenBefore(_ hash: Int) -> Bool {
            let size = RequestMemo.doorkeeperBits
            if seen.isEmpty { seen = [UInt64](repeating: 0, count: size / 64) }
            // The low bits of the hash chose the shard: the two bits come from higher ones.
            let bits = UInt(bitPattern: hash)
            let first = Int(truncatingIfNeeded: bits >> 16) & (size - 1)
            let second = Int(truncatingIfNeeded: bits >> 40) & (size - 1)
            if isSet(first), isSet(second) { return true }
            if seenCount >= size / 8 {
                for index in seen.indices { seen[index] = 0 }
                seenCount = 0
            }
            seen[first >> 6] |= 1 << UInt64(first & 63)
            seen[second >> 6] |= 1 << UInt64(second & 63)
            seenCount += 1
            return false
        }

        private func isSet(_ bit: Int) -> Bool { seen[bit >> 6] & (1 << UInt64(bit & 63)) != 0 }

        mutating func evict(at index: Int) {
            let victim = slots[index]
            entries[victim.key] = nil
            bytes -= victim.cost
            let last = slots.removeLast()
            if index < slots.count {
                slots[index] = last
                entries[last.key]?.slot = index
            }
        }
    }

    private final class Shard: Sendable {
        let contents = Locked<Contents>(Contents())
    }

    private let shards: [Shard] = (0..<RequestMemo.shardCount).map { _ in Shard() }

    /// One pass over the bytes as a block (Array's own hashValue feeds the hasher byte by byte).
    private static func hash(_ bytes: [UInt8]) -> Int {
        bytes.withUnsafeBytes { raw in
            var hasher = Hasher()
            hasher.combine(bytes: raw)
            return hasher.finalize()
        }
    }

    func lookup(_ body: [UInt8]) -> Value? {
        guard body.count <= maxBodyBytes else { return nil }
        let key = BodyKey(bytes: body, hash: Self.hash(body))
        return shards[key.hash & (Self.shardCount - 1)].contents.withLock { $0.entries[key]?.value }
    }

    /// Remembers the value `make` returns for `body`. It is called only once the doorkeeper lets
    /// the request in (most requests are seen once and never are), under the shard's lock: it
    /// must not use the memo. A value over the shard's share is made and then not kept.
    func insert(_ body: [UInt8], _ make: () -> Value) {
        guard body.count <= maxBodyBytes else { return }
        let share = budgetBytes / Self.shardCount
        let key = BodyKey(bytes: body, hash: Self.hash(body))
        shards[key.hash & (Self.shardCount - 1)].contents.withLock { contents in
            if contents.entries[key] != nil { return }
            if admitsOnSecondSight, !contents.seenBefore(key.hash) { return }
            let prepared = make()
            let cost = Self.cost(keyBytes: body.count, prepared)
            guard cost <= share else { return }
            // The victims are picked from the new key's hash (random per process; its low bits
            // chose the shard, so the high bits are used): no generator state, no system call.
            var pick = UInt64(truncatingIfNeeded: key.hash)
            while contents.bytes + cost > share, !contents.slots.isEmpty {
                contents.evict(at: Int((pick >> 33) % UInt64(contents.slots.count)))
                pick = pick &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407 // Knuth's MMIX LCG
            }
            contents.slots.append((key, cost))
            contents.entries[key] = (prepared, contents.slots.count - 1)
            contents.bytes += cost
        }
    }

    /// Entries and estimated bytes held now, over all shards.
    var usage: (entries: Int, bytes: Int) {
        shards.reduce(into: (0, 0)) { total, shard in
            shard.contents.withLock {
                total.0 += $0.entries.count
                total.1 += $0.bytes
            }
        }
    }
}
