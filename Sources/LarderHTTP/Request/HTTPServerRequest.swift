public import LarderCore

#if canImport(Glibc)
    public import Glibc
#endif

/// A request as the handler sees it.
///
/// A class, not a struct: a request is handed through several layers on every hit, and a
/// reference costs one retain where its five fields cost five each time.
public final class HTTPServerRequest: Sendable {
    public let method: String
    /// The path as libmicrohttpd decoded it (no query).
    public let path: String
    /// The request target exactly as received (path and query, still percent-encoded).
    public let rawTarget: String
    public let headers: [(name: String, value: String)]
    public let body: [UInt8]
    /// The body was larger than the server's limit and was not kept.
    public let bodyTooLarge: Bool
    /// The peer's address, kept as its bytes (no allocation per request) until the access log
    /// or a span asks for it as an `IPAddress`.
    private let peer: PeerAddress?
    /// The index of the event loop that received it, unique in the process
    /// (`HTTPServerConfiguration.firstLoopIndex` and on; 0 for a request made elsewhere): what is
    /// kept per loop (the access log's buffers, the per-loop counters) is found by it.
    public let loop: Int

    /// The peer's address (for the access log and spans); nil when libmicrohttpd does not say.
    public var clientAddress: IPAddress? { peer?.address }

    public init(
        method: String, path: String, rawTarget: String, headers: [(name: String, value: String)],
        body: [UInt8], bodyTooLarge: Bool, peer: PeerAddress? = nil, loop: Int = 0
    ) {
        self.loop = loop
        self.method = method
        self.path = path
        self.rawTarget = rawTarget
        self.headers = headers
        self.body = body
        self.bodyTooLarge = bodyTooLarge
        self.peer = peer
    }
}

/// An IPv4 or IPv6 address as 16 bytes in two words (IPv4 in the first four bytes).
public struct PeerAddress: Sendable {
    let high: UInt64
    let low: UInt64
    let isIPv6: Bool

    public init?(_ address: UnsafePointer<sockaddr>) {
        switch Int32(address.pointee.sa_family) {
        case AF_INET:
            var first: UInt64 = 0
            address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { pointer in
                withUnsafeBytes(of: pointer.pointee.sin_addr) { source in withUnsafeMutableBytes(of: &first) { $0.copyMemory(from: source) }
                }
            }
            high = first
            low = 0
            isIPv6 = false
        case AF_INET6:
            let words = address.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { pointer in
                withUnsafeBytes(of: pointer.pointee.sin6_addr) { ($0.load(as: UInt64.self), $0.load(fromByteOffset: 8, as: UInt64.self)) }
            }
            (high, low) = words
            isIPv6 = true
        default:
            return nil
        }
    }

    var address: IPAddress? {
        var bytes = withUnsafeBytes(of: (high, low)) { Array($0) }
        if !isIPv6 { bytes.removeLast(12) }
        return IPAddress(bytes: bytes)
    }
}
