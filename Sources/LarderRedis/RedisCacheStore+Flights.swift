// Cross-instance coalescing (SharedFlights): the instance that takes a key's lease in Redis
// fetches it; the others wait for its "done" message, or for the lease to lapse if it went away.

import Dispatch
import Foundation
public import LarderCore

extension RedisCacheStore {
    /// Releases the lease if it is still this instance's, and tells the waiting instances, in
    /// one round trip.
    static let releaseScript = """
        if redis.call('GET', KEYS[1]) == ARGV[1] then
          redis.call('DEL', KEYS[1])
          redis.call('PUBLISH', ARGV[2], ARGV[3])
          return 1
        end
        return 0
        """

    public func claim(_ key: CacheKey, forSeconds seconds: Double, wake: @escaping @Sendable () -> Void) -> Bool {
        // Registered before the attempt, so a "done" that arrives right after it is not missed.
        waiting.withLock { $0[key, default: []].append(wake) }
        let milliseconds = String(max(1000, Int(seconds * 1000)))
        let replies: [RedisValue]
        do {
            replies = try backend.run([
                ["SET", leaseKey(key), instance, "NX", "PX", milliseconds].map { Array($0.utf8) },
                ["PTTL", leaseKey(key)].map { Array($0.utf8) }
            ])
        } catch {
            // Redis is gone: lead locally (pass-through); nobody else can be told anyway.
            waiting.withLock { _ = $0.removeValue(forKey: key) }
            return true
        }
        if case .status = replies[0] {
            waiting.withLock { _ = $0.removeValue(forKey: key) }
            leading.withLock { _ = $0.insert(key) }
            return true
        }
        // Another instance leads: wake when it says so, or when its lease lapses.
        let remaining = max(10, Int(replies[1].integer ?? 1000))
        DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(remaining + 20)) { [weak self] in
            guard let self else { return }
            for wake in self.waiting.withLock({ $0.removeValue(forKey: key) ?? [] }) { wake() }
        }
        return false
    }

    public func release(_ key: CacheKey) {
        guard leading.withLock({ $0.remove(key) }) != nil else { return }
        _ = try? backend.run(["EVAL", Self.releaseScript, "1", leaseKey(key), instance, events.channel, "done \(key.hex)"])
    }
}
