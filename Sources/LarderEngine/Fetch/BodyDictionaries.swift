// Each namespace's compression dictionaries: sampled from the bodies it stores, trained in the
// background when a sample set is full (DictionaryTraining decides when), kept in the store
// (DictionaryStore) and registered with the codec. A body stored compressed names its
// dictionary in its frame, so older versions stay readable until they are retired (the newest
// `keptVersions` are kept per namespace); a frame naming a dictionary this instance has not
// seen (another instance trained it, on a shared store) has it loaded from the store once.
//
// Touched on stores only (a compressed save), never on a hit from memory; a read from the store
// takes one lock to learn whether a dictionary is registered when its frame names one.

import Dispatch
public import LarderCore
import LarderSync
import Logging

public final class BodyDictionaries: Sendable {
    /// A namespace's dictionaries and the sample set gathered for its next one.
    struct Namespace {
        /// Ids this instance compresses with or retires, oldest first; the last compresses.
        var versions: [UInt32] = []
        var trainedAt: Double?
        var bytes = 0
        var samples: [[UInt8]] = []
        var sampleBytes = 0
        /// Asked for by an operator: gather a set now, whatever the dictionary's age.
        var wanted = false
        var training = false
    }

    /// Every namespace's, and the bytes all their sample sets hold.
    struct Shelf {
        var namespaces: [String: Namespace] = [:]
        var sampleBytes = 0

        /// `namespace`'s record, made if a new one may be (`maxNamespaces`).
        mutating func admit(_ namespace: String) -> Bool {
            if namespaces[namespace] != nil { return true }
            guard namespaces.count < DictionaryTraining.maxNamespaces else { return false }
            namespaces[namespace] = Namespace()
            return true
        }

        /// The namespace's sample set, taken for training.
        mutating func takeSamples(of namespace: String) -> (samples: [[UInt8]], bytes: Int) {
            guard var entry = namespaces[namespace] else { return ([], 0) }
            let taken = (entry.samples, entry.sampleBytes)
            sampleBytes -= entry.sampleBytes
            entry.samples = []
            entry.sampleBytes = 0
            entry.wanted = false
            entry.training = true
            namespaces[namespace] = entry
            return taken
        }
    }

    /// What `/cache/namespaces` shows of a namespace's dictionaries.
    public struct Figures: Sendable, Equatable {
        /// The dictionary bodies are compressed with now; nil: none yet.
        public var id: UInt32?
        public var trainedAt: Double?
        public var bytes: Int
        /// Dictionaries kept for reading what they compressed.
        public var versions: Int
        /// Bodies gathered for the next one.
        public var samples: Int
        public var training: Bool
    }

    /// What asking for a dictionary now did.
    public enum Request: Sendable, Equatable {
        /// Training started from `samples` bodies (0: one was already training).
        case training(samples: Int)
        /// Samples are being gathered; training starts when `needed` are in.
        case sampling(samples: Int, needed: Int)
        /// Dictionaries are off, or as many namespaces as may have them already do.
        case unavailable(String)
    }

    /// All sample sets together hold at most this many bytes; bodies past it are not sampled.
    public static let maxHeldSampleBytes = 32 << 20

    private let codec: any BodyCodec
    private let store: any DictionaryStore
    private let logger: Logger
    private let shelf = Locked(Shelf())
    /// Ids a frame named that the store did not have (retired): not asked for again.
    private let unknown = Locked<Set<UInt32>>([])
    private let counts = Locked((trained: 0, failed: 0))
    private static let trainers = DispatchQueue(label: "larder.dictionary-training", qos: .utility)

    init(codec: any BodyCodec, store: any DictionaryStore, logger: Logger) {
        self.codec = codec
        self.store = store
        self.logger = logger
        load()
    }

    /// The stored dictionaries, the newest `keptVersions` of each namespace registered; the
    /// newest compresses.
    private func load() {
        let byNamespace = Dictionary(grouping: store.loadDictionaries(), by: \.namespace)
        shelf.withLock { shelf in
            for (name, dictionaries) in byNamespace {
                var namespace = Namespace()
                for dictionary in dictionaries.sorted(by: { $0.trainedAt < $1.trainedAt }).suffix(DictionaryTraining.keptVersions)
                where codec.register(dictionary) {
                    namespace.versions.append(dictionary.id)
                    namespace.trainedAt = dictionary.trainedAt
                    namespace.bytes = dictionary.bytes.count
                }
                if !namespace.versions.isEmpty { shelf.namespaces[name] = namespace }
            }
        }
    }

