// An origin that reads each request and never answers, and counts the connections its
// clients closed: proof that an aborted upstream transfer really closed its connection.

import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

final class HangingOrigin: @unchecked Sendable {
    // @unchecked: `listener` is set in init and only read afterwards; shared state is in `shared`.
    let port: Int
    private let listener: Int32
    private final class Shared: Sendable {
        let counts = Mutex<(accepted: Int, closed: Int)>((0, 0))
        let changed = Condition()
    }
    private let shared = Shared()

    init() throws {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        self.listener = listener
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(listener, 64) == 0 else { throw TestClientError(description: "hanging origin: bind/listen failed") }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &length) }
        }
        port = Int(UInt16(bigEndian: address.sin_port))
        Thread.detachNewThread { [shared] in
            while true {
                let connection = accept(listener, nil, nil)
                guard connection >= 0 else { return }
                shared.counts.withLock { $0.accepted += 1 }
                shared.changed.broadcast()
                Thread.detachNewThread {
                    var buffer = [UInt8](repeating: 0, count: 65536)
                    while buffer.withUnsafeMutableBytes({ recv(connection, $0.baseAddress, $0.count, 0) }) > 0 {}
                    close(connection)
                    shared.counts.withLock { $0.closed += 1 }
                    shared.changed.broadcast()
                }
            }
        }
    }

    var base: String { "http://127.0.0.1:\(port)" }

    /// Waits until `count` connections were accepted.
    func waitForAccepted(_ count: Int, timeout: Double = 10) -> Bool {
        shared.changed.wait(timeout: timeout) { self.shared.counts.withLock { $0.accepted } >= count }
    }

    /// Waits until `count` connections were closed by their clients.
    func waitForClosed(_ count: Int, timeout: Double = 10) -> Bool {
        shared.changed.wait(timeout: timeout) { self.shared.counts.withLock { $0.closed } >= count }
    }

    deinit {
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }
}
