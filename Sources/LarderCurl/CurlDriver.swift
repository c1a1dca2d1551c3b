// One libcurl multi handle and the transfers on it, run by one thread: either a thread of its
// own (`runOnOwnThread`), or an HTTP event loop's, as that loop's companion (EventLoopCompanion):
// the loop polls the driver's sockets with its own and gives it a turn after every round.
//
// libcurl is driven by events (`curl_multi_socket_action`): it names the sockets to watch and
// when to handle its timeouts (callbacks), and each turn hands it only the sockets that had
// events, then its timeouts when due. `curl_multi_perform` would run every transfer on every
// turn, each with a poll(2) of its own socket, and `curl_multi_poll` rebuilds its descriptor
// list on every wait: both cost in proportion to all transfers, not to those with events.
//
// Only that thread touches the multi handle and the easy handles. Other threads reach the
// driver through its inbox (new exchanges, cancellations, stopping) under a lock and wake it:
// with an eventfd on its own thread, through the loop's wake-up otherwise. Exchanges the loop's
// own thread sends need no lock and no wake-up: the loop's turn follows.
//
// The bounds (transfers at once, body bytes in flight) are shared by all drivers of one
// upstream (TransferBounds); a driver that must wait for either is woken when some is released.
//
// One file of ~520 lines on purpose: the driver's state belongs to its one thread and is private
// to this type; split across files, it would have to become visible to the whole module.

import CCurl
import Dispatch
import Foundation
import LarderCore
import LarderEngine
import LarderSync
import Logging

#if canImport(Glibc)
    import Glibc
#endif

final class CurlDriver: EventLoopCompanion, @unchecked Sendable {
    // @unchecked Sendable: everything but `inbox`, `wakeUp` (set before the driver's thread
    // runs) and the atomics is used on the driver's thread only.

    let multi: UnsafeMutableRawPointer
    let settings: CurlSettings
    let bounds: TransferBounds
    private var identity: ObjectIdentifier { ObjectIdentifier(self) }
    private let inbox = Locked<Inbox>(Inbox())
    /// The inbox has something (set under its lock): a loop's turn with nothing to do skips it.
    private let mail = Atomic<Bool>(false)
    /// Exchanges sent from the driver's own thread (a loop's requests), started in its next turn.
    private var local: [Exchange] = []
    private var transfers: [UnsafeMutableRawPointer: Transfer] = [:]
    /// Exchanges waiting for a transfer slot, in arrival order.
    private var waiting: [Exchange] = []
    /// Transfers paused for lack of body budget, retried when some was released.
    private var paused: [Transfer] = []
    private var budgetSeen = 0
    /// Easy handles of finished transfers, reset and kept for the next ones (libcurl keeps
    /// connections in the multi handle's cache; reusing handles saves their set-up too). A reset
    /// handle still holds tens of KiB, so each driver keeps a bounded number: enough that busy
    /// loops rarely create handles, few enough that idle ones do not hold much memory.
    private var idleHandles: [UnsafeMutableRawPointer] = []
    private static let idleHandleLimit = 32
    /// Wakes the driver's thread (set once, before it runs).
    private var wakeUp: @Sendable () -> Void = {}
    /// The sockets libcurl asked to watch, with the poll(2) events it wants on each, in the
    /// order it first named them: events are handed back in that order, so transfers started
    /// first send first (in a dictionary's order a later request could overtake an earlier one).
    private var watched: [(socket: curl_socket_t, events: Int16)] = []
    /// When libcurl wants its timeouts handled (a monotonic instant in ns), if at all: from its
    /// timer callback, and asked again after each timeout handled (see `driveTransfers`).
    private var timerDue: UInt64?
    /// Sockets that had events in the last wait, with libcurl's CURL_CSELECT_ bits.
    private var ready: [(socket: curl_socket_t, bits: Int32)] = []
    /// The descriptors of one wait: the loop's, then the watched sockets (reused).
    private var pollSet: [pollfd] = []
    private let stopped = DispatchSemaphore(value: 0)

