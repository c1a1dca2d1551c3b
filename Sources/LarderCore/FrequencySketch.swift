// TinyLFU's frequency sketch (Einziger, Friedman, Manes, "TinyLFU: A Highly Efficient Cache
// Admission Policy", ACM Transactions on Storage 13(4), 2017): how often each key was asked for
// lately, approximately, in a few bits per key, including keys the cache no longer holds.
//
// A count-min sketch (Cormode, Muthukrishnan 2005): four rows of 4-bit counters; a key counts in
// one counter of each row, chosen by its hash, and its estimate is the least of the four (other
// keys can only add to a counter, so the least is the closest). Counters stop at 15: the policy
// only asks which of two keys was asked for more. Increments are conservative (Estan, Varghese
// 2002): only counters at the key's least are raised, which keeps estimates of rare keys low; and
// `count` increments at once equal `count` single ones, so hits counted elsewhere and folded in
// later cost one update.
//
// History fades (TinyLFU's reset): once the increments reach `samplesPerEntry` times the entries
// the sketch is sized for, every counter is halved, so what was popular long ago loses to what is
// popular now. The sample is longer than Caffeine's 10 per entry: a cache counted in bytes holds
// few entries when its objects are large, and on the hit-ratio traces of scripts/bench-hitratio a
// shorter sample forgot too soon (issue 33).
//
// Sized in entries, not bytes: it starts small and doubles as the cache holds more objects. A
// counter is chosen by the low bits of a 64-bit position, so on doubling each counter is copied
// into both places its keys can now land: every estimate stays an upper bound of the key's count,
// and no history is lost. Memory: 4 rows × 4 counters per entry × 4 bits, 8 bytes per entry it
// is sized for (16 at most, just after a doubling).
//
// Pure and deterministic: keys come as 64-bit hashes that are the same in every process
// (`StableHashable`), so what the policy keeps is reproducible.

/// A key with a hash that is the same in every process (Swift's `hashValue` is seeded anew in
/// each), for the frequency sketch.
public protocol StableHashable: Hashable, Sendable {
    var stableHash: UInt64 { get }
}

extension Int: StableHashable {
    public var stableHash: UInt64 { UInt64(bitPattern: Int64(self)) }
}

public struct FrequencySketch: Sendable {
    public static let rows = 4
    /// Counters per row for each entry the sketch is sized for.
    public static let countersPerEntry = 4
    /// Increments between two halvings, per entry the sketch is sized for.
    public static let samplesPerEntry = 32
    public static let maximumCount = 15
    static let minimumEntries = 64

    /// Counters per row (a power of two, at least `minimumEntries` × `countersPerEntry`).
    public private(set) var width: Int
    /// 16 counters of 4 bits to a word; the rows one after another.
    private var words: [UInt64]
    /// Increments since the last halving.
    public private(set) var additions = 0
    public private(set) var halvings = 0

    /// Sized for `entries` (at least 64).
    public init(entries: Int = 0) {
        var width = 16
        while width < max(entries, Self.minimumEntries) * Self.countersPerEntry { width <<= 1 }
        self.width = width
        words = Array(repeating: 0, count: Self.rows * width / 16)
    }

    /// Entries it is sized for.
    public var entries: Int { width / Self.countersPerEntry }
    public var memoryBytes: Int { words.count * MemoryLayout<UInt64>.size }
    /// Increments that make it halve every counter.
    public var sampleSize: Int { entries * Self.samplesPerEntry }

    /// Grows (by doubling) until sized for `entries`, keeping what it counted.
    public mutating func reserve(entries: Int) {
        guard entries > self.entries else { return }
        var width = self.width
        while width < entries * Self.countersPerEntry { width <<= 1 }
        let oldRowWords = self.width / 16
        let rowWords = width / 16
        var grown = [UInt64](repeating: 0, count: Self.rows * rowWords)
        for row in 0..<Self.rows {
            // A key's counter was at `position mod old width`; now it is there or a multiple of
            // the old width above: each copy of the row holds it.
            for word in 0..<rowWords { grown[row * rowWords + word] = words[row * oldRowWords + word % oldRowWords] }
        }
        words = grown
        self.width = width
    }

    /// How often the key was asked for lately (0–15; never less than the truth, as counted since
    /// halvings).
    public func estimate(_ hash: UInt64) -> Int {
        let probe = Probe(hash)
        var least = Self.maximumCount
        for row in 0..<Self.rows { least = min(least, counter(row, probe)) }
        return least
    }

    /// The key was asked for `count` more times.
    public mutating func increment(_ hash: UInt64, by count: UInt32 = 1) {
        guard count > 0 else { return }
        let probe = Probe(hash)
        var least = Self.maximumCount
        for row in 0..<Self.rows { least = min(least, counter(row, probe)) }
        let target = UInt64(min(Self.maximumCount, least + Int(min(count, UInt32(Self.maximumCount)))))
        for row in 0..<Self.rows {
            let (word, shift) = place(row, probe)
            let value = (words[word] >> shift) & 0xF
            if value < target { words[word] = (words[word] & ~(0xF << shift)) | (target << shift) }
        }
        additions += Int(count)
        if additions >= sampleSize { halve() }
    }

    /// TinyLFU's reset: every counter halved, and the sample with them.
    private mutating func halve() {
        for index in words.indices { words[index] = (words[index] >> 1) & 0x7777_7777_7777_7777 }
        additions /= 2
        halvings += 1
    }

    /// Where a key counts: a position per row from two hashes (Kirsch–Mitzenmacher).
    private struct Probe {
        let first: UInt64
        let step: UInt64

        init(_ hash: UInt64) {
            first = Self.mix(hash)
            step = Self.mix(first) | 1
        }

        /// SplitMix64's finaliser (Steele, Lea, Flood 2014): spreads any key's bits over all 64.
        static func mix(_ value: UInt64) -> UInt64 {
            var mixed = value &+ 0x9E37_79B9_7F4A_7C15
            mixed = (mixed ^ (mixed >> 30)) &* 0xBF58_476D_1CE4_E5B9
            mixed = (mixed ^ (mixed >> 27)) &* 0x94D0_49BB_1331_11EB
            return mixed ^ (mixed >> 31)
        }
    }

    private func place(_ row: Int, _ probe: Probe) -> (word: Int, shift: UInt64) {
        let index = Int(truncatingIfNeeded: (probe.first &+ UInt64(row) &* probe.step) & UInt64(width - 1))
        return (row * (width / 16) + index >> 4, UInt64(index & 15) << 2)
    }

    private func counter(_ row: Int, _ probe: Probe) -> Int {
        let (word, shift) = place(row, probe)
        return Int((words[word] >> shift) & 0xF)
    }
}
