// Cross-instance coalescing (SharedFlights): the instance that takes a key's lease in Redis
// fetches it; the others wait for its "done" message, or for the lease to lapse if it went away.

import Dispatch
import Foundation
public import LarderCore

extension RedisCacheStore {
    /// Releases the lease if it is still this instance's, and tells the waiting instances, in
    /// one round trip. The save script does the same for a flight that stores its entry.
    static let releaseScript = """
        if redis.call('GET', KEYS[1]) == ARGV[1] then
          redis.call('DEL', KEYS[1])
          redis.call('PUBLISH', ARGV[2], ARGV[3])
          return 1
        end
        return 0
        """

    /// A lease's value: this instance and when the lease lapses (Unix milliseconds), so that an
    /// instance that finds the lease taken learns how long to wait from the same command that
    /// tried to take it (SET … NX GET), without a PTTL.
    func leaseValue(lapsingIn milliseconds: Int) -> String {
        "\(instance) \(Int64(Date().timeIntervalSince1970 * 1000) + Int64(milliseconds))"
    }

    /// Milliseconds until a lease read back lapses: from its value's deadline, within what a
    /// lease can last; `fallback` for a value without one (another version of Larder).
    static func remainingMilliseconds(ofLease value: String?, nowMs: Int64, atMost longest: Int, fallback: Int = 1000) -> Int {
        guard let value, let space = value.lastIndex(of: " "), let deadline = Int64(value[value.index(after: space)...]) else {
            return fallback
        }
        return Int(max(10, min(Int64(longest), deadline - nowMs)))
    }

    public func claim(_ key: CacheKey, forSeconds seconds: Double, wake: @escaping @Sendable () -> Void) -> Bool {
        // Registered before the attempt, so a "done" that arrives right after it is not missed.
        waiting.withLock { $0[key, default: []].append(wake) }
        let milliseconds = max(1000, Int(seconds * 1000))
        let value = leaseValue(lapsingIn: milliseconds)
        let reply: RedisValue
        do {
            reply = try backend.run(["SET", leaseKey(key), value, "NX", "PX", String(milliseconds), "GET"])
        } catch {
            // Redis is gone: lead locally (pass-through); nobody else can be told anyway.
            waiting.withLock { _ = $0.removeValue(forKey: key) }
            return true
        }
        if case .null = reply {
            waiting.withLock { _ = $0.removeValue(forKey: key) }
            leading.withLock { $0[key] = value }
            return true
        }
        if case .error = reply {
            // Refused (not a string there, or a Redis without SET … NX GET): lead locally.
            waiting.withLock { _ = $0.removeValue(forKey: key) }
            return true
        }
        // Another instance leads: wake when it says so, or when its lease lapses.
        let remaining = Self.remainingMilliseconds(
            ofLease: reply.string, nowMs: Int64(Date().timeIntervalSince1970 * 1000), atMost: milliseconds)
        DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(remaining + 20)) { [weak self] in
            guard let self else { return }
            for wake in self.waiting.withLock({ $0.removeValue(forKey: key) ?? [] }) { wake() }
        }
        return false
    }

    public func release(_ key: CacheKey) {
        guard let value = leading.withLock({ $0.removeValue(forKey: key) }) else { return }
        _ = try? backend.run(["EVAL", Self.releaseScript, "1", leaseKey(key), value, events.channel, "done \(key.hex)"])
    }
}
