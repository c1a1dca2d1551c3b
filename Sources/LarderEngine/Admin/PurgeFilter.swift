/// Which entries a purge removes. Conditions combine with AND; `all` stands alone.
public struct PurgeFilter: Sendable, Equatable {
    public var namespace: String?
    /// The entry's URL, as requested, starts with this.
    public var urlPrefix: String?
    /// The URL's host (lower-case, any port).
    public var host: String?
    /// Stored before this time (seconds since 1970).
    public var storedBefore: Double?
    /// Stored under a version lower than this.
    public var versionBelow: Int64?
    /// Past freshness and every stale window at this time.
    public var expiredAt: Double?
    /// Normalised URLs (UpstreamURL.keyString()): their entries in every namespace.
    public var urls: [String]?
    /// Entries carrying any of these tags.
    public var tags: [String]?
    /// Under any version but this one (a namespace's retired entries).
    public var versionOtherThan: Int64?
    /// Listing only: the response status, and still within freshness or a stale window at this time.
    public var status: Int?
    public var notExpiredAt: Double?
    public var all = false
    /// Soft: the entries matched are marked stale at this time rather than removed (their
    /// validators revalidate them, their stale windows still answer); nil: removed.
    public var softAt: Double?

    public init() {}

    /// A soft purge of the entries carrying any of `tags`, at `time`.
    public init(markingStale tags: [String], at time: Double) {
        self.tags = tags
        self.softAt = time
    }

    /// No condition and not `all`: selects nothing.
    public var isEmpty: Bool { hasNoConditions && !all }

    /// No condition set (`all` aside).
    var hasNoConditions: Bool {
        namespace == nil && urlPrefix == nil && host == nil && storedBefore == nil && versionBelow == nil && expiredAt == nil
            && urls == nil && tags == nil && versionOtherThan == nil && status == nil && notExpiredAt == nil
    }
}

extension PurgeFilter {
    /// Whether `entry` is one this filter selects: the same rules the SQLite store applies in
    /// SQL, for stores that filter in memory (Redis).
    public func matches(_ entry: StoredEntry) -> Bool {
        if hasNoConditions { return all }
        let freshness = entry.freshness
        let end = freshness.staleUntil
        if let namespace, entry.namespace != namespace { return false }
        // Prefixes by code points, as SQL's substr compares (hasPrefix compares characters).
        func starts(_ text: String, with prefix: String) -> Bool { text.unicodeScalars.starts(with: prefix.unicodeScalars) }
        if let urlPrefix, !starts(entry.url, with: urlPrefix) { return false }
        if let host {
            let lower = host.lowercased()
            let hostMatches = ["http", "https"].contains { scheme in
                ["/", ":"].contains { starts(entry.urlKey, with: "\(scheme)://\(lower)\($0)") }
            }
            if !hostMatches { return false }
        }
        if let storedBefore, !(freshness.storedAt < storedBefore) { return false }
        if let versionBelow, !(freshness.version < versionBelow) { return false }
        if let urls, !urls.contains(entry.urlKey) { return false }
        if let tags, !entry.tags.contains(where: tags.contains) { return false }
        if let versionOtherThan, freshness.version == versionOtherThan { return false }
        if let status, entry.status != status { return false }
        if let expiredAt, !(end <= expiredAt) { return false }
        if let notExpiredAt, !(end > notExpiredAt) { return false }
        return true
    }
}
