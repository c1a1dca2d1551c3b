/// What a store's admission policy did since start (stores with an S3-FIFO capacity; see
/// docs/api.md, "Admission and eviction").
public struct AdmissionFigures: Sendable, Equatable {
    /// Entries written to the database: at once, or when asked for again while held.
    public var admitted = 0
    /// New entries that waited in memory for proof of reuse.
    public var held = 0
    /// Held entries that left without being written: the disk writes saved.
    public var rejected = 0
    /// Entries moved from the small queue to the main one (asked for again there).
    public var promoted = 0
    /// Entries that went straight to the main queue because their key was in the ghost list.
    public var ghostHits = 0
    public var evictedFromSmall = 0
    public var evictedFromMain = 0
    /// Main-queue entries sent round again because they were asked for.
    public var reinserted = 0
    /// Entries and bytes held in memory now.
    public var heldEntriesNow = 0
    public var heldBytesNow = 0
    public init() {}
}
