import CMicroHTTPD
import Dispatch
import Foundation
import LarderSync

#if canImport(Glibc)
    import Glibc
#endif

/// One thread running one libmicrohttpd daemon in external epoll mode: it waits on the
/// daemon's epoll descriptor, the shared listening socket and its own wake-up descriptor, accepts
/// connections onto its daemon and calls MHD_run, which processes without blocking.
///
/// Why not libmicrohttpd's own threads: in poll mode (level-triggered) every round polls every
/// connection of the thread, and a response waits for a round that reports the socket
/// writable; in 0.9.75's own epoll thread, a round that gets exactly 128 events (MAX_EVENTS)
/// calls epoll_wait again with the full timeout before processing them, so those connections
/// stall until another event or a timeout. MHD_run never blocks (timeout 0), so that second call returns at once.
///
/// With a companion (the upstream transfers of this loop's requests), the companion waits on
/// its own sockets and the loop's descriptors in one poll, and takes a turn after MHD_run: a
/// request that needs the origin is sent, read and answered on this thread. A wake-up from the
/// loop's own thread (an answer completed in the turn resumes its connection) writes no
/// descriptor: the loop runs MHD_run again at once and does not wait in its next round.
///
/// Certificate rotation (`adopt`): the loop takes a new daemon, started with the new
/// certificate, for the connections it accepts from then on, and keeps running the one before
/// (polling its epoll descriptor, calling MHD_run) until its last connection is gone, then stops
/// it. So a connection is served to its end by the daemon that accepted it, with the
/// certificate it was accepted with; nothing is closed, and the listening socket never changes.
final class EventLoop: @unchecked Sendable {
    // @unchecked Sendable: `daemon`, `retiring` and `roundWanted` are used by this loop's thread
    // only (and by `stop` after the thread ended); the current daemon's address, `stopping`,
    // `thread` and the pending adoption are atomic or lock-protected; the wake-up descriptor is
    // fixed; the companion is called on this loop's thread only.
    /// The daemon new connections are added to.
    private(set) var daemon: Daemon
    /// Daemons of earlier certificates, run until their last connection closes.
    private var retiring: [Daemon] = []
    /// `daemon`'s address and those of `retiring`, for `runs` from other threads.
    private let currentAddress: Atomic<UInt>
    private let retiringAddresses = Locked<[UInt]>([])
    /// A daemon handed over by `adopt`, taken up at the start of the next round.
    private let pending = Locked<(daemon: Daemon, taken: DispatchSemaphore)?>(nil)
    private let adoptionPending = Atomic<Bool>(false)
    let index: Int
    private let wakeDescriptor: Int32
    private let companion: (any EventLoopCompanion)?
    private let stopping = Atomic<Bool>(false)
    private let ended = DispatchSemaphore(value: 0)
    private var running = false
    /// The loop's thread (pthread_self), 0 before it starts.
    private let thread = Atomic<UInt>(0)
    /// Woken from this loop's own thread (a connection resumed by an answer completed here, or
    /// companion work left for the next turn): run MHD_run now and do not wait in the next round.
    private var roundWanted = false
    /// Responses this loop may queue again (see RecentResponses); its thread only.
    let recentResponses = RecentResponses()
    /// Its connections' header deadlines; its thread only.
    let headerDeadlines: HeaderDeadlines
    /// Requests handed to the handler on this loop; for tests (which loops served them).
    let dispatched = Atomic<Int>(0)

