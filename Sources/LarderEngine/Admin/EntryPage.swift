/// One page of a listing, in row-key order; `nextCursor` continues after its last row (nil at
/// the end). Keyset pagination: rows added or removed meanwhile never make a later page skip
/// or repeat a row that was there all along.
public struct EntryPage: Sendable, Equatable {
    public var records: [EntryRecord] = []
    public var nextCursor: String?
    /// The store could not be read (a shared Redis out of reach): the page is not the store's.
    public var failed = false
    public init() {}
}
