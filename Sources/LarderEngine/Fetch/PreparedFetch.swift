public import LarderCore

/// A validated request with its cache key derived.
/// (A class: prepared requests are remembered and handed around on every hit, and a reference
/// costs one retain where the struct's many fields cost one each.)
public final class PreparedFetch: Sendable {
    public let request: FetchRequest
    public let derived: CacheKeyBuilder.Derived
    /// The caller's request id and trace, sent upstream with every request made for it; nil for
    /// a prepared request not yet tied to a caller's (as the request memos keep them).
    public let identity: RequestIdentity?

    public init(request: FetchRequest, derived: CacheKeyBuilder.Derived, identity: RequestIdentity? = nil) {
        self.request = request
        self.derived = derived
        self.identity = identity
    }

    /// The same request, made for the caller `identity` names.
    public func identified(_ identity: RequestIdentity) -> PreparedFetch {
        PreparedFetch(request: request, derived: derived, identity: identity)
    }

    /// The same request, tied to no caller (what a request memo keeps).
    public var withoutIdentity: PreparedFetch {
        identity == nil ? self : PreparedFetch(request: request, derived: derived)
    }
}
