// Remembers recently seen /fetch bodies, parsed and with their cache key derived.
//
// Callers repeat the same request bodies (that is what makes them cache hits), and parsing
// JSON, normalising the URL and computing the HMAC key cost more than the SQLite lookup. The
// result is a pure function of the body bytes and the instance secret, so reusing it for
// identical bytes is exact. Small bodies only; each shard is emptied when full (cheap, and
// the hot bodies come straight back).

import LarderEngine
import Synchronization

final class RequestMemo: Sendable {
    static let maxBodyBytes = 4096
    static let entriesPerShard = 512

    private struct BodyKey: Hashable, Sendable {
        let bytes: [UInt8]
        let hash: Int
        func hash(into hasher: inout Hasher) { hasher.combine(hash) }
        static func == (lhs: BodyKey, rhs: BodyKey) -> Bool { lhs.hash == rhs.hash && lhs.bytes == rhs.bytes }
    }

    private final class Shard: Sendable {
        let entries = Mutex<[BodyKey: PreparedFetch]>([:])
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

    func lookup(_ body: [UInt8]) -> PreparedFetch? {
        guard body.count <= Self.maxBodyBytes else { return nil }
        let key = BodyKey(bytes: body, hash: Self.hash(body))
        return shards[key.hash & 7].entries.withLock { $0[key] }
    }

    func insert(_ body: [UInt8], _ prepared: PreparedFetch) {
        guard body.count <= Self.maxBodyBytes else { return }
        let key = BodyKey(bytes: body, hash: Self.hash(body))
        shards[key.hash & 7].entries.withLock { entries in
            if entries.count >= Self.entriesPerShard { entries.removeAll(keepingCapacity: true) }
            entries[key] = prepared
        }
    }
}
