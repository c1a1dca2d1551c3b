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
final class EventLoop: @unchecked Sendable {
    // @unchecked Sendable: the daemon and `roundWanted` are used by this loop's thread only (and
    // by `stop` after the thread ended); `stopping` and `thread` are atomic; the descriptors are
    // fixed; the companion is called on this loop's thread only.
    let daemon: OpaquePointer
    let index: Int
    private let epollDescriptor: Int32
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

    init?(daemon: OpaquePointer, index: Int, headerDeadlines: HeaderDeadlines, companion: (any EventLoopCompanion)? = nil) {
        let epoll = larder_mhd_epoll_fd(daemon)
        let wake = larder_wake_descriptor()
        guard epoll >= 0, wake >= 0 else {
            if wake >= 0 { close(wake) }
            return nil
        }
        self.daemon = daemon
        self.index = index
        self.headerDeadlines = headerDeadlines
        self.epollDescriptor = epoll
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

    /// Ends the thread, then the daemon (closing its connections).
    func stop() {
        if running {
            stopping.store(true, ordering: .releasing)
            wake()
            ended.wait()
            running = false
        }
        MHD_stop_daemon(daemon)
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
        var descriptors = [
            LoopDescriptor(fd: epollDescriptor, events: Int16(POLLIN)),
            LoopDescriptor(fd: wakeDescriptor, events: Int16(POLLIN)),
            LoopDescriptor(fd: -1, events: Int16(POLLIN))
        ]
        while !stopping.load(ordering: .acquiring) {
            var timeout: UInt64 = 0
            // No timeout to keep: wait for an event; libmicrohttpd says 0 when work is pending.
            var wait = MHD_get_timeout(daemon, &timeout) == MHD_Result.YES ? Int32(min(timeout, 60_000)) : -1
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
            if !serverIdle { MHD_run(daemon) }
            if let companion {
                companion.turn()
                // Answers completed in that turn: queue them now rather than after another poll.
                // The flag stays set, so the next round does not wait either: the turn may have
                // left work for the next one (an exchange sent from a completion).
                if roundWanted { MHD_run(daemon) }
            }
        }
        companion?.detach()
        ended.signal()
    }
}
