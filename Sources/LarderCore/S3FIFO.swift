// S3-FIFO (Yang et al., "FIFO queues are all you need for cache eviction", SOSP 2023), counted in
// bytes, with TinyLFU's frequency admission (Einziger et al., ACM ToS 2017) for what leaves the
// small queue unasked. A new object enters a small FIFO (2% of the capacity). When the small queue
// is over its share, its oldest object moves to the main FIFO if it was asked for again while
// there; otherwise it leaves, and its key alone is remembered in a ghost FIFO. An object whose key
// is still in the ghost enters the main queue directly. The main queue evicts its oldest object
// unless that was asked for since it was last looked at: then it goes round again with its count
// lowered by one (counts stop at 3, two bits). Most objects are asked for once: they leave from
// the small queue quickly and never displace the proven ones in the main queue. (An object larger
// than the small queue's share leaves it as soon as room is needed: it is kept when asked for
// again while the ghost remembers it.)
//
// The small queue and the ghost see a short history: an object asked for every so often, but
// less often than they turn over, never reaches the main queue. A frequency sketch
// (FrequencySketch.swift) counts requests over a much longer history, for keys held or not. An
// object about to leave the small queue unasked, but asked for before, is weighed as W-TinyLFU
// weighs its window's victim: it enters the main queue if the sketch says it was asked for more
// often (by a margin, see `admitsByFrequency`) than the object the main queue would evict next.
// The small queue is then W-TinyLFU's window, hence small (Caffeine's starts at 1%): the sketch,
// not the queue, finds the objects worth keeping. Gating promotions or ghost hits by the sketch
// as well loses hit ratio in a simulator (issue 33): an object asked for again soon is worth
// keeping whatever its history.
//
// A hit only raises a counter (and the sketch's): no reordering, so it costs no write to a list
// (or to a database row). Pure: no I/O and no clock. A store applies what it decides: `admit`
// says which queue a new object joins and which objects must go; a move from the small queue to
// the main one is reported (`promoted`), so that a store keeping the small queue in memory writes
// the object to disk then.

public struct S3FIFO<Key: StableHashable>: Sendable {
    public enum Queue: Sendable, Equatable {
        case small, main
    }

    /// What `admit` changed besides adding the new object, or what `trim` did.
    public enum Change: Sendable, Equatable {
        /// The object left the cache (from the small queue, its key goes to the ghost).
        case evicted(Key, from: Queue)
        /// The object moved from the small queue to the main one.
        case promoted(Key)
    }

    public struct Counters: Sendable, Equatable {
        /// New objects that entered the small queue.
        public var admittedToSmall = 0
        /// New objects that entered the main queue because their key was in the ghost.
        public var ghostHits = 0
        /// Objects moved from the small queue to the main one (asked for again there, or let in
        /// by the frequency sketch).
        public var promoted = 0
        /// Of those, objects not asked for again in the small queue that the sketch let in: asked
        /// for more often than the main queue's next victim.
        public var admittedByFrequency = 0
        /// Objects asked for before that the sketch did not let in from the small queue: the main
        /// queue's next victim was asked for about as often or more.
        public var refusedByFrequency = 0
        public var evictedFromSmall = 0
        public var evictedFromMain = 0
        /// Main-queue objects sent round again because they were asked for.
        public var reinserted = 0
        public init() {}
    }

    public let capacityBytes: Int
    /// The small queue's share of the capacity.
    public let smallBytesLimit: Int
    public private(set) var counters = Counters()
    public private(set) var smallBytes = 0
    public private(set) var mainBytes = 0
    /// How often keys were asked for lately; nil without frequency admission.
    public private(set) var sketch: FrequencySketch?
    /// The sketch's admission bar, tuned by the hit rate (AdmissionBar).
    public private(set) var admissionBar = AdmissionBar()

    private struct Entry {
        var queue: Queue
        var frequency: UInt8
        var bytes: Int
        /// Tells this entry's place in a queue from places an earlier entry of the key left
        /// behind (removed or moved objects are skipped when their old place comes up).
        var ticket: UInt64
        /// Hits since the object entered the cache, and the time of the last (the caller's
        /// clock, in seconds): not the policy's, kept here for a listing at no extra lookup.
        var usage = Usage()
    }

