// Memory of uncacheable answers (Varnish's hit-for-miss, Pingora's cacheability predictor): a
// key whose last answer could not be stored for a reason of the response's own (private,
// no-store, a status that cannot be stored, Vary: *, too large) is remembered for a while, and
// its misses then go to the origin at once and in parallel instead of queueing behind one
// request whose answer none of them could share. A cacheable answer for the key ends it.
//
// Bounded in time (each key for `seconds`) and in keys (`capacity`; the oldest remembered go
// first). Pure: the caller gives the time.

public struct UncacheableMemory<Key: Hashable & Sendable>: Sendable {
    public let capacity: Int
    /// When each remembered key stops being remembered.
    private var until: [Key: Double] = [:]
    /// Keys in the order they were remembered, for the bound; a key forgotten or remembered again
    /// stays here until its turn comes and is then skipped (its `until` differs or is gone).
    private var order: [(key: Key, until: Double)] = []
    private var orderStart = 0

    public init(capacity: Int) {
        self.capacity = max(1, capacity)
    }

    public var count: Int { until.count }

    /// Remembers `key` as uncacheable until `deadline`.
    public mutating func remember(_ key: Key, until deadline: Double) {
        until[key] = deadline
        order.append((key, deadline))
        while until.count > capacity, let oldest = popOldest() {
            if until[oldest.key] == oldest.until { until[oldest.key] = nil }
        }
        compactIfSparse()
    }

    /// Whether `key` is remembered as uncacheable at `now` (a lapsed key is forgotten).
    public mutating func contains(_ key: Key, now: Double) -> Bool {
        guard let deadline = until[key] else { return false }
        guard now < deadline else {
            until[key] = nil
            return false
        }
        return true
    }

    /// Forgets `key` (its answer was cacheable).
    public mutating func forget(_ key: Key) {
        until[key] = nil
    }

    private mutating func popOldest() -> (key: Key, until: Double)? {
        guard orderStart < order.count else { return nil }
        defer { orderStart += 1 }
        return order[orderStart]
    }

    /// Drops the order's consumed head and entries no longer remembered once they outnumber the
    /// remembered keys, so the order stays within a few times `capacity`.
    private mutating func compactIfSparse() {
        guard order.count - orderStart > 2 * capacity + 16 else { return }
        order = order[orderStart...].filter { until[$0.key] == $0.until }
        orderStart = 0
    }
}
