// Versioned namespaces: each namespace has a current version, and a request that names no
// `cache.version` uses it. Entries are served only under the version they were stored with, so
// raising a namespace's version retires all of its entries in one step, without touching them
// (the store collects them afterwards, in the background).

import LarderCore
import LarderSync

public final class NamespaceVersions: Sendable {
    private let versions: Locked<[String: Int64]>
    /// False until some namespace has a version: until then a request costs one relaxed load.
    private let anySet: Atomic<Bool>

    public init(_ initial: [String: Int64] = [:]) {
        versions = Locked(initial)
        anySet = Atomic(!initial.isEmpty)
    }

    /// The namespace's current version; nil when it was never set (then 0).
    public func current(_ namespace: String) -> Int64? {
        guard anySet.load(ordering: .relaxed) else { return nil }
        return versions.withLock { $0[namespace] }
    }

    public var all: [String: Int64] { versions.withLock { $0 } }

    public func set(_ namespace: String, to version: Int64) {
        versions.withLock { $0[namespace] = version }
        anySet.store(true, ordering: .relaxed)
    }

    /// `prepared`, or a copy under its namespace's version when it names none and the
    /// namespace has one (the key does not depend on the version, so it is kept).
    func resolving(_ prepared: PreparedFetch) -> PreparedFetch {
        let options = prepared.request.cache
        guard !options.versionExplicit, let version = current(options.namespace), version != options.version else { return prepared }
        var request = prepared.request
        request.cache.version = version
        return PreparedFetch(request: request, derived: prepared.derived, identity: prepared.identity)
    }
}