    /// An object's hits since it entered the cache (saturating), and when it was last hit.
    public struct Usage: Sendable, Equatable {
        public var hits: UInt32 = 0
        public var lastHit: UInt32 = 0
        public init() {}

        /// One more hit, at `time`.
        public mutating func count(at time: UInt32) {
            if hits < UInt32.max { hits += 1 }
            if lastHit < time { lastHit = time }
        }
    }

    private var entries: [Key: Entry] = [:]
    private var small = FIFO<Place>()
    private var main = FIFO<Place>()
    private var ghost = GhostKeys<Key>()
    private var mainCount = 0
    private var smallCount = 0
    private var nextTicket: UInt64 = 0

    private struct Place {
        let key: Key
        let ticket: UInt64
    }

    static var maxFrequency: UInt8 { 3 }
    /// The ghost remembers as many keys as the main queue holds objects, and at least this many.
    static var minimumGhostKeys: Int { 64 }

    /// `frequencyAdmission` false: S3-FIFO alone, as the paper has it (with its tenth for the
    /// small queue, `smallFraction: 0.1`).
    /// `adaptiveAdmission` false: the bar stays at `AdmissionBar`'s start.
    public init(capacityBytes: Int, smallFraction: Double = 0.02, frequencyAdmission: Bool = true, adaptiveAdmission: Bool = true) {
        precondition(capacityBytes > 0 && smallFraction > 0 && smallFraction < 1)
        self.capacityBytes = capacityBytes
        self.smallBytesLimit = max(1, Int(Double(capacityBytes) * smallFraction))
        sketch = frequencyAdmission ? FrequencySketch() : nil
        self.adaptiveAdmission = adaptiveAdmission
    }

    private let adaptiveAdmission: Bool

    public var count: Int { entries.count }
    /// Places in the three queues, stale ones included (a bound on memory; for tests).
    public var placeCount: Int { small.count + main.count + ghost.placeCount }
    public var usedBytes: Int { smallBytes + mainBytes }
    public func contains(_ key: Key) -> Bool { entries[key] != nil }
    public func queue(of key: Key) -> Queue? { entries[key]?.queue }
    public func remembersInGhost(_ key: Key) -> Bool { ghost.contains(key) }

    /// A hit: the object was asked for again (at `time`, seconds on the caller's clock, for
    /// `usage`). Returns whether it is held.
    @discardableResult
    public mutating func recordHit(_ key: Key, at time: UInt32 = 0, count: UInt32 = 1) -> Bool {
        guard count > 0 else { return entries[key] != nil }
        guard var entry = entries[key] else { return false }
        if adaptiveAdmission, sketch != nil { for _ in 0..<min(count, 64) { admissionBar.record(hit: true) } }
        // Only hits count here (a miss counts in `admit`), so that a caller may ask
        // `recordHit`, then `admit` when it says the object is not held.
        sketch?.increment(key.stableHash, by: count)
        entry.frequency = UInt8(min(UInt32(Self.maxFrequency), UInt32(entry.frequency) + count))
        entry.usage.hits = entry.usage.hits.addingReportingOverflow(count).overflow ? UInt32.max : entry.usage.hits + count
        entry.usage.lastHit = max(entry.usage.lastHit, time)
        entries[key] = entry
        return true
    }

    /// The object's hits since it entered the cache; nil when it is not held.
    public func usage(of key: Key) -> Usage? { entries[key]?.usage }

    /// A miss to be kept: the object joins a queue (nil when it is larger than the whole
    /// capacity: it is not kept), and what must make room for it is returned. An object already
    /// held is replaced (its size may have changed) and keeps its queue. `proven`: the object
    /// needs no probation (someone asked for it to be kept) and joins the main queue.
    ///
    /// It makes room for itself only: an excess the queues held before (objects restored beyond
    /// a capacity lowered since they were stored) is `trim`'s to take, a slice at a time, so that
    /// no single miss pays for deciding all of it.
    public mutating func admit(_ key: Key, bytes: Int, proven: Bool = false) -> (queue: Queue?, changes: [Change]) {
        // A miss (or a store again) is a request too.
        sketch?.increment(key.stableHash)
        if adaptiveAdmission, sketch != nil, entries[key] == nil { admissionBar.record(hit: false) }
        guard bytes <= capacityBytes else {
            remove(key)
            return (nil, [])
        }
        let excess = max(0, usedBytes - capacityBytes)
        let queue: Queue
        if let held = entries[key] {
            queue = proven ? .main : held.queue
            remove(key)
        } else if ghost.remove(key) {
            queue = .main
            counters.ghostHits += 1
        } else if proven {
            queue = .main
        } else {
            queue = .small
            counters.admittedToSmall += 1
        }
        place(key, bytes: bytes, in: queue, frequency: 0)
        var changes: [Change] = []
        while usedBytes > capacityBytes + excess { evictOne(into: &changes) }
        return (queue, changes)
    }