    private struct Inbox {
        var exchanges: [Exchange] = []
        var cancelled: [Exchange] = []
        /// Asked to stop: every exchange fails with `shutting_down`, now and from now on.
        var stopping = false
        var phase = Phase.idle
    }

    private enum Phase { case idle, running, finished }

    init(settings: CurlSettings, bounds: TransferBounds) {
        guard let multi = curl_multi_init() else { fatalError("curl_multi_init failed") }
        self.multi = multi
        self.settings = settings
        self.bounds = bounds
        larder_curl_multi_setopt_long(multi, CURLMOPT_MAXCONNECTS, 256)
        // `wait` polls the loop's descriptors as they are.
        precondition(
            MemoryLayout<LoopDescriptor>.size == MemoryLayout<pollfd>.size
                && MemoryLayout<LoopDescriptor>.offset(of: \.revents) == MemoryLayout<pollfd>.offset(of: \.revents))
        // Unretained: the callbacks run inside libcurl calls this driver makes, and are unset
        // before the multi handle is cleaned up.
        let context = Unmanaged.passUnretained(self).toOpaque()
        larder_curl_multi_setopt_socket_callback(multi, curlSocketCallback)
        larder_curl_multi_setopt_pointer(multi, CURLMOPT_SOCKETDATA, context)
        larder_curl_multi_setopt_timer_callback(multi, curlTimerCallback)
        larder_curl_multi_setopt_pointer(multi, CURLMOPT_TIMERDATA, context)
    }

    deinit {
        for handle in idleHandles { curl_easy_cleanup(handle) }
        larder_curl_multi_setopt_socket_callback(multi, nil)
        larder_curl_multi_setopt_timer_callback(multi, nil)
        curl_multi_cleanup(multi)
        if ownWakeDescriptor >= 0 { close(ownWakeDescriptor) }
    }

    // MARK: - Any thread

    /// Takes an exchange from any thread. Returns false when the driver stopped.
    func enqueue(_ exchange: Exchange) -> Bool {
        if CurlDriver.current === self {
            // The loop's own thread, inside its round: its turn follows, no lock, no wake-up.
            // (Stopping is decided on this thread too, so the check needs no lock either.)
            guard !stoppedHere else { return false }
            local.append(exchange)
            return true
        }
        let accepted = inbox.withLock { inbox -> Bool in
            guard !inbox.stopping else { return false }
            inbox.exchanges.append(exchange)
            mail.store(true, ordering: .releasing)
            return true
        }
        if accepted { wakeUp() }
        return accepted
    }

    func cancel(_ exchange: Exchange) {
        inbox.withLock { inbox in
            inbox.cancelled.append(exchange)
            mail.store(true, ordering: .releasing)
        }
        wakeUp()
    }

    /// Fails every exchange with `shutting_down` and waits until the driver's thread did so
    /// (at once when that thread is not running).
    func stop() {
        let mustWait = inbox.withLock { inbox -> Bool in
            inbox.stopping = true
            mail.store(true, ordering: .releasing)
            return inbox.phase == .running
        }
        guard mustWait else { return }
        wakeUp()
        stopped.wait()
    }

    /// Wakes the driver's own thread (an eventfd; -1 until `runOnOwnThread`).
    private var ownWakeDescriptor: Int32 = -1

