// Which upstreams Larder may reach. Larder fetches URLs for other services, so without this
// it is a way into the hosts behind it (SSRF). Three checks, all applied on every redirect hop:
//  - the host name against `--allow-host` patterns (when any are given);
//  - the address actually connected to (after DNS) against refused ranges. Checking the
//    address, not the name, defeats names that resolve to internal addresses;
//  - that address and port against Larder's own listeners (OwnListeners), always.

public struct IPAddress: Sendable, Equatable, CustomStringConvertible {
    /// 4 bytes for IPv4, 16 for IPv6, network order.
    public let bytes: [UInt8]
    public init?(bytes: [UInt8]) {
        guard bytes.count == 4 || bytes.count == 16 else { return nil }
        self.bytes = bytes
    }

    /// An IPv4-mapped IPv6 address (::ffff:a.b.c.d) is judged as the IPv4 address it carries.
    public var unmapped: IPAddress {
        if bytes.count == 16, bytes[0..<10].allSatisfy({ $0 == 0 }), bytes[10] == 0xFF, bytes[11] == 0xFF {
            return IPAddress(bytes: Array(bytes[12..<16]))!
        }
        return self
    }

    /// The IPv4 addresses an IPv6 address carries and that a network may deliver it to:
    /// IPv4-mapped (::ffff:0:0/96), IPv4-translated (::ffff:0:0:0/96, RFC 2765),
    /// IPv4-compatible (::/96, deprecated), NAT64 (64:ff9b::/96, RFC 6052) and 6to4
    /// (2002::/16, RFC 3056). `64:ff9b::a9fe:a9fe` reaches 169.254.169.254 through a NAT64
    /// gateway, so each is judged as the IPv4 address inside it too.
    public var embeddedIPv4: [IPAddress] {
        guard bytes.count == 16 else { return [] }
        func tail() -> IPAddress { IPAddress(bytes: Array(bytes[12..<16]))! }
        let zeroes = { (range: Range<Int>) in self.bytes[range].allSatisfy { $0 == 0 } }
        if zeroes(0..<10), bytes[10] == 0xFF, bytes[11] == 0xFF { return [tail()] }
        if zeroes(0..<8), bytes[8] == 0xFF, bytes[9] == 0xFF, zeroes(10..<12) { return [tail()] }
        if zeroes(0..<12), !(zeroes(12..<15) && bytes[15] <= 1) { return [tail()] } // not :: or ::1
        if bytes[0..<12] == [0x00, 0x64, 0xFF, 0x9B, 0, 0, 0, 0, 0, 0, 0, 0][...] { return [tail()] }
        if bytes[0] == 0x20, bytes[1] == 0x02 { return [IPAddress(bytes: Array(bytes[2..<6]))!] }
        return []
    }

    /// Appends `description`'s bytes to `out`; IPv4 without making a string.
    public func appendDescription(to out: inout [UInt8]) {
        guard bytes.count == 4 else { return out.append(contentsOf: description.utf8) }
        for (index, byte) in bytes.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ".")) }
            if byte >= 100 { out.append(UInt8(ascii: "0") + byte / 100) }
            if byte >= 10 { out.append(UInt8(ascii: "0") + byte / 10 % 10) }
            out.append(UInt8(ascii: "0") + byte % 10)
        }
    }

    public var description: String {
        if bytes.count == 4 {
            var out: [UInt8] = []
            appendDescription(to: &out)
            return String(decoding: out, as: UTF8.self)
        }
        return stride(from: 0, to: 16, by: 2).map { String(UInt16(bytes[$0]) << 8 | UInt16(bytes[$0 + 1]), radix: 16) }
            .joined(separator: ":")
    }
}

public struct AddressRange: Sendable, CustomStringConvertible {
    public let network: [UInt8]
    public let prefixLength: Int
    public let label: String

    /// `cidr` like "169.254.0.0/16" or "fe80::/10" (IPv6 written with a single "::" at most).
    init(_ cidr: String, _ label: String) {
        let parts = cidr.split(separator: "/")
        self.network = AddressRange.parse(String(parts[0]))
        self.prefixLength = Int(parts[1])!
        self.label = label
    }

    public func contains(_ address: IPAddress) -> Bool {
        guard address.bytes.count == network.count else { return false }
        var remaining = prefixLength
        for index in 0..<network.count where remaining > 0 {
            let bits = min(8, remaining)
            let mask: UInt8 = bits == 8 ? 0xFF : ~(0xFF >> UInt8(bits))
            if address.bytes[index] & mask != network[index] & mask { return false }
            remaining -= bits
        }
        return true
    }

    public var description: String { label }

