// Coalescing of concurrent misses: while one request (the leader) fetches a key from the
// upstream, later requests for the same key wait on its flight instead of sending their own.
//
// The table only keeps the map of flights and answers, under its lock, who leads, who waits and
// who is woken; what a waiter gets when its flight lands is FetchEngine's business. A flight
// carries an id so that a late event from an ended flight (a landing, a leader's cancellation)
// never touches a newer flight for the same key.

import LarderSync

final class FlightTable<Key: Hashable & Sendable, Waiter: Sendable>: Sendable {
    /// One flight's identity, held by its leader.
    struct Token: Sendable {
        let key: Key
        let id: UInt64
    }

    /// What `join` made of a request.
    enum Joined {
        /// A flight was under way: the request waits on it, as `waiter` (for `leave`).
        case waiting(waiter: UInt64)
        /// No flight was under way: the request leads a new one.
        case leading(Token)
    }

    private struct Flight {
        let id: UInt64
        var waiters: [(id: UInt64, waiter: Waiter)] = []
    }

    private let flights = Locked<[Key: Flight]>([:])
    private let nextID = Atomic<UInt64>(0)
    private let joins = Atomic<Int>(0)

    init() {}

    private func newID() -> UInt64 { nextID.add(1, ordering: .relaxed).newValue }

    /// Waits on the flight under way for `key`, or starts one that this request leads.
    func join(_ key: Key, as waiter: Waiter) -> Joined {
        let id = newID()
        let joined = flights.withLock { flights -> Bool in
            if flights[key] != nil {
                flights[key]!.waiters.append((id, waiter))
                return true
            }
            flights[key] = Flight(id: id)
            return false
        }
        guard joined else { return .leading(Token(key: key, id: id)) }
        joins.add(1, ordering: .relaxed)
        return .waiting(waiter: id)
    }

    /// Starts a flight for `key` only when none is under way (a background refresh: a flight
    /// already under way is the refresh); nil otherwise.
    func lead(_ key: Key) -> Token? {
        let id = newID()
        let started = flights.withLock { flights -> Bool in
            guard flights[key] == nil else { return false }
            flights[key] = Flight(id: id)
            return true
        }
        return started ? Token(key: key, id: id) : nil
    }

    /// A cancelled waiter leaves its flight; the flight goes on for the others.
    func leave(_ key: Key, waiter id: UInt64) {
        flights.withLock { $0[key]?.waiters.removeAll { $0.id == id } }
    }

    /// Ends the flight and hands back its waiters, in the order they joined, once: a second
    /// landing, or one after the flight was abandoned, finds none. The flight is gone before
    /// anyone is answered, so a request sent after an answer never joins a finished flight.
    func land(_ token: Token) -> [Waiter] {
        flights.withLock { flights -> [Waiter] in
            guard let current = flights[token.key], current.id == token.id else { return [] }
            return flights.removeValue(forKey: token.key)?.waiters.map(\.waiter) ?? []
        }
    }

    /// The leader's caller gave up. True when the transfer may be aborted: nobody waits on it
    /// (the flight is then removed, under the lock, so nobody can join it after that decision),
    /// or the flight has already ended. False while others wait: it goes on for them.
    func abandon(_ token: Token) -> Bool {
        flights.withLock { flights -> Bool in
            guard let current = flights[token.key], current.id == token.id else { return true }
            guard current.waiters.isEmpty else { return false }
            flights.removeValue(forKey: token.key)
            return true
        }
    }

    /// Requests that joined another request's flight instead of leading their own.
    var joinedCount: Int { joins.load(ordering: .relaxed) }
}