    /// The queues hold more than the capacity (see `admit`): `trim` brings them down.
    public var isOverCapacity: Bool { usedBytes > capacityBytes }

    /// Evicts toward the capacity, `limit` changes at most (a promotion on the way counts as
    /// one), and returns them.
    public mutating func trim(limit: Int) -> [Change] {
        var changes: [Change] = []
        while isOverCapacity, changes.count < limit {
            let before = changes.count
            evictOne(into: &changes)
            guard changes.count > before else { break }
        }
        return changes
    }

    /// An object found in the store at start-up: it joins the end of the main queue, unless it
    /// is queued already (admitted since). Nothing is evicted: `trim` brings the queues back
    /// under the capacity.
    public mutating func restore(_ key: Key, bytes: Int) {
        guard entries[key] == nil else { return }
        place(key, bytes: bytes, in: .main, frequency: 0)
    }

    /// The object left for another reason (a purge, an expiry): forgets it.
    public mutating func remove(_ key: Key) {
        guard let entry = entries.removeValue(forKey: key) else { return }
        switch entry.queue {
        case .small:
            smallBytes -= entry.bytes
            smallCount -= 1
        case .main:
            mainBytes -= entry.bytes
            mainCount -= 1
        }
    }

    private mutating func place(_ key: Key, bytes: Int, in queue: Queue, frequency: UInt8, usage: Usage = Usage()) {
        nextTicket &+= 1
        entries[key] = Entry(queue: queue, frequency: frequency, bytes: bytes, ticket: nextTicket, usage: usage)
        if let sized = sketch?.entries, entries.count > sized { sketch?.reserve(entries: entries.count) }
        switch queue {
        case .small:
            small.append(Place(key: key, ticket: nextTicket))
            smallBytes += bytes
            smallCount += 1
            if small.count > 2 * smallCount + 64 { small = Self.current(small, in: .small, of: entries) }
        case .main:
            main.append(Place(key: key, ticket: nextTicket))
            mainBytes += bytes
            mainCount += 1
            if main.count > 2 * mainCount + 64 { main = Self.current(main, in: .main, of: entries) }
        }
    }

    /// The places of `fifo` that still name their object there. Objects stored again, moved or
    /// removed leave places behind, and below the capacity nothing pops them: `place` drops them
    /// once they outnumber the live ones.
    private static func current(_ fifo: FIFO<Place>, in queue: Queue, of entries: [Key: Entry]) -> FIFO<Place> {
        var kept = fifo
        kept.keep { place in
            guard let entry = entries[place.key] else { return false }
            return entry.ticket == place.ticket && entry.queue == queue
        }
        return kept
    }

    private mutating func evictOne(into changes: inout [Change]) {
        if smallBytes > smallBytesLimit || mainCount == 0 {
            evictFromSmall(into: &changes)
        } else {
            evictFromMain(into: &changes)
        }
    }

    private mutating func evictFromSmall(into changes: inout [Change]) {
        while let oldest = small.popFirst() {
            guard let entry = entries[oldest.key], entry.ticket == oldest.ticket, entry.queue == .small else { continue }
            smallBytes -= entry.bytes
            smallCount -= 1
            entries[oldest.key] = nil
            if entry.frequency > 0 || admitsByFrequency(oldest.key) {
                place(oldest.key, bytes: entry.bytes, in: .main, frequency: 0, usage: entry.usage)
                counters.promoted += 1
                changes.append(.promoted(oldest.key))
            } else {
                remember(oldest.key)
                counters.evictedFromSmall += 1
                changes.append(.evicted(oldest.key, from: .small))
            }
            return
        }
    }