    /// Parses the literal forms used in the tables below.
    static func parse(_ text: String) -> [UInt8] {
        if text.contains(".") { return text.split(separator: ".").map { UInt8($0)! } }
        let halves = text.components(separatedBy: "::")
        func groups(_ part: String) -> [UInt16] { part.isEmpty ? [] : part.split(separator: ":").map { UInt16($0, radix: 16)! } }
        let head = groups(halves[0])
        let tail = halves.count > 1 ? groups(halves[1]) : []
        let all = head + Array(repeating: 0, count: 8 - head.count - tail.count) + tail
        return all.flatMap { [UInt8($0 >> 8), UInt8($0 & 0xFF)] }
    }
}

public struct UpstreamAccessPolicy: Sendable {
    /// Patterns: "api.example.com" (exact) or "*.example.com" (any subdomain). Empty = any host.
    public let allowHosts: [String]
    /// Also refuse loopback, private, shared, multicast and unspecified ranges.
    public let denyPrivate: Bool
    /// This process's listening sockets, never connected to (filled as the listeners start).
    public let ownListeners: OwnListeners

    public init(allowHosts: [String] = [], denyPrivate: Bool = false, ownListeners: OwnListeners = OwnListeners()) {
        self.allowHosts = allowHosts.map { $0.lowercasedASCII }
        self.denyPrivate = denyPrivate
        self.ownListeners = ownListeners
    }

    /// Link-local and cloud metadata endpoints: always refused, whatever the configuration.
    public static let alwaysRefused: [AddressRange] = [
        AddressRange("169.254.0.0/16", "link-local (cloud metadata)"),
        AddressRange("fe80::/10", "IPv6 link-local"),
        AddressRange("fd00:ec2::254/128", "AWS metadata (IPv6)"),
        AddressRange("100.100.100.200/32", "Alibaba Cloud metadata")
    ]

    /// Refused with `--deny-private`.
    public static let privateRanges: [AddressRange] = [
        AddressRange("0.0.0.0/8", "unspecified"),
        AddressRange("10.0.0.0/8", "private"),
        AddressRange("100.64.0.0/10", "shared address space"),
        AddressRange("127.0.0.0/8", "loopback"),
        AddressRange("172.16.0.0/12", "private"),
        AddressRange("192.0.0.0/24", "IETF protocol assignments"),
        AddressRange("192.168.0.0/16", "private"),
        AddressRange("198.18.0.0/15", "benchmarking"),
        AddressRange("224.0.0.0/4", "multicast"),
        AddressRange("240.0.0.0/4", "reserved"),
        AddressRange("::/128", "unspecified"),
        AddressRange("::1/128", "loopback"),
        AddressRange("fc00::/7", "unique local"),
        AddressRange("ff00::/8", "multicast"),
        AddressRange("64:ff9b::/96", "NAT64"),
        AddressRange("64:ff9b:1::/48", "local-use NAT64"),
        AddressRange("2001::/32", "Teredo"),
        AddressRange("2002::/16", "6to4")
    ]

    /// nil when the host name may be requested, else the reason.
    public func refusal(forHost host: String) -> String? {
        guard !allowHosts.isEmpty else { return nil }
        let name = host.lowercasedASCII
        for pattern in allowHosts {
            if pattern.hasPrefix("*.") {
                if name.hasSuffix(pattern.dropFirst(1)) { return nil }
            } else if pattern == name {
                return nil
            }
        }
        return "host '\(host)' is not in the allowed hosts"
    }

    /// nil when `address`:`port` may be connected to, else the reason: one of Larder's own
    /// listeners (whatever the configuration), or an address the ranges below refuse.
    /// `isLocal` tells whether an address belongs to this machine (see OwnListeners).
    public func refusal(forAddress address: IPAddress, port: Int, isLocal: (IPAddress) -> Bool) -> String? {
        if let refusal = ownListeners.refusal(address: address, port: port, isLocal: isLocal) { return refusal }
        return refusal(forAddress: address)
    }

    /// nil when the address may be connected to, else the reason. An IPv6 address that
    /// carries an IPv4 address (see `IPAddress.embeddedIPv4`) is refused when that one is.
    public func refusal(forAddress raw: IPAddress) -> String? {
        let address = raw.unmapped
        for candidate in [address] + address.embeddedIPv4 {
            let via = candidate == address ? "" : " (inside \(address))"
            if let range = Self.alwaysRefused.first(where: { $0.contains(candidate) }) {
                return "address \(candidate)\(via) is \(range.label)"
            }
            if denyPrivate, let range = Self.privateRanges.first(where: { $0.contains(candidate) }) {
                return "address \(candidate)\(via) is \(range.label)"
            }
        }
        return nil
    }
}
