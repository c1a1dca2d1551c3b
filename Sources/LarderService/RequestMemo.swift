// Remembers recently seen /fetch (and /batch, /chain, proxy) requests, parsed and with their
// cache keys derived.
//
// Callers repeat the same request bodies (that is what makes them cache hits), and parsing
// JSON, normalising the URL and computing the HMAC key cost more than the SQLite lookup. The
// result is a pure function of the body bytes and the instance secret, so reusing it for
// identical bytes is exact. Each memo has a budget in bytes, split over its shards; a shard
// that would go over its share is emptied (cheap, and the hot requests come straight back), so
// what the memos hold is bounded however many distinct requests arrive (README "Memory").

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
        4 * keyBytes + 1024 * value.requestCount
    }

    init(maxBodyBytes: Int = 4096, budgetBytes: Int) {
        self.maxBodyBytes = maxBodyBytes
        self.budgetBytes = budgetBytes
    }

    private struct BodyKey: Hashable, Sendable {
        let bytes: [UInt8]
        let hash: Int
        func hash(into hasher: inout Hasher) { hasher.combine(hash) }
        static func == (lhs: BodyKey, rhs: BodyKey) -> Bool { lhs.hash == rhs.hash && lhs.bytes == rhs.bytes }
    }

    private struct Contents {
        var entries: [BodyKey: Value] = [:]
        var bytes = 0
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
        return shards[key.hash & (Self.shardCount - 1)].contents.withLock { $0.entries[key] }
    }

    func insert(_ body: [UInt8], _ prepared: Value) {
        guard body.count <= maxBodyBytes else { return }
        let cost = Self.cost(keyBytes: body.count, prepared)
        let share = budgetBytes / Self.shardCount
        guard cost <= share else { return }
        let key = BodyKey(bytes: body, hash: Self.hash(body))
        shards[key.hash & (Self.shardCount - 1)].contents.withLock { contents in
            if contents.entries[key] != nil { return }
            if contents.bytes + cost > share {
                // Not keepingCapacity: the table's storage is given back with its entries.
                contents.entries.removeAll()
                contents.bytes = 0
            }
            contents.entries[key] = prepared
            contents.bytes += cost
        }
    }

    /// Entries and estimated bytes held now, over all shards.
    var usage: (entries: Int, bytes: Int) {
        shards.reduce(into: (0, 0)) { total, shard in
            shard.contents.withLock { total.0 += $0.entries.count; total.1 += $0.bytes }
        }
    }
}
