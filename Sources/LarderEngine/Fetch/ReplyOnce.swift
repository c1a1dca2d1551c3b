import LarderSync

/// Passes on the first answer only: a cancelled request is answered at once, and whatever its
/// work produces later is dropped.
final class ReplyOnce: Sendable {
    private let reply = CallbackSlot<CacheAnswer>()

    init(_ reply: @escaping @Sendable (CacheAnswer) -> Void) { self.reply.set(reply) }

    /// Calls the reply the first time, and lets go of it: whatever still holds this (a
    /// cancellation handler, a finished transfer) must not keep the caller's work alive.
    @Sendable func callAsFunction(_ answer: CacheAnswer) {
        reply.take()?(answer)
    }
}
