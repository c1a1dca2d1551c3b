import LarderCore
import LarderSync

/// One miss on its way: the request, what its lookup found, the flight it leads (if any), how
/// its caller may give up, and the caller's reply, handed together through the upstream,
/// storing and coalescing steps. Its course is a `MissProgress`, which decides; this acts.
final class RunningMiss: Sendable {
    let prepared: PreparedFetch
    /// `.miss` or `.bypass`, as the lookup decided.
    let outcome: CacheOutcome
    /// The stored entry of the request's version: revalidated (RFC 9111 §4.3.1) or served on
    /// an upstream failure (RFC 5861 §4).
    let fallback: StoredEntry?
    /// Why it goes upstream (Cache-Status `fwd`).
    let forward: ForwardReason
    /// The flight this miss leads; nil for one that coalesces with nobody.
    let flight: FetchEngine.FlightToken?
    /// How its caller gives up; nil when it cannot. Every transfer sent for the miss is aborted
    /// on it, unless others wait on the flight.
    let cancellation: Cancellation?
    private let progress: Locked<MissProgress>
    /// Let go of once the caller is answered: whatever still holds this miss (a transfer going
    /// on for others, a cancellation handler) must not keep the caller's work alive.
    private let reply = CallbackSlot<CacheAnswer>()

    init(
        _ prepared: PreparedFetch, outcome: CacheOutcome, fallback: StoredEntry?, forward: ForwardReason,
        flight: FetchEngine.FlightToken?, cancellation: Cancellation? = nil, leading: Bool = true,
        reply: @escaping @Sendable (CacheAnswer) -> Void
    ) {
        self.prepared = prepared
        self.outcome = outcome
        self.forward = forward
        self.fallback = fallback
        self.flight = flight
        self.cancellation = cancellation
        self.progress = Locked(MissProgress(leading: leading))
        self.reply.set(reply)
    }

    var request: FetchRequest { prepared.request }

    /// The request goes upstream (see `MissProgress.send`).
    func sent(conditional: Bool) {
        progress.withLock { $0.send(conditional: conditional) }
    }

    func received(status: Int) -> MissProgress.Received {
        progress.withLock { $0.received(status: status) }
    }

    /// Whether the caller gave up before it had an answer.
    var callerGaveUp: Bool {
        progress.withLock { $0.caller == .gaveUp }
    }

    /// Answers the caller, unless it had its answer (it gave up).
    func answer(_ answer: CacheAnswer) {
        guard progress.withLock({ $0.land() }) else { return }
        reply.take()?(answer)
    }

    /// The caller gave up: `act` does what that asks of the flight (`MissProgress.giveUp`), then
    /// the caller is answered `cancelled`, unless it had its answer.
    func giveUp(_ act: (MissProgress.GivingUp) -> Void) {
        let givingUp = progress.withLock { $0.giveUp() }
        act(givingUp)
        if givingUp != .nothing { reply.take()?(.failed(FetchEngine.cancelledError)) }
    }
}
