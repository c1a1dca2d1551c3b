// The compression dictionaries (BodyDictionaries) kept in Redis, so every instance sharing the
// store reads what any of them compressed: each dictionary under its own key, sealed
// (DictionarySeal), and one hash listing them (id → "trainedAt namespace"). No expiry: an entry
// may name its dictionary for as long as it lives. A dictionary Redis lost (evicted, flushed)
// or that does not authenticate makes the entries that need it misses, never anything else.

import Crypto
import LarderCore
public import LarderEngine

extension RedisCacheStore: DictionaryStore {
    var dictionaryIndexKey: String { "\(settings.prefix)dicts" }
    func dictionaryKey(_ id: UInt32) -> String { "\(settings.prefix)dict:\(id)" }

    public func loadDictionaries() -> [BodyDictionary] {
        guard let listed = try? listedDictionaries(), !listed.isEmpty,
            let contents = try? backend.run(listed.map { ["GET", dictionaryKey($0.id)].map { Array($0.utf8) } })
        else { return [] }
        return zip(listed, contents).compactMap { listed, content in
            content.bytes.flatMap { dictionarySeal.opened($0, id: listed.id) }.map {
                BodyDictionary(id: listed.id, namespace: listed.namespace, trainedAt: listed.trainedAt, bytes: $0)
            }
        }
    }

    public func loadDictionary(id: UInt32) throws -> BodyDictionary? {
        guard DictionaryTraining.ids.contains(id) else { return nil }
        let replies = try backend.run([
            ["HGET", dictionaryIndexKey, String(id)].map { Array($0.utf8) },
            ["GET", dictionaryKey(id)].map { Array($0.utf8) }
        ])
        guard let about = replies[0].string.flatMap(Self.about), let sealed = replies[1].bytes,
            let bytes = dictionarySeal.opened(sealed, id: id)
        else { return nil }
        return BodyDictionary(id: id, namespace: about.namespace, trainedAt: about.trainedAt, bytes: bytes)
    }

    public func newestDictionary(of namespace: String) throws -> BodyDictionary? {
        guard let newest = try listedDictionaries().filter({ $0.namespace == namespace }).max(by: { $0.trainedAt < $1.trainedAt })
        else { return nil }
        return try loadDictionary(id: newest.id)
    }

    public func saveDictionary(_ dictionary: BodyDictionary, keepingNewest: Int) -> [UInt32]? {
        // The content first, only if the id is free; then the listing; then what it retires.
        guard
            let kept = try? backend.runWrites([
                [
                    Array("SET".utf8), Array(dictionaryKey(dictionary.id).utf8),
                    dictionarySeal.sealed(dictionary.bytes, id: dictionary.id), Array("NX".utf8)
                ]
            ]),
            kept[0].string == "OK",
            (try? backend.runWrites([
                ["HSET", dictionaryIndexKey, String(dictionary.id), "\(dictionary.trainedAt) \(dictionary.namespace)"]
                    .map { Array($0.utf8) }
            ])) != nil
        else { return nil }
        guard let listed = try? listedDictionaries() else { return [] }
        let retiring = listed.filter { $0.namespace == dictionary.namespace }.sorted { $0.trainedAt > $1.trainedAt }
            .dropFirst(keepingNewest).map(\.id)
        guard !retiring.isEmpty else { return [] }
        var commands: [[[UInt8]]] = [(["HDEL", dictionaryIndexKey] + retiring.map(String.init)).map { Array($0.utf8) }]
        for id in retiring { commands.append(["DEL", dictionaryKey(id)].map { Array($0.utf8) }) }
        return (try? backend.runWrites(commands)) != nil ? retiring : []
    }

    /// The listing, its entries as Larder writes them (others are left out).
    private func listedDictionaries() throws -> [(id: UInt32, trainedAt: Double, namespace: String)] {
        let index = try backend.run(["HGETALL", dictionaryIndexKey]).array
        var listed: [(id: UInt32, trainedAt: Double, namespace: String)] = []
        for position in stride(from: 0, to: index.count - 1, by: 2) {
            if let id = index[position].string.flatMap(UInt32.init), DictionaryTraining.ids.contains(id),
                let about = index[position + 1].string.flatMap(Self.about)
            {
                listed.append((id, about.trainedAt, about.namespace))
            }
        }
        return listed
    }

    /// A listing's value, "trainedAt namespace"; nil when it is not one Larder wrote.
    static func about(_ value: String) -> (trainedAt: Double, namespace: String)? {
        let parts = value.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, let trainedAt = Double(parts[0]), trainedAt.isFinite,
            parts[1].utf8.count <= maxNamespaceBytes
        else { return nil }
        return (trainedAt, String(parts[1]))
    }
}

/// A dictionary's bytes with an HMAC-SHA-256 of its id and bytes, under a key derived (HKDF)
/// from the instance secret for this one purpose: a writer to Redis without the secret cannot
/// put another dictionary under an id that stored frames name.
struct DictionarySeal: Sendable {
    private let keyed: EntryCodec.KeyedHMAC
    static let tagBytes = 32

    init(secret: [UInt8]) {
        let key = HKDF<SHA256>.deriveKey(
            inputKeyMaterial: SymmetricKey(data: secret), info: Array("larder-redis-dictionaries/1".utf8), outputByteCount: 32)
        keyed = EntryCodec.KeyedHMAC(hmac: HMAC<SHA256>(key: key))
    }

    func sealed(_ bytes: [UInt8], id: UInt32) -> [UInt8] {
        bytes + tag(bytes[...], id: id)
    }

    /// The bytes `sealed` sealed under `id`; nil when `value` does not authenticate.
    func opened(_ value: [UInt8], id: UInt32) -> [UInt8]? {
        guard value.count > Self.tagBytes else { return nil }
        let end = value.count - Self.tagBytes
        // `==` on an authentication code compares in constant time.
        guard tag(value[..<end], id: id) == value[end...] else { return nil }
        return Array(value[..<end])
    }

    private func tag(_ bytes: ArraySlice<UInt8>, id: UInt32) -> HashedAuthenticationCode<SHA256> {
        var hmac = keyed.hmac
        hmac.update(data: (0..<4).map { UInt8(truncatingIfNeeded: id >> (8 * $0)) })
        hmac.update(data: bytes)
        return hmac.finalize()
    }
}