    /// Runs the driver on a thread of its own, until stopped.
    func runOnOwnThread(name: String) {
        let descriptor = larder_curl_wake_descriptor()
        guard descriptor >= 0 else { fatalError("eventfd failed: errno \(errno)") }
        ownWakeDescriptor = descriptor
        // Not the driver itself: the shared bounds may call a registered wake-up after the
        // driver is gone, and the descriptor is closed with it.
        wakeUp = { [weak self] in
            guard let self else { return }
            var one: UInt64 = 1
            _ = Glibc.write(self.ownWakeDescriptor, &one, 8)
        }
        guard
            inbox.withLock({ inbox -> Bool in
                guard inbox.phase == .idle else { return false }
                inbox.phase = .running
                return true
            })
        else { return }
        let thread = Thread { [self] in
            nameCurrentThread(name)
            CurlDriver.current = self
            var wake = [LoopDescriptor(fd: descriptor, events: Int16(POLLIN))]
            while round() {
                wake[0].revents = 0
                _ = wake.withUnsafeMutableBufferPointer { pollWithTransfers($0, timeoutMs: pollTimeout(1000)) }
                if wake[0].revents != 0 {
                    var count: UInt64 = 0
                    _ = Glibc.read(descriptor, &count, 8)
                }
            }
        }
        thread.start()
    }

    // MARK: - EventLoopCompanion (the loop's thread)

    func attach(wake: @escaping @Sendable () -> Void) {
        wakeUp = wake
        CurlDriver.current = self
        inbox.withLock { inbox in
            if inbox.phase == .idle { inbox.phase = .running }
        }
    }

    func wait(_ descriptors: UnsafeMutableBufferPointer<LoopDescriptor>, timeoutMs: Int32) -> Bool {
        guard busy else {
            // Nothing of its own to wait for (a loop serving hits): the loop's descriptors as
            // they are, without copying them.
            descriptors.withMemoryRebound(to: pollfd.self) { _ = poll($0.baseAddress, nfds_t($0.count), timeoutMs) }
            return false
        }
        return pollWithTransfers(descriptors, timeoutMs: pollTimeout(timeoutMs))
    }

    /// `requested` ms (-1: no limit), or at most 100 while exchanges wait for a slot: their
    /// deadlines are checked each round.
    private func pollTimeout(_ requested: Int32) -> Int32 {
        guard !waiting.isEmpty else { return requested }
        return requested < 0 ? 100 : min(requested, 100)
    }

    /// One poll(2) of `descriptors` (their `revents` set) and the sockets libcurl watches, for
    /// at most `timeoutMs` or until libcurl's next timeout. Keeps the sockets that had events for
    /// the next round; returns whether there are any, or libcurl's timeout came.
    private func pollWithTransfers(_ descriptors: UnsafeMutableBufferPointer<LoopDescriptor>, timeoutMs: Int32) -> Bool {
        var timeout = timeoutMs
        if let due = timerDue {
            let now = DispatchTime.now().uptimeNanoseconds
            let untilDue = due <= now ? 0 : Int32(clamping: (due - now + 999_999) / 1_000_000)
            timeout = timeout < 0 ? untilDue : min(timeout, untilDue)
        }
        pollSet.removeAll(keepingCapacity: true)
        descriptors.withMemoryRebound(to: pollfd.self) { pollSet.append(contentsOf: $0) }
        for (socket, events) in watched { pollSet.append(pollfd(fd: socket, events: events, revents: 0)) }
        let count = pollSet.withUnsafeMutableBufferPointer { poll($0.baseAddress, nfds_t($0.count), timeout) }
        guard count > 0 else { return timerIsDue }
        for index in descriptors.indices { descriptors[index].revents = pollSet[index].revents }
        for entry in pollSet[descriptors.count...] where entry.revents != 0 {
            var bits: Int32 = 0
            if entry.revents & Int16(POLLIN | POLLHUP) != 0 { bits |= CURL_CSELECT_IN }
            if entry.revents & Int16(POLLOUT) != 0 { bits |= CURL_CSELECT_OUT }
            if entry.revents & Int16(POLLERR | POLLNVAL) != 0 { bits |= CURL_CSELECT_ERR }
            ready.append((entry.fd, bits))
        }
        return !ready.isEmpty || timerIsDue
    }

    private var timerIsDue: Bool {
        guard let due = timerDue else { return false }
        return due <= DispatchTime.now().uptimeNanoseconds
    }