    /// The dictionary to compress a body of `namespace` with (nil: none yet), the body taken
    /// into the namespace's sample set if it is gathering one and `sampling` (a body stored
    /// again is not sampled again); a full set is trained from in the background.
    func dictionary(
        for namespace: String, body: [UInt8], sampling: Bool, rules: DictionaryTraining, now: Double
    ) -> UInt32? {
        guard !rules.isOff else { return nil }
        guard sampling else { return shelf.withLock { $0.namespaces[namespace]?.versions.last } }
        let (current, full) = shelf.withLock { shelf -> (UInt32?, (samples: [[UInt8]], bytes: Int)?) in
            let existing = shelf.namespaces[namespace]
            guard existing?.training != true, rules.samples(bodyCount: body.count),
                existing?.wanted == true || rules.wantsSamples(trainedAt: existing?.trainedAt, now: now),
                shelf.sampleBytes + body.count <= Self.maxHeldSampleBytes, shelf.admit(namespace)
            else { return (existing?.versions.last, nil) }
            shelf.namespaces[namespace]!.samples.append(body)
            shelf.namespaces[namespace]!.sampleBytes += body.count
            shelf.sampleBytes += body.count
            let entry = shelf.namespaces[namespace]!
            guard rules.isFull(count: entry.samples.count, bytes: entry.sampleBytes) else { return (entry.versions.last, nil) }
            return (entry.versions.last, shelf.takeSamples(of: namespace))
        }
        if let full { train(namespace, from: full.samples, bytes: full.bytes, at: now, adopting: true) }
        return current
    }

    /// Asks for a new dictionary for `namespace` now: trained from the samples held if there are
    /// at least `minimumSamples`, otherwise once `rules.samples` (at least that many) are in.
    public func request(_ namespace: String, rules: DictionaryTraining, now: Double) -> Request {
        guard !rules.isOff else { return .unavailable("dictionaries are off (--compress-dictionary-samples 0)") }
        enum Outcome {
            case train([[UInt8]], Int)
            case answer(Request)
        }
        let outcome: Outcome = shelf.withLock { shelf in
            guard shelf.admit(namespace) else {
                return .answer(.unavailable("\(DictionaryTraining.maxNamespaces) namespaces already have dictionaries"))
            }
            let entry = shelf.namespaces[namespace]!
            if entry.training { return .answer(.training(samples: 0)) }
            if entry.samples.count >= DictionaryTraining.minimumSamples {
                let (samples, bytes) = shelf.takeSamples(of: namespace)
                return .train(samples, bytes)
            }
            shelf.namespaces[namespace]!.wanted = true
            return .answer(.sampling(samples: entry.samples.count, needed: max(DictionaryTraining.minimumSamples, rules.samples)))
        }
        switch outcome {
        case .answer(let answer): return answer
        case .train(let samples, let bytes):
            train(namespace, from: samples, bytes: bytes, at: now, adopting: false)
            return .training(samples: samples.count)
        }
    }

