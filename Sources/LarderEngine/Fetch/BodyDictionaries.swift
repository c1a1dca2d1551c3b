// Each namespace's compression dictionaries: sampled from the bodies it stores, trained in the
// background when a sample set is full (DictionaryTraining decides when), kept in the store
// (DictionaryStore, which keeps a namespace's newest `keptVersions`) and registered with the
// codec. A body stored compressed names its dictionary in its frame, so older versions stay
// readable until they are retired; a frame naming a dictionary this instance has not seen
// (another instance trained it, on a shared store) has it loaded from the store once.
//
// Touched on stores only (a compressed save), never on a hit; a read from the store touches it
// only when its frame names a dictionary the codec does not have.

import Dispatch
public import LarderCore
import LarderSync
import Logging

public final class BodyDictionaries: Sendable {
    /// A namespace's dictionaries and the sample set gathered for its next one.
    struct Shelved {
        /// Ids this instance compresses with or may read with, oldest first; the last compresses.
        var versions: [UInt32] = []
        var trainedAt: Double?
        var bytes = 0
        var samples: [[UInt8]] = []
        var sampleBytes = 0
        /// When the record was made or its sample set got its first body.
        var sampleStartedAt: Double?
        /// Asked for by an operator: gather a set now, whatever the dictionary's age.
        var wanted = false
        /// A set is being trained from; its bytes still count against what may be held.
        var training = false
        var trainingBytes = 0
    }

    /// Every namespace's, and the sample bytes they all hold (training sets included).
    struct Shelf {
        var namespaces: [String: Shelved] = [:]
        var heldBytes = 0

        /// Whether `namespace` has, or may now have, a record: at most `maxNamespaces`, a new
        /// one taking the place of a record that holds no dictionary and has sampled for an
        /// hour without filling its set.
        mutating func admit(_ namespace: String, now: Double) -> Bool {
            if namespaces[namespace] != nil { return true }
            if namespaces.count >= DictionaryTraining.maxNamespaces {
                guard
                    let stale = namespaces.first(where: { _, record in
                        record.versions.isEmpty && !record.training
                            && (record.sampleStartedAt ?? now) < now - DictionaryTraining.abandonedSetSeconds
                    })?.key
                else { return false }
                heldBytes -= namespaces[stale]?.sampleBytes ?? 0
                namespaces[stale] = nil
            }
            namespaces[namespace] = Shelved(sampleStartedAt: now)
            return true
        }

        /// The namespace's sample set, taken for training (its bytes held until training ends).
        mutating func takeSamples(of namespace: String) -> (samples: [[UInt8]], bytes: Int) {
            guard var record = namespaces[namespace] else { return ([], 0) }
            let taken = (record.samples, record.sampleBytes)
            record.trainingBytes = record.sampleBytes
            record.samples = []
            record.sampleBytes = 0
            record.sampleStartedAt = nil
            record.wanted = false
            record.training = true
            namespaces[namespace] = record
            return taken
        }

        /// The largest sample set of at least `minimumSamples` bodies, taken for training; nil
        /// when none has that many.
        mutating func takeLargestSet() -> (namespace: String, samples: [[UInt8]], bytes: Int)? {
            guard
                let largest = namespaces.filter({ !$0.value.training && $0.value.samples.count >= DictionaryTraining.minimumSamples })
                    .max(by: { $0.value.sampleBytes < $1.value.sampleBytes })?.key
            else { return nil }
            let (samples, bytes) = takeSamples(of: largest)
            return (largest, samples, bytes)
        }

        /// Every sample set not being trained from, dropped (dictionaries turned off).
        mutating func dropSamples() {
            for name in namespaces.keys {
                heldBytes -= namespaces[name]!.sampleBytes
                namespaces[name]!.samples = []
                namespaces[name]!.sampleBytes = 0
                namespaces[name]!.sampleStartedAt = nil
                namespaces[name]!.wanted = false
            }
        }
    }

