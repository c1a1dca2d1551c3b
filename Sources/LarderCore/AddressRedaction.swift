// Addresses as Larder prints them. A URL's userinfo (`redis://user:password@host`, an OTLP
// collector's `https://user:token@collector`) holds credentials (RFC 3986 §3.2.1, §7.5), and a
// printed address lands in logs, start-up errors and check-config output: it is never printed.

public enum AddressRedaction {
    /// What takes the userinfo's place.
    public static let placeholder = "REDACTED"

    /// `address` with the userinfo of its authority replaced by `REDACTED`:
    /// `redis://app:secret@cache:6379/0` → `redis://REDACTED@cache:6379/0`. The authority is what
    /// follows `scheme://` (or the start, without one) up to the first `/`, `?` or `#`; its
    /// userinfo is all before the last `@` in it. An address without one is returned as given.
    public static func redacted(_ address: String) -> String {
        let start = address.range(of: "://")?.upperBound ?? address.startIndex
        let authorityEnd = address[start...].firstIndex { $0 == "/" || $0 == "?" || $0 == "#" } ?? address.endIndex
        guard let at = address[start..<authorityEnd].lastIndex(of: "@") else { return address }
        return String(address[..<start]) + placeholder + String(address[at...])
    }
}
