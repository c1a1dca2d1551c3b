public import LarderCore

/// A validated request with its cache key derived.
/// (A class: prepared requests are remembered and handed around on every hit, and a reference
/// costs one retain where the struct's many fields cost one each.)
public final class PreparedFetch: Sendable {
    public let request: FetchRequest
    public let derived: CacheKeyBuilder.Derived

    public init(request: FetchRequest, derived: CacheKeyBuilder.Derived) {
        self.request = request
        self.derived = derived
    }
}
