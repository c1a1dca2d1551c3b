// Admission on the shared store (issue 33). Redis evicts by itself (`maxmemory-policy`), but once
// it is full every miss written pushes out an entry: a burst of one-hit wonders or a scan
// would flush the entries that are asked for again. So, as the SQLite store does with its small
// queue, a first-time object is not written while Redis is full: its key alone is remembered
// (a ghost key beside the entry's, for an hour), and the object is written when it is asked for
// again while the ghost is there, by any instance. Below the limit, and for explicit intent
// (`keepRequested`: a PUT, a warm job, a caller's ttl or version), everything is written as
// before. The ghost lives in Redis, not in one instance's memory: behind a load balancer the
// second request usually reaches another instance.
//
// "Full" is Redis's own figure: `used_memory` at 90% of `maxmemory` or more on any node (INFO
// memory), looked at no more than once a second, when saves come. Without a `maxmemory` Redis
// never evicts, so nothing is refused.

import Dispatch
import Foundation
import LarderCore
import LarderEngine
import LarderSync

/// Redis's memory as INFO memory reports it, and whether admission applies. Pure.
struct RedisMemory: Equatable {
    var used: Int
    var limit: Int

    /// Full at this share of `maxmemory` or more: a Redis that evicts stays just under its limit,
    /// so "at the limit" would rarely be seen.
    static let fullShare = 0.9

    var isFull: Bool { limit > 0 && Double(used) >= Double(limit) * Self.fullShare }

    /// The figures in an INFO memory reply (`used_memory:` and `maxmemory:` lines); nil when
    /// either is missing.
    init?(info: String) {
        var used: Int?
        var limit: Int?
        for line in info.split(whereSeparator: \.isNewline) {
            let parts = line.split(separator: ":", maxSplits: 1)
            guard parts.count == 2 else { continue }
            let value = Int(parts[1].trimmingCharacters(in: .whitespaces))
            if parts[0] == "used_memory" { used = value }
            if parts[0] == "maxmemory" { limit = value }
        }
        guard let used, let limit else { return nil }
        self.used = used
        self.limit = limit
    }

    init(used: Int, limit: Int) {
        self.used = used
        self.limit = limit
    }
}

/// What admission did since start, and whether Redis is full now. Sendable: atomics only.
final class RedisAdmission: Sendable {
    let full = Atomic<Bool>(false)
    /// Redis's memory is looked at no more often than once a second.
    let memoryCheck = IntervalGate(nanoseconds: 1_000_000_000)
    /// Entries written while Redis was full (explicit intent, a replacement, or a ghost found).
    let admitted = Atomic<Int>(0)
    /// First-time entries not written while Redis was full (their ghost was set).
    let rejected = Atomic<Int>(0)
    /// Of the admitted, those written because their ghost was found.
    let ghostHits = Atomic<Int>(0)

    /// How long a ghost key remembers a refused object.
    static let ghostMilliseconds = 3_600_000

    var figures: AdmissionFigures {
        var figures = AdmissionFigures()
        figures.admitted = admitted.load(ordering: .relaxed)
        figures.rejected = rejected.load(ordering: .relaxed)
        figures.ghostHits = ghostHits.load(ordering: .relaxed)
        return figures
    }
}

extension RedisCacheStore {
    /// The ghost key of a primary key: in the entry's hash slot, so one script sees both.
    func ghostKey(_ primaryKey: CacheKey) -> String { "\(settings.prefix){\(primaryKey.hex)}:g" }

    /// 1: the entry hash exists (a replacement: written); 2: the ghost was there (asked for
    /// again: written, the ghost goes); 0: first time, the ghost is set and nothing written.
    static let admitScript = """
        if redis.call('EXISTS', KEYS[1]) == 1 then return 1 end
        if redis.call('DEL', KEYS[2]) == 1 then return 2 end
        redis.call('SET', KEYS[2], '1', 'PX', ARGV[1])
        return 0
        """

    /// Whether `entry` is written: always below Redis's limit and for explicit intent; while
    /// Redis is full, only on proof of reuse (see the top of this file). A Redis that does not
    /// answer the question gets the write, which then fails or succeeds on its own.
    func admits(_ entry: StoredEntry) -> Bool {
        checkMemoryIfDue()
        guard admission.full.load(ordering: .relaxed) else { return true }
        if entry.keepRequested {
            admission.admitted.add(1, ordering: .relaxed)
            return true
        }
        let reply = try? backend.run([
            "EVAL", Self.admitScript, "2", entryKey(entry.primaryKey), ghostKey(entry.primaryKey), String(RedisAdmission.ghostMilliseconds)
        ])
        switch reply?.integer {
        case 0:
            admission.rejected.add(1, ordering: .relaxed)
            return false
        case 2:
            admission.ghostHits.add(1, ordering: .relaxed)
            admission.admitted.add(1, ordering: .relaxed)
            return true
        case 1:
            admission.admitted.add(1, ordering: .relaxed)
            return true
        default:
            // Redis did not answer the question (a timeout, an error reply): the write goes
            // ahead and succeeds or fails on its own, counted by neither.
            return true
        }
    }

    /// Asks every node for its memory, in the background, when the last look is a second old.
    private func checkMemoryIfDue() {
        guard admission.memoryCheck.claim() else { return }
        DispatchQueue.global(qos: .utility).async { [weak self] in self?.checkMemory() }
    }

    /// Full when any node is (its entries are the ones pushed out).
    func checkMemory() {
        guard let replies = try? backend.onEveryNode(["INFO", "memory"]) else { return }
        let nodes = replies.compactMap { $0.string.flatMap(RedisMemory.init(info:)) }
        guard !nodes.isEmpty else { return }
        admission.full.store(nodes.contains(where: \.isFull), ordering: .relaxed)
    }
}
