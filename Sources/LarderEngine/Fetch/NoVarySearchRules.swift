// The No-Vary-Search rules (NoVarySearch) of stored responses, by the path they answer. A
// response's rule says which query parameters do not change it; the key is then derived without
// them, so requests that differ only in those find it. The rule has to be known before the key,
// which the stored response cannot give (it is found by the key): it is learned when a response
// is stored, and a later response for the path without one forgets it. Learned per instance and
// kept in memory: after a restart, or on another instance sharing a Redis store, the first
// request of a path that differs in an ignored parameter is a miss, whose response teaches the
// rule again (and is stored under the same key as before).

import LarderCore
import LarderSync
import Synchronization

final class NoVarySearchRules: Sendable {
    /// Paths whose rule is kept at most; past it the oldest learned go first.
    static let capacity = 10_000

    private struct State {
        var rules: [String: NoVarySearch] = [:]
        /// Scopes in the order they were learned, from `start`; a scope forgotten stays until
        /// its turn or the next compaction, and a scope learned again is not added twice.
        var order: [String] = []
        var start = 0
    }

    private let state = Locked(State())
    /// Rules kept, written under the lock and read without it: a lookup with none learned
    /// costs one load.
    private let count = Atomic<Int>(0)

    var isEmpty: Bool { count.load(ordering: .relaxed) == 0 }

    /// What a rule is kept by: the namespace, the method and the URL without its query.
    static func scope(of request: FetchRequest) -> String {
        let url = request.url
        return request.cache.namespace + "\u{0}" + request.method.rawValue + "\u{0}" + url.scheme + "://" + url.authority + url.path
    }

    func rule(for scope: String) -> NoVarySearch? {
        state.withLock { $0.rules[scope] }
    }

    /// Keeps `rule` for `scope`; nil forgets the scope's rule. Whether a rule was forgotten.
    @discardableResult
    func learn(_ rule: NoVarySearch?, for scope: String) -> Bool {
        state.withLock { state in
            var forgot = false
            if let rule {
                if state.rules.updateValue(rule, forKey: scope) == nil { state.order.append(scope) }
                while state.rules.count > Self.capacity, state.start < state.order.count {
                    state.rules[state.order[state.start]] = nil
                    state.start += 1
                }
            } else {
                forgot = state.rules.removeValue(forKey: scope) != nil
            }
            // The order holds each kept scope once (a scope forgotten and learned again is
            // appended again: the compaction keeps its last place).
            if state.order.count - state.start > 2 * Self.capacity {
                var seen: Set<String> = []
                let live = state.order[state.start...].reversed().filter { state.rules[$0] != nil && seen.insert($0).inserted }
                state.order = live.reversed()
                state.start = 0
            }
            count.store(state.rules.count, ordering: .relaxed)
            return forgot
        }
    }
}