    /// libcurl's timer callback: handle its timeouts in `milliseconds` (0: at once; -1: none).
    fileprivate func setTimer(_ milliseconds: Int) {
        timerDue = milliseconds < 0 ? nil : DispatchTime.now().uptimeNanoseconds + UInt64(milliseconds) * 1_000_000
    }

    /// libcurl's socket callback: which events to wait for on `socket` (CURL_POLL_*).
    fileprivate func watch(_ socket: curl_socket_t, _ what: Int32) {
        let index = watched.firstIndex { $0.socket == socket }
        let events: Int16
        switch what {
        case CURL_POLL_REMOVE:
            if let index { watched.remove(at: index) }
            return
        case CURL_POLL_IN: events = Int16(POLLIN)
        case CURL_POLL_OUT: events = Int16(POLLOUT)
        case CURL_POLL_INOUT: events = Int16(POLLIN | POLLOUT)
        default: events = 0
        }
        if let index { watched[index].events = events } else { watched.append((socket, events)) }
    }

    /// Hands libcurl the sockets that had events, then its timeout when due (new transfers
    /// start there: adding a handle asks for a timeout of 0).
    private func driveTransfers() {
        var running: Int32 = 0
        if !ready.isEmpty {
            let events = ready
            ready.removeAll(keepingCapacity: true)
            // A socket closed meanwhile is unknown to libcurl, which ignores it.
            for event in events { curl_multi_socket_action(multi, event.socket, event.bits, &running) }
        }
        if timerIsDue {
            curl_multi_socket_action(multi, larder_curl_socket_timeout(), 0, &running)
            // libcurl calls the timer callback only when its next timeout changes, and rounds
            // milliseconds down: a timeout handled a little early by its clock leaves the same
            // next timeout, no callback, and the transfer would stall until another event. So
            // the next timeout is asked for after each (1 ms when any time is left, never 0).
            var milliseconds = -1
            curl_multi_timeout(multi, &milliseconds)
            setTimer(milliseconds)
        }
    }

    func turn() {
        guard busy || mail.load(ordering: .acquiring) else { return }
        _ = round()
    }

    /// Transfers running or waiting, or exchanges sent from this thread not started yet.
    private var busy: Bool { !transfers.isEmpty || !waiting.isEmpty || !local.isEmpty }

    func detach() {
        if !stoppedHere {
            inbox.withLock { $0.stopping = true }
            _ = round()
        }
        CurlDriver.current = nil
    }

    // MARK: - The driver's thread

    /// Set on the driver's thread when it stopped (its inbox said so).
    private var stoppedHere = false

    /// One round: takes what arrived, starts, reads and completes transfers. Returns false once
    /// the driver stopped.
    private func round() -> Bool {
        guard !stoppedHere else { return false }
        let (incoming, cancelled, stopping) = inbox.withLock { inbox -> ([Exchange], [Exchange], Bool) in
            defer {
                inbox.exchanges.removeAll(keepingCapacity: true)
                inbox.cancelled.removeAll()
                mail.store(false, ordering: .relaxed)
            }
            return (inbox.exchanges, inbox.cancelled, inbox.stopping)
        }
        let sent = local
        local.removeAll(keepingCapacity: true)
        if stopping {
            finishAll(failing: sent + incoming)
            return false
        }
        for exchange in sent { begin(exchange) }
        for exchange in incoming { begin(exchange) }
        for exchange in cancelled { abort(exchange) }
        expireWaiting()
        // Slots another driver released (it woke this one), before anything else: a driver whose
        // exchanges all wait has no transfer of its own to finish and free one.
        startWaiting()
        if transfers.isEmpty {
            // Events of sockets whose transfers were all aborted this round; libcurl's timeouts
            // belong to transfers (it reports none left), so none can be due: no wait is cut short.
            ready.removeAll(keepingCapacity: true)
            timerDue = nil
        } else {
            driveTransfers()
            var remaining: Int32 = 0
            while let message = curl_multi_info_read(multi, &remaining) {
                guard message.pointee.msg == CURLMSG_DONE, let handle = message.pointee.easy_handle else { continue }
                let result = larder_curl_msg_result(message)
                if let transfer = remove(handle) {
                    finish(transfer, result: result)
                }
            }
            startWaiting()
            resumePaused()
        }
        // Completions that sent again from this thread (a 304 for an entry gone meanwhile):
        // another round at once, not after the next poll's timeout.
        if !local.isEmpty { wakeUp() }
        return true
    }

