// Compression dictionaries kept in memory, for tests.

import LarderSync

/// Dictionaries kept in memory: for tests, and the engine without a persistent store.
public final class MemoryDictionaryStore: DictionaryStore {
    private let dictionaries = Locked<[UInt32: BodyDictionary]>([:])

    public init() {}

    public func loadDictionaries() -> [BodyDictionary] {
        dictionaries.withLock { Array($0.values) }
    }

    public func loadDictionary(id: UInt32) -> BodyDictionary? {
        dictionaries.withLock { $0[id] }
    }

    public func saveDictionary(_ dictionary: BodyDictionary, keepingNewest: Int) -> [UInt32]? {
        dictionaries.withLock { kept in
            guard kept[dictionary.id] == nil else { return nil }
            kept[dictionary.id] = dictionary
            let retired = kept.values.filter { $0.namespace == dictionary.namespace }.sorted { $0.trainedAt > $1.trainedAt }
                .dropFirst(keepingNewest).map(\.id)
            for id in retired { kept[id] = nil }
            return retired
        }
    }

    public func newestDictionary(of namespace: String) -> BodyDictionary? {
        dictionaries.withLock { kept in kept.values.filter { $0.namespace == namespace }.max { $0.trainedAt < $1.trainedAt } }
    }
}
