// Remembers recently seen /fetch (and /batch) bodies, parsed and with their cache keys derived.
//
// Callers repeat the same request bodies (that is what makes them cache hits), and parsing
// JSON, normalising the URL and computing the HMAC key cost more than the SQLite lookup. The
// result is a pure function of the body bytes and the instance secret, so reusing it for
// identical bytes is exact. Small bodies only; each shard is emptied when full (cheap, and
// the hot bodies come straight back).

import LarderCore
import LarderEngine
import LarderSync

/// What the memo keeps: a prepared /fetch, or a prepared batch. (An enum rather than a generic
/// class: the /fetch hit path must not go through unspecialised generic code.)
enum Memoized: Sendable {
    case fetch(PreparedFetch)
    case batch(BatchRoute.PreparedBatch)
    case chain(ChainPlan)
}

final class RequestMemo: Sendable {
    typealias Value = Memoized
    /// Bodies larger than this are not remembered.
    let maxBodyBytes: Int
    static var entriesPerShard: Int { 512 }

    init(maxBodyBytes: Int = 4096) { self.maxBodyBytes = maxBodyBytes }

    private struct BodyKey: Hashable, Sendable {
        let bytes: [UInt8]
        let hash: Int
        func hash(into hasher: inout Hasher) { hasher.combine(hash) }
        static func == (lhs: BodyKey, rhs: BodyKey) -> Bool { lhs.hash == rhs.hash && lhs.bytes == rhs.bytes }
    }

    private final class Shard: Sendable {
        let entries = Locked<[BodyKey: Value]>([:])
    }

    private let shards: [Shard] = (0..<8).map { _ in Shard() }

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
        return shards[key.hash & 7].entries.withLock { $0[key] }
    }

    func insert(_ body: [UInt8], _ prepared: Value) {
        guard body.count <= maxBodyBytes else { return }
        let key = BodyKey(bytes: body, hash: Self.hash(body))
        shards[key.hash & 7].entries.withLock { entries in
            if entries.count >= Self.entriesPerShard { entries.removeAll(keepingCapacity: true) }
            entries[key] = prepared
        }
    }
}