    /// Stopping: fails everything, frees the handles, tells `stop` (once).
    private func finishAll(failing exchanges: [Exchange]) {
        stoppedHere = true
        let error = LarderError(.shuttingDown, "Larder is shutting down")
        for exchange in exchanges + waiting { exchange.fail(error) }
        waiting.removeAll()
        for handle in Array(transfers.keys) {
            guard let transfer = remove(handle) else { continue }
            transfer.exchange.fail(error)
            retire(transfer)
        }
        for handle in idleHandles { curl_easy_cleanup(handle) }
        idleHandles.removeAll()
        // `stop` waits only when it saw the driver running; a signal nobody waits for is harmless.
        let wasRunning = inbox.withLock { inbox -> Bool in
            defer { inbox.phase = .finished }
            return inbox.phase == .running
        }
        if wasRunning { stopped.signal() }
    }

    /// Aborts a cancelled exchange: removing its easy handle mid-transfer closes the connection
    /// (it cannot be reused), so the origin sees the request abandoned.
    private func abort(_ exchange: Exchange) {
        let error = LarderError(.cancelled, "the request was cancelled")
        if let index = waiting.firstIndex(where: { $0 === exchange }) {
            waiting.remove(at: index)
            return exchange.fail(error)
        }
        guard let handle = transfers.first(where: { $0.value.exchange === exchange })?.key, let transfer = remove(handle) else { return }
        exchange.fail(error)
        retire(transfer)
    }

    /// Takes a handle off the multi handle and out of the transfers, giving back its slot and
    /// body budget (and so perhaps making another transfer the oldest).
    private func remove(_ handle: UnsafeMutableRawPointer) -> Transfer? {
        curl_multi_remove_handle(multi, handle)
        guard let transfer = transfers.removeValue(forKey: handle) else { return nil }
        bounds.release(sequence: transfer.sequence, accounted: transfer.accounted)
        transfer.accounted = 0
        paused.removeAll { $0 === transfer }
        return transfer
    }

    /// Starts waiting exchanges, in order, while slots are free.
    private func startWaiting() {
        while let exchange = waiting.first {
            guard let sequence = bounds.acquireSlot(waiter: identity, wake: wakeUp) else { return }
            waiting.removeFirst()
            start(exchange, sequence: sequence)
        }
    }

    /// Fails waiting exchanges whose deadline passed before they got a slot.
    private func expireWaiting() {
        guard !waiting.isEmpty else { return }
        let now = settings.clock.now()
        waiting.removeAll { exchange in
            guard exchange.deadline <= now else { return false }
            exchange.fail(
                LarderError(
                    .upstreamTimeout,
                    "upstream did not answer within \(exchange.request.timeoutMs) ms (waited for a transfer slot)"))
            return true
        }
    }

    /// Whether `transfer` may take `count` more body bytes now (called by its write callback).
    /// When not, it is paused until budget is released or it became the oldest transfer.
    func takeBudget(_ count: Int, for transfer: Transfer) -> Bool {
        guard bounds.take(count, sequence: transfer.sequence, waiter: identity, wake: wakeUp) else {
            paused.append(transfer)
            return false
        }
        transfer.accounted += count
        return true
    }

