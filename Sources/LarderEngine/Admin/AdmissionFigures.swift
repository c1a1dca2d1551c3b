/// What a store's admission policy did since start (SQLite stores with a capacity: S3-FIFO; the
/// Redis store: `admitted`, `rejected` and `ghostHits` only, with the meanings docs/api.md gives
/// under "Admission and eviction").
public struct AdmissionFigures: Sendable, Equatable {
    /// Entries written to the database: at once, or when asked for again while held.
    public var admitted = 0
    /// New entries that waited in memory for proof of reuse.
    public var held = 0
    /// Held entries that left without being written: the disk writes saved.
    public var rejected = 0
    /// Entries moved from the small queue to the main one (asked for again there, or let in by
    /// the frequency sketch).
    public var promoted = 0
    /// Of those, entries not asked for again there that the frequency sketch let in: asked for
    /// more often lately than the main queue's next victim.
    public var admittedByFrequency = 0
    /// Entries asked for before that the sketch kept out of the main queue (its next victim was
    /// asked for about as often, or more); they left as the small queue's other entries do.
    public var refusedByFrequency = 0
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
