// The compression dictionaries (BodyDictionaries) kept in Redis, so every instance sharing the
// store reads what any of them compressed: each dictionary under its own key, and one hash
// listing them (id → "trainedAt namespace"). No expiry: an entry may name its dictionary for as
// long as it lives. A dictionary Redis lost (evicted, flushed) makes the entries that need it
// read as misses, never as something else.

import LarderCore
public import LarderEngine

extension RedisCacheStore: DictionaryStore {
    var dictionaryIndexKey: String { "\(settings.prefix)dicts" }
    func dictionaryKey(_ id: UInt32) -> String { "\(settings.prefix)dict:\(id)" }

    public func loadDictionaries() -> [BodyDictionary] {
        guard let index = try? backend.run(["HGETALL", dictionaryIndexKey]).array else { return [] }
        var listed: [(id: UInt32, trainedAt: Double, namespace: String)] = []
        for position in stride(from: 0, to: index.count - 1, by: 2) {
            if let id = index[position].string.flatMap(UInt32.init), let about = index[position + 1].string.flatMap(Self.about) {
                listed.append((id, about.trainedAt, about.namespace))
            }
        }
        guard !listed.isEmpty,
            let contents = try? backend.run(listed.map { ["GET", dictionaryKey($0.id)].map { Array($0.utf8) } })
        else { return [] }
        return zip(listed, contents).compactMap { listed, content in
            content.bytes.map { BodyDictionary(id: listed.id, namespace: listed.namespace, trainedAt: listed.trainedAt, bytes: $0) }
        }
    }

    public func loadDictionary(id: UInt32) -> BodyDictionary? {
        guard DictionaryTraining.ids.contains(id),
            let replies = try? backend.run([
                ["HGET", dictionaryIndexKey, String(id)].map { Array($0.utf8) },
                ["GET", dictionaryKey(id)].map { Array($0.utf8) }
            ]),
            let about = replies[0].string.flatMap(Self.about), let bytes = replies[1].bytes
        else { return nil }
        return BodyDictionary(id: id, namespace: about.namespace, trainedAt: about.trainedAt, bytes: bytes)
    }

    public func saveDictionary(_ dictionary: BodyDictionary, retiring: [UInt32]) -> Bool {
        // The content first, only if the id is free; then the listing.
        guard
            let kept = try? backend.runWrites([
                [Array("SET".utf8), Array(dictionaryKey(dictionary.id).utf8), dictionary.bytes, Array("NX".utf8)]
            ]),
            kept[0].string == "OK"
        else { return false }
        var commands: [[[UInt8]]] = [
            ["HSET", dictionaryIndexKey, String(dictionary.id), "\(dictionary.trainedAt) \(dictionary.namespace)"].map { Array($0.utf8) }
        ]
        if !retiring.isEmpty {
            commands.append((["HDEL", dictionaryIndexKey] + retiring.map(String.init)).map { Array($0.utf8) })
            for id in retiring { commands.append(["DEL", dictionaryKey(id)].map { Array($0.utf8) }) }
        }
        return (try? backend.runWrites(commands)) != nil
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

extension RedisCacheStore {
    /// The newest listed for `namespace`: the listing read, one dictionary fetched.
    public func newestDictionary(of namespace: String) -> BodyDictionary? {
        guard let index = try? backend.run(["HGETALL", dictionaryIndexKey]).array else { return nil }
        var newest: (id: UInt32, trainedAt: Double)?
        for position in stride(from: 0, to: index.count - 1, by: 2) {
            guard let id = index[position].string.flatMap(UInt32.init),
                let about = index[position + 1].string.flatMap(Self.about), about.namespace == namespace,
                about.trainedAt > newest?.trainedAt ?? -.infinity
            else { continue }
            newest = (id, about.trainedAt)
        }
        return newest.flatMap { loadDictionary(id: $0.id) }
    }
}