    /// Unpauses transfers that waited for body budget, when some was released (here or by
    /// another driver) since they were paused. Each one asks for budget again and pauses again
    /// if there is none — except the oldest, which always proceeds. Unpausing may deliver data
    /// at once (and pause again), so the list is taken first.
    private func resumePaused() {
        guard !paused.isEmpty else { return }
        let generation = bounds.budgetGeneration.load(ordering: .acquiring)
        guard generation != budgetSeen else { return }
        budgetSeen = generation
        let retrying = paused
        paused.removeAll()
        for transfer in retrying where transfers[transfer.handle] === transfer {
            larder_curl_unpause(transfer.handle)
        }
    }

    /// Starts the exchange's current hop, or queues it when every transfer slot is taken.
    func begin(_ exchange: Exchange) {
        guard waiting.isEmpty, let sequence = bounds.acquireSlot(waiter: identity, wake: wakeUp) else {
            // In arrival order: behind those already waiting.
            waiting.append(exchange)
            return
        }
        start(exchange, sequence: sequence)
    }

    private func start(_ exchange: Exchange, sequence: Int) {
        /// Gives the slot back and fails the exchange before any transfer exists.
        func refuse(_ error: LarderError) {
            bounds.release(sequence: sequence, accounted: 0)
            exchange.fail(error)
        }
        let remainingMs = Int((exchange.deadline - settings.clock.now()) * 1000)
        guard remainingMs > 0 else {
            return refuse(LarderError(.upstreamTimeout, "upstream did not answer within \(exchange.request.timeoutMs) ms"))
        }
        if let refusal = settings.policy.refusal(forHost: String(exchange.url.bareHost)) {
            return refuse(LarderError(.upstreamForbidden, refusal))
        }
        guard let handle = idleHandles.popLast() ?? curl_easy_init() else {
            return refuse(LarderError(.upstreamUnreachable, "cannot create a transfer"))
        }
        let transfer = Transfer(handle: handle, exchange: exchange, policy: settings.policy, driver: self, sequence: sequence)
        transfer.configure(userAgent: settings.userAgent, timeoutMs: remainingMs, resolve: settings.resolveList)
        transfers[handle] = transfer
        curl_multi_add_handle(multi, handle)
    }

    /// Frees what a finished transfer holds; its handle is reset and kept for another.
    func retire(_ transfer: Transfer) {
        transfer.release()
        if idleHandles.count < Self.idleHandleLimit {
            curl_easy_reset(transfer.handle)
            idleHandles.append(transfer.handle)
        } else {
            curl_easy_cleanup(transfer.handle)
        }
    }

    // MARK: - The driver of this thread

    /// The driver whose thread this is (nil on other threads): an exchange sent from a loop's
    /// own thread joins that loop's driver without a lock or a wake-up.
    static var current: CurlDriver? {
        get { pthread_getspecific(currentKey).map { Unmanaged<CurlDriver>.fromOpaque($0).takeUnretainedValue() } }
        // Unretained: a loop holds its companion, and a driver's own thread holds its driver,
        // for as long as the thread runs.
        set { pthread_setspecific(currentKey, newValue.map { Unmanaged.passUnretained($0).toOpaque() }) }
    }

    private static let currentKey: pthread_key_t = {
        var key = pthread_key_t()
        pthread_key_create(&key, nil)
        return key
    }()
}

// libcurl's callbacks: C functions, so the driver comes back through the user pointer.

private let curlSocketCallback: larder_curl_socket_callback = { _, socket, what, context, _ in
    guard let context else { return 0 }
    Unmanaged<CurlDriver>.fromOpaque(context).takeUnretainedValue().watch(socket, what)
    return 0
}

private let curlTimerCallback: larder_curl_timer_callback = { _, milliseconds, context in
    guard let context else { return 0 }
    Unmanaged<CurlDriver>.fromOpaque(context).takeUnretainedValue().setTimer(milliseconds)
    return 0
}
