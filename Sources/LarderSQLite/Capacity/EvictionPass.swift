// Which rows one pass of the capacity check removes: over `maxBytes`, the oldest rows go, in
// that order, until what they free brings the store down to the low-water mark. Pure: the
// store feeds it candidate rows (oldest first) and deletes the rowids it took. The admission
// policy evicts first (SQLiteCacheStore+Admission.swift); this backs it up while the policy
// learns the stored rows at start, and when its estimate of the bytes drifted (variants).

struct EvictionPass {
    /// Bytes over the target, the low-water mark as a rule (0 or less: nothing to evict).
    let excess: Int
    private(set) var rowids: [Int64] = []
    private(set) var freed = 0

    init(usedBytes: Int, capacity: StoreCapacity) {
        self.init(usedBytes: usedBytes, downTo: Self.lowWaterMark(capacity))
    }

    /// Down to `target` bytes instead of the low-water mark.
    init(usedBytes: Int, downTo target: Int) {
        excess = usedBytes - target
    }

    /// Bytes eviction goes down to.
    static func lowWaterMark(_ capacity: StoreCapacity) -> Int {
        Int(Double(capacity.maxBytes) * capacity.lowWater)
    }

    /// Whether the rows taken so far do not yet free the excess.
    var wantsMore: Bool { freed < excess }

    /// Takes the next candidate (the oldest not taken yet).
    mutating func take(rowid: Int64, bytes: Int) {
        rowids.append(rowid)
        freed += bytes
    }
}
