// When a namespace's compression dictionary is trained. A body of a few KiB compresses poorly
// alone: the compressor has seen nothing like it yet. A dictionary trained from the namespace's
// own bodies (their field names, their recurring values) gives it that history, so small JSON
// bodies shrink further and decompress faster (zstd, RFC 8878 §5; docs/performance.md). Pure:
// the sampling and training are done by the engine and the codec; the decisions are here.

public struct DictionaryTraining: Sendable, Equatable {
    /// Bodies a dictionary is trained from; 0 turns dictionaries off (what was compressed with
    /// one still reads).
    public var samples: Int

    public static let defaultSamples = 1_000
    /// The most bodies a sample set may be given to train on (`--compress-dictionary-samples`).
    public static let maxSamples = 100_000
    /// Fewest bodies a dictionary is trained from when an operator asks for one now.
    public static let minimumSamples = 8
    /// A dictionary's largest size. Service bodies repeat their structure within the first few
    /// KiB; a larger dictionary gains little and costs memory in every context that uses it.
    public static let maxDictionaryBytes = 32 << 10
    /// Bodies larger than this are not sampled: they compress well alone, and a few of them
    /// would fill the sample set.
    public static let maxSampleBytes = 64 << 10
    /// A sample set's bytes at most: about 100× the dictionary, what zstd's trainer advises.
    public static let maxSetBytes = 4 << 20
    /// A namespace's dictionary is replaced by one trained from fresh bodies after this long,
    /// so it follows what the namespace now holds.
    public static let refreshSeconds: Double = 86_400
    /// Dictionaries kept per namespace, the newest; an entry compressed with an older one reads
    /// as a miss and is fetched again.
    public static let keptVersions = 8
    /// Namespaces that may sample or hold dictionaries at once: each costs up to a sample set
    /// and its compression contexts.
    public static let maxNamespaces = 64
    /// A namespace without a dictionary whose set has not filled in this long gives its place
    /// to another when `maxNamespaces` are taken.
    public static let abandonedSetSeconds: Double = 3_600

    public init(samples: Int = Self.defaultSamples) {
        self.samples = samples
    }

    public static let off = DictionaryTraining(samples: 0)

    public var isOff: Bool { samples <= 0 }

    /// Whether a body of `bodyCount` bytes that is being compressed goes into a sample set.
    public func samples(bodyCount: Int) -> Bool {
        !isOff && bodyCount > 0 && bodyCount <= Self.maxSampleBytes
    }

    /// Whether a sample set of `count` bodies is ready to train from.
    public func isFull(count: Int) -> Bool {
        count >= samples
    }

    /// Whether a body of `bodyCount` bytes fits a sample set holding `setBytes`; one that does
    /// not makes the set full as it is.
    public static func fits(_ bodyCount: Int, in setBytes: Int) -> Bool {
        setBytes + bodyCount <= maxSetBytes
    }

    /// Whether a namespace whose dictionary was trained at `trainedAt` (nil: it has none)
    /// should gather samples for a new one at `now`.
    public func wantsSamples(trainedAt: Double?, now: Double) -> Bool {
        guard !isOff else { return false }
        guard let trainedAt else { return true }
        return now - trainedAt >= Self.refreshSeconds
    }

    /// The size to train a dictionary of from `sampleBytes` of samples: a tenth of them, at
    /// least 4 KiB and at most `maxDictionaryBytes` (a dictionary much over a tenth of its
    /// samples learns their accidents, not their structure).
    public static func dictionaryBytes(sampleBytes: Int) -> Int {
        min(maxDictionaryBytes, max(4 << 10, sampleBytes / 10))
    }

    /// Ids a trained dictionary may take: zstd's range for private dictionaries (RFC 8878 §5:
    /// below 32,768 and from 2^31 are reserved for registration).
    public static let ids: ClosedRange<UInt32> = 32_768...((1 << 31) - 1)
}
