// Larder's own listening sockets, which no upstream connection may reach. Loopback upstreams
// are allowed by default (`--deny-private` is off), so without this rule any /fetch caller could
// send `DELETE http://127.0.0.1:<admin port>/cache?all=true` through Larder and drive the admin
// API from inside, past the `--admin-port` split and the admin token's reach (Larder would
// forward the caller's own Authorization). The rule holds whatever `--deny-private` says, and it
// is applied where the other address rules are: to the address actually connected to, on every
// redirect hop, so host names, `--resolve` entries and redirects are all covered.

import LarderSync

/// One listening socket: the address it is bound to and its port.
public struct ListenerEndpoint: Sendable, Equatable, CustomStringConvertible {
    /// Which listener it is ("main", "proxy", "admin"), for the refusal's message.
    public let name: String
    public let address: IPAddress
    public let port: Int

    public init(name: String, address: IPAddress, port: Int) {
        self.name = name
        self.address = address.unmapped
        self.port = port
    }

    /// Bound to 0.0.0.0 or ::, it accepts connections to every address of this machine.
    public var isWildcard: Bool { address.bytes.allSatisfy { $0 == 0 } }

    public var description: String {
        address.bytes.count == 16 ? "[\(address)]:\(port)" : "\(address):\(port)"
    }
}

/// The listeners of this process, registered as each one starts (before it accepts), read on
/// every upstream connection.
public final class OwnListeners: Sendable {
    private let endpoints = Locked<[ListenerEndpoint]>([])

    public init() {}

    public func add(_ endpoint: ListenerEndpoint) {
        endpoints.withLock { $0.append(endpoint) }
    }

    public var all: [ListenerEndpoint] { endpoints.withLock { $0 } }

    /// nil when a connection to `address`:`port` cannot reach one of these listeners, else the
    /// reason. `isLocal` tells whether an address is one of this machine's interface addresses;
    /// it is asked only when a listener bound to a wildcard address has that port.
    public func refusal(address raw: IPAddress, port: Int, isLocal: (IPAddress) -> Bool) -> String? {
        let listening = endpoints.withLock { endpoints in endpoints.filter { $0.port == port } }
        guard !listening.isEmpty else { return nil }
        let address = raw.unmapped
        for target in [address] + address.embeddedIPv4 {
            for endpoint in listening where Self.reaches(target, endpoint, isLocal: isLocal) {
                return "\(endpoint) is this Larder instance's own \(endpoint.name) listener"
            }
        }
        return nil
    }

    /// Whether the kernel would deliver a connection to `target` (on the listener's port) to it.
    static func reaches(_ target: IPAddress, _ endpoint: ListenerEndpoint, isLocal: (IPAddress) -> Bool) -> Bool {
        // Connecting to 0.0.0.0 or :: reaches this host (Linux treats it as a local address).
        if target.bytes.allSatisfy({ $0 == 0 }) { return true }
        if target == endpoint.address { return true }
        guard endpoint.isWildcard else { return false }
        let loopback = target.bytes.count == 4 ? target.bytes[0] == 127 : target.bytes == [UInt8](repeating: 0, count: 15) + [1]
        return loopback || isLocal(target)
    }
}