    /// TinyLFU's admission, for an object leaving the small queue unasked: it enters the main
    /// queue if it was asked for before (once is every newcomer) and clearly more often than the
    /// main queue's next victim: by the admission bar (AdmissionBar: 1 to 3, from 2). Estimates
    /// of a sketch this size run about one over the truth (other keys' counts), and a victim is
    /// weighed against one candidate after another: with no margin, the luckiest of them
    /// displaced it (a loss of up to 0.8 points on some traces in the simulator of issue 33);
    /// with a fixed margin of 2, a loop over more objects than fit never got in.
    private mutating func admitsByFrequency(_ key: Key) -> Bool {
        guard let sketch else { return false }
        let candidate = sketch.estimate(key.stableHash)
        guard candidate >= 2 else { return false }
        guard let victim = mainVictim() else {
            counters.admittedByFrequency += 1
            return true
        }
        guard candidate >= sketch.estimate(victim.stableHash) + admissionBar.margin else {
            counters.refusedByFrequency += 1
            return false
        }
        counters.admittedByFrequency += 1
        return true
    }

    /// The object the main queue evicts next, left in place: objects at its head that were asked
    /// for go round first (their count lowered) and stale places are dropped, as eviction does.
    private mutating func mainVictim() -> Key? {
        while let oldest = main.first {
            guard var entry = entries[oldest.key], entry.ticket == oldest.ticket, entry.queue == .main else {
                main.removeFirst()
                continue
            }
            guard entry.frequency > 0 else { return oldest.key }
            main.removeFirst()
            entry.frequency -= 1
            entries[oldest.key] = entry
            main.append(oldest)
            counters.reinserted += 1
        }
        return nil
    }

    private mutating func evictFromMain(into changes: inout [Change]) {
        guard let victim = mainVictim(), let entry = entries.removeValue(forKey: victim) else { return }
        main.removeFirst()
        mainBytes -= entry.bytes
        mainCount -= 1
        counters.evictedFromMain += 1
        changes.append(.evicted(victim, from: .main))
    }

    private mutating func remember(_ key: Key) {
        ghost.insert(key, limit: max(mainCount, Self.minimumGhostKeys))
    }
}

/// Keys remembered after they left or were turned away, the oldest forgotten first once there
/// are more than a limit: S3-FIFO's ghost queue, and the memory tier's (LarderEngine).
public struct GhostKeys<Key: Hashable> {
    private var tickets: [Key: UInt64] = [:]
    private var places = FIFO<(key: Key, ticket: UInt64)>()
    private var nextTicket: UInt64 = 0

    public init() {}

    /// Places in the queue, those of keys since removed or remembered again included.
    var placeCount: Int { places.count }

    public func contains(_ key: Key) -> Bool { tickets[key] != nil }

    /// Forgets `key` and says whether it was remembered.
    public mutating func remove(_ key: Key) -> Bool { tickets.removeValue(forKey: key) != nil }

    /// Remembers `key` as the newest, then forgets the oldest beyond `limit` keys.
    public mutating func insert(_ key: Key, limit: Int) {
        nextTicket &+= 1
        tickets[key] = nextTicket
        places.append((key, nextTicket))
        // Places of keys since removed or remembered again are dropped on the way.
        while tickets.count > limit || places.count > 2 * limit, let oldest = places.popFirst() {
            if tickets[oldest.key] == oldest.ticket { tickets[oldest.key] = nil }
        }
    }
}

extension GhostKeys: Sendable where Key: Sendable {}

/// A first-in first-out queue on an array: appends at the end, takes from a moving head, and
/// drops the taken part once it is most of the array (amortised O(1)).
struct FIFO<Element> {
    private var storage: [Element] = []
    private var head = 0

    var isEmpty: Bool { head == storage.count }
    var count: Int { storage.count - head }

    mutating func append(_ element: Element) { storage.append(element) }

    /// Keeps only the elements `isKept` says, in order.
    mutating func keep(where isKept: (Element) -> Bool) {
        storage = storage[head...].filter(isKept)
        head = 0
    }

    var first: Element? { head < storage.count ? storage[head] : nil }

    mutating func removeFirst() { _ = popFirst() }

    mutating func popFirst() -> Element? {
        guard head < storage.count else { return nil }
        let element = storage[head]
        head += 1
        if head >= 1024 && head * 2 >= storage.count {
            storage.removeFirst(head)
            head = 0
        }
        return element
    }
}

extension FIFO: Sendable where Element: Sendable {}