    /// What `/cache/namespaces` shows of a namespace's dictionaries.
    public struct Figures: Sendable, Equatable {
        /// The dictionary bodies are compressed with now; nil: none yet.
        public var id: UInt32?
        public var trainedAt: Double?
        public var bytes: Int
        /// Dictionaries this instance holds for reading what they compressed.
        public var versions: Int
        /// Bodies gathered for the next one.
        public var samples: Int
        public var training: Bool
    }

    /// What asking for a dictionary now did.
    public enum Request: Sendable, Equatable {
        /// Training started from `samples` bodies.
        case training(samples: Int)
        /// One was already being trained.
        case alreadyTraining
        /// Samples are being gathered; training starts when `needed` are in.
        case sampling(samples: Int, needed: Int)
        /// Dictionaries are off (`--compress-dictionary-samples 0`).
        case off
        /// `maxNamespaces` namespaces already sample or hold dictionaries.
        case tooManyNamespaces
    }

    /// All sample sets together hold at most this many bytes; bodies past it are not sampled.
    public static let maxHeldSampleBytes = 32 << 20
    /// Ids a frame named that the store did not have (retired, or lost), remembered so that
    /// they are not asked for again on every read: for `unknownIDSeconds` (a dictionary put back
    /// is found again), and forgotten all at once past `maxUnknownIDs`.
    static let maxUnknownIDs = 4_096
    static let unknownIDSeconds: Double = 60

    private let codec: any BodyCodec
    private let store: any DictionaryStore
    private let logger: Logger
    private let shelf = Locked(Shelf())
    /// Unknown ids, with when they were found missing.
    private let unknown = Locked<[UInt32: Double]>([:])
    private let trainedCount = Atomic<Int>(0)
    private static let trainers = DispatchQueue(label: "larder.dictionary-training", qos: .utility)

    init(codec: any BodyCodec, store: any DictionaryStore, logger: Logger) {
        self.codec = codec
        self.store = store
        self.logger = logger
        load()
    }

    /// The stored dictionaries registered; each namespace's newest compresses.
    private func load() {
        let byNamespace = Dictionary(grouping: store.loadDictionaries(), by: \.namespace)
        shelf.withLock { shelf in
            for (name, dictionaries) in byNamespace {
                var record = Shelved()
                for dictionary in dictionaries.sorted(by: { $0.trainedAt < $1.trainedAt }).suffix(DictionaryTraining.keptVersions)
                where codec.register(dictionary) {
                    record.versions.append(dictionary.id)
                    record.trainedAt = dictionary.trainedAt
                    record.bytes = dictionary.bytes.count
                }
                if !record.versions.isEmpty { shelf.namespaces[name] = record }
            }
        }
    }

    /// The dictionary to compress a body of `namespace` with (nil: none yet). When `sampling`
    /// (a new body, not one stored again) and the namespace is gathering a set, the body joins
    /// it; a full set is trained from in the background.
    func dictionaryToCompress(
        _ namespace: String, offering body: [UInt8], sampling: Bool, rules: DictionaryTraining, now: Double
    ) -> UInt32? {
        guard !rules.isOff else {
            shelf.withLock { shelf in
                if shelf.heldBytes > 0 { shelf.dropSamples() }
            }
            return nil
        }
        guard sampling else { return shelf.withLock { $0.namespaces[namespace]?.versions.last } }
        typealias TakenSet = (namespace: String, samples: [[UInt8]], bytes: Int)
        let (current, full) = shelf.withLock { shelf -> (UInt32?, TakenSet?) in
            let existing = shelf.namespaces[namespace]
            guard existing?.training != true, rules.samples(bodyCount: body.count),
                existing?.wanted == true || rules.wantsSamples(trainedAt: existing?.trainedAt, now: now)
            else { return (existing?.versions.last, nil) }
            // All sets together at their bound (many namespaces sampling at once): the largest
            // trains from what it has, which makes room.
            guard shelf.heldBytes + body.count <= Self.maxHeldSampleBytes else {
                return (existing?.versions.last, shelf.takeLargestSet())
            }
            guard shelf.admit(namespace, now: now) else { return (existing?.versions.last, nil) }
            var record = shelf.namespaces[namespace]!
            // A body that would take the set past its bytes makes it full as it is.
            guard DictionaryTraining.fits(body.count, in: record.sampleBytes) else {
                let (samples, bytes) = shelf.takeSamples(of: namespace)
                return (record.versions.last, (namespace, samples, bytes))
            }
            record.samples.append(body)
            record.sampleBytes += body.count
            record.sampleStartedAt = record.sampleStartedAt ?? now
            shelf.heldBytes += body.count
            shelf.namespaces[namespace] = record
            guard rules.isFull(count: record.samples.count) else { return (record.versions.last, nil) }
            let (samples, bytes) = shelf.takeSamples(of: namespace)
            return (record.versions.last, (namespace, samples, bytes))
        }
        if let full { train(full.namespace, from: full.samples, bytes: full.bytes, at: now, adopting: rules) }
        return current
    }