    /// Trains a dictionary from `samples` off the event loops, keeps it in the store and
    /// registers it; the namespace's versions beyond `keptVersions` retire. `adopting`: when
    /// another instance sharing the store trained one for the namespace that is newer than this
    /// instance's and not yet due for a refresh, that one is taken instead, so the instances of a
    /// deployment compress a namespace with one dictionary rather than one each.
    private func train(_ namespace: String, from samples: [[UInt8]], bytes: Int, at now: Double, adopting: Bool) {
        Self.trainers.async { [self] in
            if adopting, adoptNewer(namespace, now: now) { return }
            let id = UInt32.random(in: DictionaryTraining.ids)
            let capacity = DictionaryTraining.dictionaryBytes(sampleBytes: bytes)
            var kept: BodyDictionary?
            var retired: [UInt32] = []
            if let trained = codec.train(samples: samples, capacity: capacity, id: id) {
                let (retiring, previous) = shelf.withLock { shelf in
                    let entry = shelf.namespaces[namespace]
                    return (Array((entry?.versions ?? []).dropLast(DictionaryTraining.keptVersions - 1)), entry?.trainedAt)
                }
                // Versions are ordered by when they were trained: a newer one is always later.
                let trainedAt = max(now, (previous ?? -.infinity).nextUp)
                let dictionary = BodyDictionary(id: id, namespace: namespace, trainedAt: trainedAt, bytes: trained)
                // Kept in the store before any frame names it.
                if codec.register(dictionary), store.saveDictionary(dictionary, retiring: retiring) {
                    kept = dictionary
                    retired = retiring
                    retiring.forEach(codec.unregister)
                } else {
                    codec.unregister(id)
                }
            }
            shelf.withLock { shelf in
                var entry = shelf.namespaces[namespace] ?? Namespace()
                entry.training = false
                if let kept {
                    entry.versions.removeAll(where: retired.contains)
                    entry.versions.append(kept.id)
                    entry.trainedAt = kept.trainedAt
                    entry.bytes = kept.bytes.count
                }
                shelf.namespaces[namespace] = entry
            }
            counts.withLock { counts in
                if kept == nil { counts.failed += 1 } else { counts.trained += 1 }
            }
            if let kept {
                logger.info(
                    "trained a compression dictionary",
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

    /// Takes the namespace's newest dictionary in the store when another instance trained it
    /// after this instance's own and it is not yet due for a refresh; whether it did.
    private func adoptNewer(_ namespace: String, now: Double) -> Bool {
        let own = shelf.withLock { $0.namespaces[namespace]?.trainedAt }
        guard let newer = store.newestDictionary(of: namespace), newer.trainedAt > own ?? -.infinity,
            now - newer.trainedAt < DictionaryTraining.refreshSeconds, codec.register(newer)
        else { return false }
        let dropped: [UInt32] = shelf.withLock { shelf in
            var entry = shelf.namespaces[namespace] ?? Namespace()
            entry.training = false
            entry.versions.removeAll { $0 == newer.id }
            entry.versions.append(newer.id)
            let dropped = Array(entry.versions.dropLast(DictionaryTraining.keptVersions))
            entry.versions.removeFirst(dropped.count)
            entry.trainedAt = newer.trainedAt
            entry.bytes = newer.bytes.count
            shelf.namespaces[namespace] = entry
            return dropped
        }
        dropped.forEach(codec.unregister)
        logger.info(
            "took another instance's compression dictionary", metadata: ["namespace": "\(namespace)", "dictionary": "\(newer.id)"])
        return true
    }

    /// Registers the dictionary `stored` names when this instance has not seen it (another
    /// instance trained it): loaded from the store, for reading. True when it registered one;
    /// false when `stored` needs none, or one already registered, or one the store does not have
    /// (retired).
    func resolve(_ stored: [UInt8]) -> Bool {
        guard let id = codec.dictionaryID(of: stored), !codec.isRegistered(id) else { return false }
        guard !unknown.withLock({ $0.contains(id) }) else { return false }
        guard let dictionary = store.loadDictionary(id: id), dictionary.id == id, codec.register(dictionary) else {
            unknown.withLock { ids in
                if ids.count >= 4_096 { ids.removeAll() }
                ids.insert(id)
            }
            return false
        }
        return true
    }

    /// Each namespace's dictionary figures.
    public func figures() -> [String: Figures] {
        shelf.withLock { shelf in
            shelf.namespaces.mapValues { entry in
                Figures(
                    id: entry.versions.last, trainedAt: entry.trainedAt, bytes: entry.bytes, versions: entry.versions.count,
                    samples: entry.samples.count, training: entry.training)
            }
        }
    }

    /// Returns once the trainings started so far have ended.
    public func awaitTrainings() {
        Self.trainers.sync {}
    }

    /// Dictionaries trained since start, and trainings that kept none.
    public var trainings: (trained: Int, failed: Int) { counts.withLock { $0 } }
}
