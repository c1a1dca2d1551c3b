// The bounds all drivers of one upstream share (CurlUpstream runs one driver per HTTP event
// loop and one on its own thread): transfers running at once, and bytes of bodies being
// received. One lock; a driver that cannot have a slot or budget now is registered, in the same
// locked step, to be woken when some is released, so no release can be missed.

import LarderSync

final class TransferBounds: Sendable {
    private struct State {
        var running = 0
        var usedBytes = 0
        /// The most `usedBytes` ever was.
        var peakBytes = 0
        /// Sequence numbers of the transfers running, to know the oldest.
        var active: Set<Int> = []
        var oldest = Int.max
        var nextSequence = 0
        /// Drivers with exchanges waiting for a slot, and with transfers paused for budget.
        var slotWaiters: [ObjectIdentifier: @Sendable () -> Void] = [:]
        var budgetWaiters: [ObjectIdentifier: @Sendable () -> Void] = [:]
    }

    let maxTransfers: Int
    let maxBodyBytes: Int
    private let state = Locked(State())
    /// Counts releases of budget and changes of the oldest transfer: a driver with paused
    /// transfers retries them when it changed since it last looked.
    let budgetGeneration = Atomic<Int>(0)

    init(maxTransfers: Int, maxBodyBytes: Int) {
        self.maxTransfers = max(1, maxTransfers)
        self.maxBodyBytes = max(1, maxBodyBytes)
    }

    /// The most body bytes that were ever in flight at once: at most `maxBodyBytes` plus the
    /// oldest transfer's body.
    var peakBodyBytes: Int { state.withLock { $0.peakBytes } }

    /// A slot for a new transfer and its sequence number, or nil when all are taken (then
    /// `waiter` is woken when one is released).
    func acquireSlot(waiter: ObjectIdentifier, wake: @escaping @Sendable () -> Void) -> Int? {
        state.withLock { state -> Int? in
            guard state.running < maxTransfers else {
                state.slotWaiters[waiter] = wake
                return nil
            }
            state.running += 1
            state.nextSequence += 1
            let sequence = state.nextSequence
            state.active.insert(sequence)
            if state.active.count == 1 { state.oldest = sequence }
            return sequence
        }
    }

    /// Whether the transfer `sequence` may take `count` more body bytes now (it takes them if
    /// so). The oldest transfer always may, so that one always progresses; any other that may
    /// not registers `waiter` to be woken when budget is released or the oldest changes.
    func take(_ count: Int, sequence: Int, waiter: ObjectIdentifier, wake: @escaping @Sendable () -> Void) -> Bool {
        state.withLock { state -> Bool in
            guard state.usedBytes + count <= maxBodyBytes || sequence <= state.oldest else {
                state.budgetWaiters[waiter] = wake
                return false
            }
            state.usedBytes += count
            state.peakBytes = max(state.peakBytes, state.usedBytes)
            return true
        }
    }

    /// A transfer ended: its slot and the `accounted` bytes it held are free. Wakes the drivers
    /// that waited for either (outside the lock).
    func release(sequence: Int, accounted: Int) {
        let wakes = state.withLock { state -> [@Sendable () -> Void] in
            state.running -= 1
            state.usedBytes -= accounted
            state.active.remove(sequence)
            if sequence == state.oldest { state.oldest = state.active.min() ?? Int.max }
            var wakes = Array(state.slotWaiters.values)
            state.slotWaiters.removeAll()
            if !state.budgetWaiters.isEmpty {
                wakes += state.budgetWaiters.values
                state.budgetWaiters.removeAll()
            }
            return wakes
        }
        budgetGeneration.add(1, ordering: .releasing)
        for wake in wakes { wake() }
    }
}
