// An origin that reads each request and never answers, and counts the connections its
// clients closed: proof that an aborted upstream transfer really closed its connection.

import Foundation
import LarderSync

#if canImport(Glibc)
    import Glibc
#endif

public final class HangingOrigin: @unchecked Sendable {
    // @unchecked: `listener` is set in init and only read afterwards; shared state is in `shared`.
    public let port: Int
    private let listener: Int32
    private final class Shared: Sendable {
        let counts = Locked<(accepted: Int, closed: Int)>((0, 0))
        let changed = Condition()
    }
    private let shared = Shared()

    public init() throws {
        let (listener, port) = try LoopbackListener.open()
        self.listener = listener
        self.port = port
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

    public var base: String { "http://127.0.0.1:\(port)" }

    /// Waits until `count` connections were accepted.
    public func waitForAccepted(_ count: Int, timeout: Double = 10) -> Bool {
        shared.changed.wait(timeout: timeout) { self.shared.counts.withLock { $0.accepted } >= count }
    }

    /// Waits until `count` connections were closed by their clients.
    public func waitForClosed(_ count: Int, timeout: Double = 10) -> Bool {
        shared.changed.wait(timeout: timeout) { self.shared.counts.withLock { $0.closed } >= count }
    }

    deinit {
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }
}
