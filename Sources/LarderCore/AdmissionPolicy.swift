// What a store with a byte capacity keeps, and where: S3-FIFO (S3FIFO.swift) decides which
// objects stay; this decides which of them are written to disk.
//
// Below the capacity every miss is written, as a store without a policy would. Once the store is
// full, a first-time object enters the small queue *held in memory only*: most such objects are
// asked for once (one-hit wonders, scans) and leave again from the small queue, having cost no
// disk write. One asked for again while there is promoted to the main queue and written then.
// Objects someone asked to keep (`proven`: an explicit PUT, a warm job, a caller's ttl or
// version) and objects whose key the ghost remembers go to the main queue and are written at
// once. Memory for held objects is bounded (`heldBytesLimit`): when it runs out, the oldest held
// objects are written (they keep their place in the small queue), so what is kept and evicted
// is exactly S3-FIFO's whatever the memory; only the writes saved depend on it. (Letting them
// leave early instead costs 2 points of hit ratio: the small queue's older, written part then
// stops moving.)
//
// Until the store has told the policy what it already holds (`finishRestoring`), nothing is
// held and nothing is evicted by the policy: objects are written and queued as found.
//
// Pure: the store applies each `Decision` (writes, deletes, drops from memory).

public struct AdmissionPolicy<Key: StableHashable>: Sendable {
    public enum Placement: Sendable, Equatable {
        /// Write the object to disk now.
        case write
        /// Keep the object in memory only, in the small queue, until it proves reuse.
        case hold
        /// The object is larger than the capacity: neither written nor held.
        case notKept
    }

    /// What the store does after `admit`.
    public struct Decision: Sendable, Equatable {
        public var placement: Placement
        /// Objects on disk that leave the cache: delete them.
        public var evict: [Key] = []
        /// Objects held in memory that leave without having been written (not admitted).
        public var drop: [Key] = []
        /// Objects held in memory that were asked for again: write them now.
        public var write: [Key] = []

        public init(placement: Placement, evict: [Key] = [], drop: [Key] = [], write: [Key] = []) {
            self.placement = placement
            self.evict = evict
            self.drop = drop
            self.write = write
        }
    }

    public struct Counters: Sendable, Equatable {
        /// Objects written to disk: at once, or on promotion from memory.
        public var admitted = 0
        /// Objects that entered the small queue in memory only.
        public var held = 0
        /// Held objects that left without being written: the disk writes saved.
        public var rejected = 0
        /// Held objects written because they were asked for again.
        public var promotedFromMemory = 0
        /// Held objects written because memory for held objects ran out.
        public var writtenForMemory = 0
        public var queues = S3FIFO<Key>.Counters()
    }

    public private(set) var queues: S3FIFO<Key>
    public let heldBytesLimit: Int
    /// The store said what it held at start (see `finishRestoring`).
    public private(set) var ready: Bool
    private struct Held {
        var bytes: Int
        /// Tells this stay in memory from an earlier one of the key in `heldOrder`.
        var ticket: UInt64
    }

    private var held: [Key: Held] = [:]
    /// Held objects, oldest first (places of released ones are skipped).
    private var heldOrder = FIFO<(key: Key, ticket: UInt64)>()
    private var nextTicket: UInt64 = 0
    public private(set) var heldBytes = 0
    /// The store is full (see `admit`).
    private var full = false
    private var ownCounters = Counters()

    /// `ready` false: the store will `restore` what it holds first.
    public init(capacityBytes: Int, heldBytesLimit: Int, ready: Bool) {
        queues = S3FIFO(capacityBytes: capacityBytes)
        self.heldBytesLimit = max(0, heldBytesLimit)
        self.ready = ready
    }

    public var counters: Counters {
        var counters = ownCounters
        counters.queues = queues.counters
        return counters
    }

    public func isHeld(_ key: Key) -> Bool { held[key] != nil }
    /// Places in the order of held objects, stale ones included (a bound on memory; for tests).
    public var heldPlaceCount: Int { heldOrder.count }
    public func contains(_ key: Key) -> Bool { queues.contains(key) }

