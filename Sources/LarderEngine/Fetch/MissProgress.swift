// The course of one miss, decided without I/O. `RunningMiss` acts on each decision; the tests
// drive this alone (MissProgressTests).
//
// A miss leads a flight or waits on another's (coalescing). The leader's request goes upstream,
// conditionally when a stored entry has validators (RFC 9111 §4.3.1). A 304 answering those
// validators revalidates the stored entry (§4.3.4); if that entry is gone meanwhile, the request
// goes again without conditions. Any other response (a 304 to the caller's own conditions
// included) is stored or not and answers. A failure answers with a stale entry or the error.
// The caller may give up at any stage: a waiter then leaves its flight, a leader abandons it
// (the transfer goes on while others wait on it). The caller gets exactly one answer, the first
// of the landing's and the cancellation's.

struct MissProgress: Equatable, Sendable {
    enum Stage: Equatable, Sendable {
        /// Waiting on another request's flight.
        case waiting
        /// About to send its own request.
        case leading
        /// Its request is upstream; `conditional` when it carries the stored entry's validators.
        case sent(conditional: Bool)
        /// A 304 confirmed the stored entry, which is being refreshed and stored.
        case revalidating
        /// A response came: it is being stored (or not) before it answers.
        case storing
        /// Answered, or failed; nothing follows.
        case landed
    }

    /// Whether the caller has its answer.
    enum Caller: Equatable, Sendable {
        case expecting
        case answered
        case gaveUp
    }

    /// What a response means for the miss.
    enum Received: Equatable, Sendable {
        /// A 304 to the validators it sent: refresh the stored entry.
        case revalidate
        /// Anything else: store it if the rules allow, and answer with it.
        case store
    }

    /// What the caller's giving up asks of the flight.
    enum GivingUp: Equatable, Sendable {
        /// A waiter leaves its flight; the flight goes on for the others.
        case leaveFlight
        /// A leader abandons its flight: the transfer is aborted unless others wait on it.
        case abandonFlight
        /// Nothing new: the caller had its answer, or had given up already.
        case nothing
    }

    private(set) var stage: Stage
    private(set) var caller: Caller = .expecting

    init(leading: Bool) {
        stage = leading ? .leading : .waiting
    }

    /// The request goes upstream: the leader's first send, or a send without conditions after a
    /// 304 for an entry that is gone. A waiter whose flight landed without an answer for it
    /// starts a miss of its own instead.
    mutating func send(conditional: Bool) {
        assert(stage == .leading || stage == .revalidating, "sent from \(stage)")
        stage = .sent(conditional: conditional)
    }

    /// The upstream answered with `status`.
    mutating func received(status: Int) -> Received {
        guard case .sent(let conditional) = stage else {
            assertionFailure("a response while \(stage)")
            return .store
        }
        if conditional, status == 304 {
            stage = .revalidating
            return .revalidate
        }
        stage = .storing
        return .store
    }

    /// The miss ends (an answer, a failure, or its flight's landing for a waiter): true when the
    /// answer goes to the caller, false when the caller has had one (it gave up).
    mutating func land() -> Bool {
        stage = .landed
        guard caller == .expecting else { return false }
        caller = .answered
        return true
    }

    /// The caller gives up; it is answered `cancelled` unless it has its answer.
    mutating func giveUp() -> GivingUp {
        guard caller == .expecting else { return .nothing }
        caller = .gaveUp
        switch stage {
        case .waiting: return .leaveFlight
        case .leading, .sent, .revalidating, .storing: return .abandonFlight
        case .landed: return .nothing
        }
    }
}
