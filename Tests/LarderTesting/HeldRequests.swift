// Requests the test origin holds, so that tests of overlap (coalescing, concurrency limits,
// requests in parallel) know their requests overlap instead of hoping a delay is long enough.
//
//   hold=N      the origin answers no request of the path until N of them are waiting, then
//               answers them all (and later ones at once)
//   hold=gate   the origin answers no request of the path until the test calls `release(path)`
//               (and later ones at once), or `answerWaiting(path)` (those held now; later ones
//               are held again)
//
// A request held longer than `HeldRequests.limit` seconds gets the origin's "held too long"
// answer, so a test whose requests never overlap fails on what it gets instead of hanging.
// Both test origins hold with it: TestOrigin (sockets) and ScriptedOrigin (the engine's).

import Dispatch
import Foundation
import LarderSync

public final class HeldRequests: Sendable {
    /// Seconds a request is held at most before `tooLong` answers it.
    public static let limit = 20.0

    private struct Held {
        var answers: [Int: @Sendable () -> Void] = [:]
        var released = false
        var arrived = 0
    }

    private let paths = Locked<[String: Held]>([:])
    private let nextID = Atomic<Int>(0)
    private let changed = Condition()

    public init() {}

    /// Holds the request (`hold` is the query value) and calls `answer` when its path is
    /// released, or answers `tooLong` after `limit` seconds.
    public func hold(path: String, _ hold: String, answer: @escaping @Sendable () -> Void, tooLong: @escaping @Sendable () -> Void) {
        let id = nextID.add(1, ordering: .relaxed).oldValue
        let threshold = Int(hold)
        let release = paths.withLock { paths -> [@Sendable () -> Void]? in
            var held = paths[path, default: Held()]
            defer { paths[path] = held }
            held.arrived += 1
            guard !held.released else { return [answer] }
            held.answers[id] = answer
            guard let threshold, held.answers.count >= threshold else { return nil }
            held.released = true
            defer { held.answers.removeAll() }
            return Array(held.answers.values)
        }
        changed.broadcast()
        if let release {
            for answer in release { answer() }
            return
        }
        DispatchQueue.global().asyncAfter(deadline: .now() + Self.limit) { [self] in
            let stillHeld = paths.withLock { $0[path]?.answers.removeValue(forKey: id) != nil }
            if stillHeld { tooLong() }
        }
    }

    /// Answers every request of `path` held now, and those that come later at once.
    public func release(_ path: String) {
        let answers = paths.withLock { paths -> [@Sendable () -> Void] in
            var held = paths[path, default: Held()]
            defer { paths[path] = held }
            held.released = true
            defer { held.answers.removeAll() }
            return Array(held.answers.values)
        }
        for answer in answers { answer() }
    }

    /// Answers the requests of `path` held now; later ones are held as before (for a test that
    /// lets one request through, then holds the next).
    public func answerWaiting(_ path: String) {
        let answers = paths.withLock { paths -> [@Sendable () -> Void] in
            defer { paths[path]?.answers.removeAll() }
            return Array(paths[path]?.answers.values ?? [:].values)
        }
        for answer in answers { answer() }
    }

    /// Requests of `path` waiting now.
    public func waiting(_ path: String) -> Int { paths.withLock { $0[path]?.answers.count ?? 0 } }

    /// Waits until `count` requests of `path` are held at once (woken on each arrival).
    public func waitForHeld(_ path: String, count: Int, timeout: Double = 10) -> Bool {
        changed.wait(timeout: timeout) { waiting(path) >= count }
    }
}