    /// A miss of `bytes` to be kept under `key`.
    public mutating func admit(_ key: Key, bytes: Int, proven: Bool) -> Decision {
        guard ready else {
            // Queued as found; the store's own capacity check evicts meanwhile.
            queues.remove(key)
            queues.restore(key, bytes: bytes)
            ownCounters.admitted += 1
            return Decision(placement: .write)
        }
        let wasHeld = releaseHeld(key)
        let known = queues.contains(key)
        // Full once the policy had to evict, until a purge brings it below nine tenths: an
        // eviction of a large object leaves room for a few small ones, which must not be
        // written for that alone.
        if queues.usedBytes + bytes > queues.capacityBytes {
            full = true
        } else if queues.usedBytes + bytes <= queues.capacityBytes / 10 * 9 {
            full = false
        }
        let (queue, changes) = queues.admit(key, bytes: bytes, proven: proven)
        var decision = Decision(placement: .write)
        record(changes, admitting: key, into: &decision)
        // Only an object with no row on disk is held: a held object leaves without a delete.
        let holdable = queue == .small && (wasHeld || (!known && full))
        if holdable, heldBytes + bytes > heldBytesLimit, bytes <= heldBytesLimit {
            makeRoomInMemory(for: bytes, into: &decision)
        }
        if queue == nil || !queues.contains(key) {
            decision.placement = .notKept
            // Stored again but not kept (larger than the capacity, or pushed out by itself):
            // its old rows go.
            if known, !wasHeld { decision.evict.append(key) }
        } else if holdable, heldBytes + bytes <= heldBytesLimit {
            nextTicket &+= 1
            held[key] = Held(bytes: bytes, ticket: nextTicket)
            heldOrder.append((key, nextTicket))
            // Places of objects no longer held are popped only when memory runs out: dropped
            // once they outnumber the held ones.
            if heldOrder.count > 2 * held.count + 64 {
                let held = self.held
                heldOrder.keep { held[$0.key]?.ticket == $0.ticket }
            }
            heldBytes += bytes
            ownCounters.held += wasHeld ? 0 : 1
            decision.placement = .hold
        } else {
            ownCounters.admitted += 1
        }
        return decision
    }

    /// What leaving or moving objects means for the store: a held object that leaves is dropped,
    /// one on disk evicted (unless it is the object being admitted: `admit` says what becomes of
    /// it); a held object promoted is written.
    private mutating func record(_ changes: [S3FIFO<Key>.Change], admitting key: Key?, into decision: inout Decision) {
        for change in changes {
            switch change {
            case .evicted(let gone, _):
                if releaseHeld(gone) {
                    ownCounters.rejected += 1
                    decision.drop.append(gone)
                } else if gone != key {
                    decision.evict.append(gone)
                }
            case .promoted(let proved):
                if releaseHeld(proved) {
                    ownCounters.promotedFromMemory += 1
                    ownCounters.admitted += 1
                    decision.write.append(proved)
                }
            }
        }
    }

    /// The policy holds more than the capacity (restored beyond a capacity lowered since):
    /// `trimExcess` brings it down, as `admit` makes room for its own object only.
    public var isOverCapacity: Bool { ready && queues.isOverCapacity }

    /// Evicts toward the capacity, `limit` objects at most, in the order S3-FIFO evicts. The
    /// decision's placement is `notKept`: it admits no object of its own.
    public mutating func trimExcess(limit: Int) -> Decision {
        var decision = Decision(placement: .notKept)
        guard ready else { return decision }
        record(queues.trim(limit: limit), admitting: nil, into: &decision)
        return decision
    }

    /// Memory for held objects ran out: the oldest are written, keeping their place in the small
    /// queue (it leaves from there as any written object would).
    private mutating func makeRoomInMemory(for bytes: Int, into decision: inout Decision) {
        while heldBytes + bytes > heldBytesLimit, let oldest = heldOrder.popFirst() {
            guard held[oldest.key]?.ticket == oldest.ticket else { continue }
            releaseHeld(oldest.key)
            ownCounters.writtenForMemory += 1
            ownCounters.admitted += 1
            decision.write.append(oldest.key)
        }
    }

    /// A hit on `key` (held or on disk), at `time` (seconds; kept for `usage`).
    public mutating func recordHit(_ key: Key, at time: UInt32 = 0, count: UInt32 = 1) {
        queues.recordHit(key, at: time, count: count)
    }

    /// The object left for another reason (a purge, an expiry, a failed write).
    public mutating func remove(_ key: Key) {
        releaseHeld(key)
        queues.remove(key)
    }

    /// A held object leaves unwritten for another reason (a purge or an invalidation matched it):
    /// counted as not admitted.
    public mutating func dropHeld(_ key: Key) {
        guard releaseHeld(key) else { return }
        queues.remove(key)
        ownCounters.rejected += 1
    }

    /// An object the store already held at start, in the order it was written (a key admitted
    /// since start keeps its place).
    public mutating func restore(_ key: Key, bytes: Int) {
        queues.restore(key, bytes: bytes)
    }

    /// The store has restored everything it holds: from now on the policy evicts and holds.
    public mutating func finishRestoring() {
        ready = true
    }

    @discardableResult
    private mutating func releaseHeld(_ key: Key) -> Bool {
        guard let stay = held.removeValue(forKey: key) else { return false }
        heldBytes -= stay.bytes
        return true
    }
}
