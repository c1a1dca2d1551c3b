// Compression dictionaries (BodyDictionaries) and where they are kept: the SQLite database or
// Redis (the adapters), in memory for tests.

/// A dictionary trained from a namespace's bodies. Its id is written in every frame compressed
/// with it, so an entry names the dictionary it needs; ids are never reused.
public struct BodyDictionary: Sendable, Equatable {
    public let id: UInt32
    public let namespace: String
    /// When it was trained (seconds since 1970).
    public let trainedAt: Double
    public let bytes: [UInt8]

    public init(id: UInt32, namespace: String, trainedAt: Double, bytes: [UInt8]) {
        self.id = id
        self.namespace = namespace
        self.trainedAt = trainedAt
        self.bytes = bytes
    }
}

/// Where dictionaries live, so that an entry compressed with one stays readable after a
/// restart and on every instance sharing the store. Blocking; called off the event loops (at
/// start, from training) and when a stored frame names a dictionary this instance has not
/// seen (once per dictionary).
public protocol DictionaryStore: Sendable {
    /// Every dictionary kept (none when the store cannot be read now).
    func loadDictionaries() -> [BodyDictionary]
    /// One dictionary; nil when the store has none with that id (or none that authenticates);
    /// throws when the store cannot be read now.
    func loadDictionary(id: UInt32) throws -> BodyDictionary?
    /// Keeps `dictionary` unless its id is taken, then removes the dictionaries of its namespace
    /// older than its newest `keepingNewest`; returns the ids removed, or nil when it was not
    /// kept.
    func saveDictionary(_ dictionary: BodyDictionary, keepingNewest: Int) -> [UInt32]?
    /// The most recently trained dictionary of `namespace`, by any instance; nil: none.
    func newestDictionary(of namespace: String) throws -> BodyDictionary?
}
