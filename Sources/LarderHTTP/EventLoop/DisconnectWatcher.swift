import Foundation
import LarderSync

#if canImport(Glibc)
    import Glibc
#endif

/// Linux's POLLRDHUP (peer closed its end); Glibc's module does not export the macro.
private let pollRDHUP: Int32 = 0x2000

/// Watches sockets of suspended requests for the peer's close (POLLRDHUP), on one thread.
/// libmicrohttpd does not watch a suspended connection, so without this a client that gives up
/// on a long request is only noticed when the answer is written.
final class DisconnectWatcher: @unchecked Sendable {
    // @unchecked Sendable: `registrations` is guarded by `condition`; the thread is started once.
    private var registrations: [Int32: (id: UInt64, handler: @Sendable () -> Void)] = [:]
    private var nextID: UInt64 = 0
    private var started = false
    private let condition = NSCondition()

    /// Watches `fd`; `handler` runs once (on the watcher's thread) when the peer closes it.
    func watch(_ fd: Int32, _ handler: @escaping @Sendable () -> Void) -> UInt64 {
        condition.lock()
        defer { condition.unlock() }
        nextID += 1
        registrations[fd] = (nextID, handler)
        if !started {
            started = true
            let thread = Thread { [self] in
                nameCurrentThread("larder-disconnects")
                run()
            }
            thread.start()
        }
        condition.signal()
        return nextID
    }

    func unwatch(_ fd: Int32, id: UInt64) {
        condition.lock()
        if registrations[fd]?.id == id { registrations.removeValue(forKey: fd) }
        condition.unlock()
    }

    private func run() {
        while true {
            condition.lock()
            while registrations.isEmpty { condition.wait() }
            let snapshot = registrations.map { (fd: $0.key, id: $0.value.id) }
            condition.unlock()
            var descriptors = snapshot.map { pollfd(fd: $0.fd, events: Int16(pollRDHUP), revents: 0) }
            // A short timeout: registrations made meanwhile are picked up on the next round.
            _ = poll(&descriptors, nfds_t(descriptors.count), 100)
            var gone: [@Sendable () -> Void] = []
            condition.lock()
            for (index, descriptor) in descriptors.enumerated()
            where Int32(descriptor.revents) & (Int32(pollRDHUP) | Int32(POLLHUP) | Int32(POLLERR)) != 0 {
                let fd = snapshot[index].fd
                // Only the registration polled: the descriptor may have been reused since.
                if let registration = registrations[fd], registration.id == snapshot[index].id {
                    registrations.removeValue(forKey: fd)
                    gone.append(registration.handler)
                }
            }
            condition.unlock()
            for handler in gone { handler() }
        }
    }
}
