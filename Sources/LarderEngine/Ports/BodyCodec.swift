// Bodies compressed at rest (CompressionRules decides which): the codec the engine stores them
// with and makes them whole again through. zstd in LarderZstd; the engine knows only this.

/// How a stored body is kept. The raw values are stored (a SQLite column, a Redis value's
/// field): never renumbered.
public enum BodyCoding: Int, Sendable {
    /// As the origin sent it.
    case identity = 0
    /// One zstd frame that records the body's size.
    case zstd = 1
}

/// Thread-safe: called from every event loop and the store's threads at once.
public protocol BodyCodec: Sendable {
    /// The coding `compress` produces.
    var coding: BodyCoding { get }
    /// `body` compressed; nil when it cannot be.
    func compress(_ body: [UInt8]) -> [UInt8]?
    /// A body `compress` made, whole again; nil when `stored` is not one (damaged) or would be
    /// larger than `maxBytes`.
    func decompress(_ stored: [UInt8], maxBytes: Int) -> [UInt8]?
}
