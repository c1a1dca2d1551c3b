// Bodies compressed at rest (CompressionRules decides which): the codec the engine stores them
// with and makes them whole again through, and the dictionaries it may compress with
// (DictionaryTraining, BodyDictionaries). zstd in LarderZstd; the engine knows only this.

/// How a stored body is kept. The raw values are stored (a SQLite column, a Redis value's
/// field): never renumbered.
public enum BodyCoding: Int, Sendable {
    /// As the origin sent it.
    case identity = 0
    /// One zstd frame that records the body's size, and the id of the dictionary it was
    /// compressed with, if any.
    case zstd = 1
}

/// Thread-safe: called from every event loop and the store's threads at once.
public protocol BodyCodec: Sendable {
    /// The coding `compress` produces.
    var coding: BodyCoding { get }
    /// `body` compressed, with the registered dictionary `dictionary` when one is named; nil
    /// when it cannot be (or that dictionary is not registered).
    func compress(_ body: [UInt8], dictionary: UInt32?) -> [UInt8]?
    /// A body `compress` made, whole again; nil when `stored` is not one (damaged), needs a
    /// dictionary not registered, or would be larger than `maxBytes`.
    func decompress(_ stored: [UInt8], maxBytes: Int) -> [UInt8]?
    /// The id of the dictionary `stored` was compressed with; nil: none.
    func dictionaryID(of stored: [UInt8]) -> UInt32?
    /// Makes `dictionary` usable by `compress` and `decompress`; false when its bytes are not
    /// a dictionary of this codec carrying its id, or another dictionary has that id here.
    func register(_ dictionary: BodyDictionary) -> Bool
    /// Whether a dictionary with this id is registered.
    func isRegistered(_ id: UInt32) -> Bool
    /// Forgets a dictionary: frames that need it no longer decompress.
    func unregister(_ id: UInt32)
    /// A dictionary of at most `capacity` bytes trained from `samples`, carrying `id`; nil when
    /// the samples teach nothing (too few, or too unlike).
    func train(samples: [[UInt8]], capacity: Int, id: UInt32) -> [UInt8]?
}

extension BodyCodec {
    public func compress(_ body: [UInt8]) -> [UInt8]? { compress(body, dictionary: nil) }
}

// A codec without dictionaries: names none, registers none, trains none.
extension BodyCodec {
    public func dictionaryID(of stored: [UInt8]) -> UInt32? { nil }
    public func register(_ dictionary: BodyDictionary) -> Bool { false }
    public func isRegistered(_ id: UInt32) -> Bool { false }
    public func unregister(_ id: UInt32) {}
    public func train(samples: [[UInt8]], capacity: Int, id: UInt32) -> [UInt8]? { nil }
}
