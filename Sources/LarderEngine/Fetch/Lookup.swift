public import LarderCore

/// What a lookup made of a request (`FetchEngine.lookup`): the answer the cache gives at once,
/// or a miss that only the upstream can answer.
public enum Lookup: Sendable {
    case answered(CacheAnswer)
    case miss(Miss)
}

/// A request the cache could not answer from what it holds, with what the lookup found that
/// the miss path needs (`FetchEngine.send`).
public struct Miss: Sendable {
    /// The request, its namespace's version resolved.
    let prepared: PreparedFetch
    /// `.miss` (the answer may be stored) or `.bypass` (never stored: no-store, an unsafe method).
    let outcome: CacheOutcome
    /// The stored entry of the request's version that the lookup could not serve: revalidated
    /// with its validators (RFC 9111 §4.3.1), or served if the upstream fails (RFC 5861 §4).
    let fallback: StoredEntry?
    /// Only a part is stored (RFC 9111 §3.4): the range fetcher asks for the rest.
    let partOnly: Bool
    /// Why it goes upstream (Cache-Status `fwd`).
    let forward: ForwardReason
    /// The flight table's landing count before the lookup (`FlightTable.landings`).
    let seenLandings: UInt64

    /// The cache key, for a caller that reports it before the answer comes.
    public var key: CacheKey { prepared.derived.key }
}
