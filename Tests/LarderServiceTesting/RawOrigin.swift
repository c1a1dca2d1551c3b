// An origin that answers every connection with the same bytes: for upstream replies a
// well-behaved server cannot be made to send (malformed framing and the like). It records the
// bytes each connection sent, so tests can check exactly what went upstream.

import Foundation
import LarderSync

#if canImport(Glibc)
    import Glibc
#endif

public final class RawOrigin: @unchecked Sendable {
    // @unchecked: `listener` is set in init and only read afterwards; the thread owns the rest,
    // and what it shares is lock-protected.
    public let port: Int
    private let listener: Int32
    private final class Shared: Sendable {
        let received = Locked<[[UInt8]]>([])
        let open = Locked<[Int32]>([])
    }
    private let shared = Shared()

    /// `holdOpen`: after replying, keep the connection open (until deinit) instead of closing it.
    public convenience init(reply: [UInt8], holdOpen: Bool = false) throws {
        try self.init(holdOpen: holdOpen) { _, _ in reply }
    }

    /// `respond(n, request)`: the bytes to send on the n-th connection (from 0), given what it sent.
    public init(holdOpen: Bool = false, respond: @escaping @Sendable (Int, [UInt8]) -> [UInt8]) throws {
        let (listener, port) = try LoopbackListener.open()
        self.listener = listener
        self.port = port
        Thread.detachNewThread { [shared] in
            while true {
                let connection = accept(listener, nil, nil)
                guard connection >= 0 else { return } // closed by deinit
                var buffer = [UInt8](repeating: 0, count: 65536)
                let count = buffer.withUnsafeMutableBytes { recv(connection, $0.baseAddress, $0.count, 0) }
                let request = Array(buffer[0..<max(0, count)])
                let number = shared.received.withLock { received -> Int in
                    received.append(request)
                    return received.count - 1
                }
                let reply = respond(number, request)
                _ = reply.withUnsafeBytes { send(connection, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                if holdOpen {
                    shared.open.withLock { $0.append(connection) }
                } else {
                    close(connection)
                }
            }
        }
    }

    /// What each connection sent (its first read), in order.
    public var requests: [[UInt8]] { shared.received.withLock { $0 } }

    deinit {
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
        for connection in shared.open.withLock({ $0 }) { close(connection) }
    }
}

/// A listening TCP socket on 127.0.0.1 and a free port, for the hand-made origins.
public enum LoopbackListener {
    public static func open(backlog: Int32 = 64) throws -> (socket: Int32, port: Int) {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(listener, backlog) == 0 else {
            close(listener)
            throw TestClientError(description: "loopback listener: bind/listen failed")
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &length) }
        }
        return (listener, Int(UInt16(bigEndian: address.sin_port)))
    }
}