    init?(daemon: Daemon, index: Int, headerDeadlines: HeaderDeadlines, companion: (any EventLoopCompanion)? = nil) {
        let wake = larder_wake_descriptor()
        guard wake >= 0 else { return nil }
        self.daemon = daemon
        self.currentAddress = Atomic(UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(daemon.pointer))))
        self.index = index
        self.headerDeadlines = headerDeadlines
        self.wakeDescriptor = wake
        self.companion = companion
        // `run` polls the descriptors as they are.
        precondition(
            MemoryLayout<LoopDescriptor>.size == MemoryLayout<pollfd>.size
                && MemoryLayout<LoopDescriptor>.offset(of: \.revents) == MemoryLayout<pollfd>.offset(of: \.revents))
    }

    func start(server: HTTPServer) {
        running = true
        let thread = Thread { [self] in
            nameCurrentThread("larder-http-\(index)")
            run(server)
        }
        thread.start()
    }

    /// Makes the loop run a round now (from any thread; on its own, the round follows at once).
    func wake() {
        if UInt(pthread_self()) == thread.load(ordering: .relaxed) {
            roundWanted = true
            return
        }
        var one: UInt64 = 1
        _ = write(wakeDescriptor, &one, 8)
    }

    /// Ends the thread, runs `beforeDaemonsStop` (no request can start or suspend any more),
    /// then stops the daemons (closing their connections).
    func stop(beforeDaemonsStop: () -> Void = {}) {
        if running {
            stopping.store(true, ordering: .releasing)
            wake()
            ended.wait()
            running = false
        }
        beforeDaemonsStop()
        if let left = pending.withLock({ pending in
            defer { pending = nil }
            return pending
        }) {
            left.daemon.stop()
            left.taken.signal()
        }
        for daemon in [daemon] + retiring { daemon.stop() }
        retiring = []
        retiringAddresses.withLock { $0 = [] }
    }

    /// Whether `daemon` is one of this loop's (from any thread).
    func runs(_ daemon: OpaquePointer?) -> Bool {
        guard let daemon else { return false }
        let address = UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(daemon)))
        if currentAddress.load(ordering: .relaxed) == address { return true }
        return retiringAddresses.withLock { $0.contains(address) }
    }

    /// Whether a daemon replaced since is still running out its connections; for tests.
    var isRetiring: Bool { retiringAddresses.withLock { !$0.isEmpty } }

    /// Hands the loop `daemon` for the connections it accepts from now on; the current one runs
    /// until its connections are done. Returns once the loop took it (within `timeout` seconds);
    /// false, with `daemon` stopped, if the loop did not.
    func adopt(_ daemon: Daemon, timeout: Double = 10) -> Bool {
        let taken = DispatchSemaphore(value: 0)
        pending.withLock { $0 = (daemon, taken) }
        adoptionPending.store(true, ordering: .releasing)
        wake()
        // Signalled by the loop that took it, or by `stop`, which stopped it instead.
        if taken.wait(timeout: .now() + timeout) == .success { return runs(daemon.pointer) }
        // Not taken in time: take it back, unless the loop (or `stop`) took it meanwhile.
        guard
            let back = pending.withLock({ pending in
                defer { pending = nil }
                return pending
            })
        else { return runs(daemon.pointer) }
        back.daemon.stop()
        return false
    }

    /// Takes up a daemon handed over by `adopt`. On the loop's thread.
    private func takeAdopted() {
        guard adoptionPending.exchange(false, ordering: .acquiring),
            let adopted = pending.withLock({ pending in
                defer { pending = nil }
                return pending
            })
        else { return }
        let previous = daemon
        retiring.append(previous)
        retiringAddresses.withLock { $0.append(UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(previous.pointer)))) }
        daemon = adopted.daemon
        currentAddress.store(UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(adopted.daemon.pointer))), ordering: .releasing)
        adopted.taken.signal()
    }

    /// Stops the retiring daemons whose last connection is gone. On the loop's thread.
    private func stopFinishedDaemons() {
        let finished = retiring.filter { $0.connectionCount == 0 }
        guard !finished.isEmpty else { return }
        retiring.removeAll { daemon in finished.contains { $0 === daemon } }
        let addresses = finished.map { UInt(bitPattern: Int(bitPattern: UnsafeRawPointer($0.pointer))) }
        retiringAddresses.withLock { $0.removeAll { addresses.contains($0) } }
        for daemon in finished { daemon.stop() }
    }

    /// MHD_run on every daemon of the loop.
    private func runDaemons() {
        MHD_run(daemon.pointer)
        for daemon in retiring { MHD_run(daemon.pointer) }
    }

    /// The time to wait for libmicrohttpd's next timeout on any of the loop's daemons, -1 for none.
    private func daemonTimeout() -> Int32 {
        var timeout: UInt64 = 0
        var wait = MHD_get_timeout(daemon.pointer, &timeout) == MHD_Result.YES ? Int32(min(timeout, 60_000)) : -1
        for daemon in retiring where MHD_get_timeout(daemon.pointer, &timeout) == MHD_Result.YES {
            let milliseconds = Int32(min(timeout, 60_000))
            wait = wait < 0 ? milliseconds : min(wait, milliseconds)
        }
        return wait
    }

    // The wake-up descriptor lives as long as the loop: a responder that answers after the
    // server stopped (its request long over) still holds the loop through its connection handle,
    // and must not write into a descriptor number the process has reused.
    deinit { close(wakeDescriptor) }

    private func run(_ server: HTTPServer) {
        thread.store(UInt(pthread_self()), ordering: .relaxed)
        // sendfile can raise SIGPIPE (MSG_NOSIGNAL is for send only): blocked on this thread, as
        // libmicrohttpd's own threads do, whatever the process does with it.
        var signals = sigset_t()
        sigemptyset(&signals)
        sigaddset(&signals, SIGPIPE)
        pthread_sigmask(SIG_BLOCK, &signals, nil)
        companion?.attach { [weak self] in self?.wake() }
        // The current daemon's epoll descriptor, the wake-up one, the listening socket, then those
        // of the retiring daemons.
        var descriptors = [
            LoopDescriptor(fd: daemon.epollDescriptor, events: Int16(POLLIN)),
            LoopDescriptor(fd: wakeDescriptor, events: Int16(POLLIN)),
            LoopDescriptor(fd: -1, events: Int16(POLLIN))
        ]
        while !stopping.load(ordering: .acquiring) {
            if adoptionPending.load(ordering: .relaxed) || !retiring.isEmpty || descriptors.count > 3 {
                takeAdopted()
                stopFinishedDaemons()
                descriptors.removeSubrange(3...)
                descriptors[0].fd = daemon.epollDescriptor
                for daemon in retiring { descriptors.append(LoopDescriptor(fd: daemon.epollDescriptor, events: Int16(POLLIN))) }
            }
            // No timeout to keep: wait for an event; libmicrohttpd says 0 when work is pending.
            var wait = daemonTimeout()
            if let check = headerDeadlines.millisecondsToNextCheck() { wait = wait < 0 ? check : min(wait, check) }
            if roundWanted { wait = 0 }
            for index in descriptors.indices { descriptors[index].revents = 0 }
            descriptors[2].fd = server.socketToAcceptOn
            let companionReady = descriptors.withUnsafeMutableBufferPointer { buffer -> Bool in
                if let companion { return companion.wait(buffer, timeoutMs: wait) }
                buffer.withMemoryRebound(to: pollfd.self) { _ = poll($0.baseAddress, nfds_t($0.count), wait) }
                return false
            }
            if descriptors[1].revents != 0 {
                var count: UInt64 = 0
                _ = read(wakeDescriptor, &count, 8)
            }
            if descriptors[2].revents != 0 { server.acceptConnections(onto: self) }
            // Late header sections: their sockets are shut down, and MHD_run closes them.
            if headerDeadlines.check() { roundWanted = true }
            // Only the companion's sockets had events (an origin answered): libmicrohttpd has
            // nothing to do unless its timeout came, and then the next round's is 0.
            let serverIdle = companionReady && wait != 0 && !roundWanted && descriptors.allSatisfy { $0.revents == 0 }
            roundWanted = false
            if !serverIdle { runDaemons() }
            if let companion {
                companion.turn()
                // Answers completed in that turn: queue them now rather than after another poll.
                // The flag stays set, so the next round does not wait either: the turn may have
                // left work for the next one (an exchange sent from a completion).
                if roundWanted { runDaemons() }
            }
        }
        companion?.detach()
        ended.signal()
    }
}
