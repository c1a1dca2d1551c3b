// A Bloom filter of the primary keys that have rows, so that a lookup for a key never stored
// (every miss) is answered without SQLite. That lookup costs a read transaction (four fcntl
// lock calls) and an index leaf rarely in the page cache, a real share of a miss's CPU. The
// technique of LSM stores (RocksDB, Cassandra) for the same reason: most lookups of an absent
// key never touch the disk.
//
// - A key goes in when it is saved, before it can be committed, and never comes out: a
//   removed key costs a false positive (one SQLite lookup), never a false negative.
// - The store rebuilds the filter from the database in the background, at start-up (until
//   then every lookup goes to SQLite) and when the keys added would push the false-positive
//   rate past its design (~0.4 % at 12 bits and 6 probes per key); a rebuild also forgets
//   removed keys. See `SQLiteCacheStore.rebuildKeyFilter`.

import Synchronization

final class KeyFilter: @unchecked Sendable {
    // @unchecked Sendable: `words` is allocated once, every access is atomic, and it is freed
    // only in deinit.
    private let words: UnsafeMutablePointer<Atomic<UInt64>>
    private let wordCount: Int
    private let bitMask: UInt64
    /// Keys it was sized for; past this the store rebuilds it larger.
    let capacity: Int
    /// Keys inserted (each key counted once per insert call).
    private let inserted = Atomic<Int>(0)

    static let bitsPerKey = 12
    static let probeCount: UInt64 = 6
    static let minimumBits = 1 << 20

    /// Sized for `capacity` keys (at least 2^20 bits, 128 KiB).
    init(capacity: Int) {
        var bits = Self.minimumBits
        while bits < capacity.multipliedReportingOverflow(by: Self.bitsPerKey).partialValue, bits < 1 << 36 { bits <<= 1 }
        wordCount = bits / 64
        bitMask = UInt64(bits - 1)
        self.capacity = bits / Self.bitsPerKey
        words = .allocate(capacity: wordCount)
        for index in 0..<wordCount { (words + index).initialize(to: Atomic<UInt64>(0)) }
    }

    deinit {
        words.deinitialize(count: wordCount)
        words.deallocate()
    }

    var insertedCount: Int { inserted.load(ordering: .relaxed) }

    /// Where a key's bits are: two hashes, combined for each probe (Kirsch–Mitzenmacher). A pure
    /// function of the key within this process, so callers compute it outside their locks.
    struct Probe {
        let first: UInt64
        let step: UInt64
    }

    static func probe(_ key: String) -> Probe {
        var hasher = Hasher()
        hasher.combine(key)
        let first = UInt64(bitPattern: Int64(hasher.finalize()))
        // SplitMix64's finaliser: a second, independent-enough hash; odd, so probes differ.
        var mixed = first &+ 0x9E37_79B9_7F4A_7C15
        mixed = (mixed ^ (mixed >> 30)) &* 0xBF58_476D_1CE4_E5B9
        mixed = (mixed ^ (mixed >> 27)) &* 0x94D0_49BB_1331_11EB
        mixed ^= mixed >> 31
        return Probe(first: first, step: mixed | 1)
    }

    /// The primary keys a row's key may be looked up by: a row's key is its primary key P or
    /// P + "." + a suffix (variants, parts), so every prefix that ends before a dot, and the
    /// key itself.
    static func probes(forRowKey key: String) -> [Probe] {
        var probes = [probe(key)]
        // Byte by byte: a rebuild reads every row's key, and walking Characters was a large share
        // of the rebuild's cost.
        let bytes = key.utf8
        var index = bytes.startIndex
        while let dot = bytes[index...].firstIndex(of: UInt8(ascii: ".")) {
            probes.append(probe(String(key[..<dot])))
            index = bytes.index(after: dot)
        }
        return probes
    }

    func insert(_ probe: Probe) {
        var position = probe.first
        for _ in 0..<Self.probeCount {
            let bit = position & bitMask
            words[Int(bit >> 6)].bitwiseOr(1 << (bit & 63), ordering: .relaxed)
            position &+= probe.step
        }
        inserted.add(1, ordering: .relaxed)
    }

    /// False only when the key was never inserted.
    func mayContain(_ probe: Probe) -> Bool {
        var position = probe.first
        for _ in 0..<Self.probeCount {
            let bit = position & bitMask
            if words[Int(bit >> 6)].load(ordering: .relaxed) & (1 << (bit & 63)) == 0 { return false }
            position &+= probe.step
        }
        return true
    }
}