    /// Asks for a new dictionary for `namespace` now: trained from the samples held if there are
    /// at least `minimumSamples`, otherwise once `rules.samples` (at least that many) are in.
    public func request(_ namespace: String, rules: DictionaryTraining, now: Double) -> Request {
        guard !rules.isOff else { return .off }
        enum Outcome {
            case train([[UInt8]], Int)
            case answer(Request)
        }
        let outcome: Outcome = shelf.withLock { shelf in
            guard shelf.admit(namespace, now: now) else { return .answer(.tooManyNamespaces) }
            let record = shelf.namespaces[namespace]!
            if record.training { return .answer(.alreadyTraining) }
            if record.samples.count >= DictionaryTraining.minimumSamples {
                let (samples, bytes) = shelf.takeSamples(of: namespace)
                return .train(samples, bytes)
            }
            shelf.namespaces[namespace]!.wanted = true
            return .answer(.sampling(samples: record.samples.count, needed: max(DictionaryTraining.minimumSamples, rules.samples)))
        }
        switch outcome {
        case .answer(let answer): return answer
        case .train(let samples, let bytes):
            train(namespace, from: samples, bytes: bytes, at: now, adopting: nil)
            return .training(samples: samples.count)
        }
    }

    /// Trains a dictionary from `samples` off the event loops, keeps it in the store (which
    /// retires the namespace's versions beyond `keptVersions`) and registers it. `adopting`
    /// (automatic training, not an operator's): when another instance sharing the store trained
    /// one for the namespace that is newer than this instance's and not yet due for a refresh
    /// under those rules, that one is taken instead, so the instances of a deployment compress a
    /// namespace with one dictionary rather than one each.
    private func train(_ namespace: String, from samples: [[UInt8]], bytes: Int, at now: Double, adopting rules: DictionaryTraining?) {
        Self.trainers.async { [self] in
            var kept: BodyDictionary?
            var retired: [UInt32] = []
            var adopted = false
            if let rules, let newer = newerElsewhere(namespace, rules: rules, now: now) {
                kept = newer
                adopted = true
            } else {
                let id = UInt32.random(in: DictionaryTraining.ids)
                let capacity = DictionaryTraining.dictionaryBytes(sampleBytes: bytes)
                let previous = shelf.withLock { $0.namespaces[namespace]?.trainedAt }
                // Versions are ordered by when they were trained: a newer one is always later.
                let trainedAt = max(now, (previous ?? -.infinity).nextUp)
                // Registered only if the id is free here too; kept in the store before any frame
                // names it.
                if let trained = codec.train(samples: samples, capacity: capacity, id: id) {
                    let dictionary = BodyDictionary(id: id, namespace: namespace, trainedAt: trainedAt, bytes: trained)
                    if codec.register(dictionary) {
                        if let removed = store.saveDictionary(dictionary, keepingNewest: DictionaryTraining.keptVersions) {
                            kept = dictionary
                            retired = removed
                        } else {
                            codec.unregister(id)
                        }
                    }
                }
            }
            let dropped = finishTraining(namespace, kept: kept, retired: retired)
            (retired + dropped).forEach(codec.unregister)
            if kept != nil, !adopted { trainedCount.add(1, ordering: .relaxed) }
            if let kept {
                logger.info(
                    adopted ? "took another instance's compression dictionary" : "trained a compression dictionary",
                    metadata: [
                        "namespace": "\(namespace)", "dictionary": "\(kept.id)", "bytes": "\(kept.bytes.count)",
                        "samples": "\(samples.count)"
                    ])
            } else {
                // The namespace's next full sample set tries again.
                logger.warning(
                    "could not train or keep a compression dictionary",
                    metadata: ["namespace": "\(namespace)", "samples": "\(samples.count)"])
            }
        }
    }

