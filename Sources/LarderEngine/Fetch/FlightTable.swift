// Coalescing of concurrent misses: while one request (the leader) fetches a key from the
// upstream, later requests for the same key wait on its flight instead of sending their own.
//
// The table only keeps the map of flights and answers, under its lock, who leads, who waits and
// who is woken; what a waiter gets when its flight lands is FetchEngine's business. A flight
// carries an id so that a late event from an ended flight (a landing, a leader's cancellation)
// never touches a newer flight for the same key.
//
// It also remembers which keys' flights landed lately, so that a request that takes the lead
// looks the key up again only when a flight for it may have landed since its own lookup: on a
// shared store that second look is a round trip every miss would otherwise pay.

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
        /// No flight was under way: the request leads a new one. `landedSince`: a flight for the
        /// key may have landed (stored its entry) since the landing count the request saw.
        case leading(Token, landedSince: Bool)
    }

    private struct Flight {
        let id: UInt64
        var waiters: [(id: UInt64, waiter: Waiter)] = []
    }

    private struct Flights {
        var byKey: [Key: Flight] = [:]
        /// The landing count when each key's flight last landed, for the latest landings.
        var landedAt: [Key: UInt64] = [:]
        /// Landings up to this count are no longer in `landedAt` (forgotten to bound it).
        var forgottenUpTo: UInt64 = 0
    }

    /// Keys whose last landing is remembered; past this the record starts again.
    static var rememberedLandings: Int { 4096 }

    private let flights = Locked(Flights())
    /// Flights landed so far. Read before a lookup (`landings`), it tells `join` whether the
    /// lookup could have missed a flight's entry.
    private let landingCount = Atomic<UInt64>(0)
    private let nextID = Atomic<UInt64>(0)
    private let joins = Atomic<Int>(0)

    init() {}

    private func newID() -> UInt64 { nextID.add(1, ordering: .relaxed).newValue }

    /// The landing count, read before a lookup and given to `join` after it. Acquiring: a
    /// flight stores its entry before it lands, so a lookup after this read sees the entry of
    /// every landing counted in it.
    var landings: UInt64 { landingCount.load(ordering: .acquiring) }

    /// Waits on the flight under way for `key`, or starts one that this request leads.
    /// `seenLandings`: `landings` as read before the request's lookup.
    func join(_ key: Key, as waiter: Waiter, seenLandings: UInt64) -> Joined {
        let id = newID()
        let landedSince = flights.withLock { flights -> Bool? in
            if flights.byKey[key] != nil {
                flights.byKey[key]!.waiters.append((id, waiter))
                return nil
            }
            flights.byKey[key] = Flight(id: id)
            if let landed = flights.landedAt[key] { return landed > seenLandings }
            return flights.forgottenUpTo > seenLandings
        }
        guard let landedSince else {
            joins.add(1, ordering: .relaxed)
            return .waiting(waiter: id)
        }
        return .leading(Token(key: key, id: id), landedSince: landedSince)
    }

    /// Starts a flight for `key` only when none is under way (a background refresh: a flight
    /// already under way is the refresh); nil otherwise.
    func lead(_ key: Key) -> Token? {
        let id = newID()
        let started = flights.withLock { flights -> Bool in
            guard flights.byKey[key] == nil else { return false }
            flights.byKey[key] = Flight(id: id)
            return true
        }
        return started ? Token(key: key, id: id) : nil
    }

    /// A cancelled waiter leaves its flight; the flight goes on for the others.
    func leave(_ key: Key, waiter id: UInt64) {
        flights.withLock { $0.byKey[key]?.waiters.removeAll { $0.id == id } }
    }

    /// Ends the flight and hands back its waiters, in the order they joined, once: a second
    /// landing, or one after the flight was abandoned, finds none. The flight is gone before
    /// anyone is answered, so a request sent after an answer never joins a finished flight.
    func land(_ token: Token) -> [Waiter] {
        flights.withLock { flights -> [Waiter] in
            guard let current = flights.byKey[token.key], current.id == token.id else { return [] }
            let landing = landingCount.add(1, ordering: .releasing).newValue
            if flights.landedAt.count >= Self.rememberedLandings {
                flights.landedAt.removeAll(keepingCapacity: true)
                flights.forgottenUpTo = landing - 1
            }
            flights.landedAt[token.key] = landing
            return flights.byKey.removeValue(forKey: token.key)?.waiters.map(\.waiter) ?? []
        }
    }

    /// The leader's caller gave up. True when the transfer may be aborted: nobody waits on it
    /// (the flight is then removed, under the lock, so nobody can join it after that decision),
    /// or the flight has already ended. False while others wait: it goes on for them.
    func abandon(_ token: Token) -> Bool {
        flights.withLock { flights -> Bool in
            guard let current = flights.byKey[token.key], current.id == token.id else { return true }
            guard current.waiters.isEmpty else { return false }
            flights.byKey.removeValue(forKey: token.key)
            return true
        }
    }

    /// Requests that joined another request's flight instead of leading their own.
    var joinedCount: Int { joins.load(ordering: .relaxed) }
}
