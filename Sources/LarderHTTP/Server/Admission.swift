#if canImport(Glibc)
    import Glibc
#endif

/// A client's IP address (without the port), as the per-address limit counts it.
struct ClientAddress: Hashable {
    let bytes: [UInt8]

    init(_ storage: sockaddr_storage) {
        var copy = storage
        bytes = withUnsafePointer(to: &copy) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { ClientAddress.bytes(of: $0) }
        }
    }

    init(_ address: UnsafePointer<sockaddr>) { bytes = Self.bytes(of: address) }

    private static func bytes(of address: UnsafePointer<sockaddr>) -> [UInt8] {
        switch Int32(address.pointee.sa_family) {
        case AF_INET:
            address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { withUnsafeBytes(of: $0.pointee.sin_addr) { Array($0) } }
        case AF_INET6:
            address.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { withUnsafeBytes(of: $0.pointee.sin6_addr) { Array($0) } }
        default:
            []
        }
    }
}

/// Connections open against the server's limits: in all, and per client address (0 = no
/// limit), one count for all loops. Pure: the server asks it under its lock as it accepts.
struct Admission {
    var limit = 0
    var open = 0
    var perAddress: [ClientAddress: Int] = [:]

    mutating func admit(_ client: ClientAddress, perAddress limitPerAddress: Int) -> Bool {
        guard open < limit else { return false }
        let current = perAddress[client, default: 0]
        if limitPerAddress > 0, current >= limitPerAddress { return false }
        open += 1
        perAddress[client] = current + 1
        return true
    }

    mutating func release(_ client: ClientAddress) {
        guard let current = perAddress[client] else { return }
        open -= 1
        if current <= 1 { perAddress.removeValue(forKey: client) } else { perAddress[client] = current - 1 }
    }
}