    /// The namespace's newest dictionary in the store, registered, when another instance
    /// trained it after this instance's own and it is not yet due for a refresh; nil otherwise.
    private func newerElsewhere(_ namespace: String, rules: DictionaryTraining, now: Double) -> BodyDictionary? {
        let own = shelf.withLock { $0.namespaces[namespace]?.trainedAt }
        guard let newer = try? store.newestDictionary(of: namespace), newer.trainedAt > own ?? -.infinity,
            !rules.wantsSamples(trainedAt: newer.trainedAt, now: now), codec.register(newer)
        else { return nil }
        return newer
    }

    /// The training of `namespace`'s set over: `kept` (if any) compresses from now on, the
    /// set's bytes are no longer held. Returns the versions past `keptVersions` this instance
    /// no longer reads with.
    private func finishTraining(_ namespace: String, kept: BodyDictionary?, retired: [UInt32]) -> [UInt32] {
        shelf.withLock { shelf in
            var record = shelf.namespaces[namespace] ?? Shelved()
            shelf.heldBytes -= record.trainingBytes
            record.trainingBytes = 0
            record.training = false
            var dropped: [UInt32] = []
            if let kept {
                record.versions.removeAll { retired.contains($0) || $0 == kept.id }
                record.versions.append(kept.id)
                dropped = Array(record.versions.dropLast(DictionaryTraining.keptVersions))
                record.versions.removeFirst(dropped.count)
                record.trainedAt = kept.trainedAt
                record.bytes = kept.bytes.count
            }
            shelf.namespaces[namespace] = record
            return dropped
        }
    }

    /// Registers the dictionary `stored` names when this instance has not seen it (another
    /// instance trained it): loaded from the store, for reading. True when it registered one;
    /// false when `stored` needs none, or one already registered, or one the store does not
    /// have (retired: remembered, not asked for again) or could not be read now.
    func resolve(_ stored: [UInt8], now: Double) -> Bool {
        guard let id = codec.dictionaryID(of: stored), !codec.isRegistered(id) else { return false }
        guard unknown.withLock({ now - ($0[id] ?? -.infinity) >= Self.unknownIDSeconds }) else { return false }
        let found: BodyDictionary?
        do {
            found = try store.loadDictionary(id: id)
        } catch {
            return false
        }
        guard let dictionary = found, dictionary.id == id, codec.register(dictionary) else {
            unknown.withLock { ids in
                if ids.count >= Self.maxUnknownIDs { ids.removeAll() }
                ids[id] = now
            }
            return false
        }
        return true
    }

    /// Each namespace's dictionary figures.
    public func figures() -> [String: Figures] {
        shelf.withLock { shelf in
            shelf.namespaces.mapValues { record in
                Figures(
                    id: record.versions.last, trainedAt: record.trainedAt, bytes: record.bytes, versions: record.versions.count,
                    samples: record.samples.count, training: record.training)
            }
        }
    }

    /// Returns once the trainings started so far have ended.
    public func awaitTrainings() {
        Self.trainers.sync {}
    }

    /// Dictionaries this instance trained and kept since start.
    public var trained: Int { trainedCount.load(ordering: .relaxed) }
}
