// Request loops (RFC 8586 CDN-Loop): each instance adds its own token to the CDN-Loop field of
// every request it sends upstream; a request that arrives carrying that token has come back
// to the instance that sent it (a named upstream pointing at Larder, directly or through other
// caches), and waiting for it would wait on itself until the upstream timeout.

public struct LoopDetection: Sendable {
    /// This instance's cdn-id (RFC 8586 §2: a token or a pseudonym).
    public let token: String

    public init(token: String) { self.token = token }

    /// A token no other instance or process shares: `larder-` and 12 random hex digits.
    public static func randomToken() -> String {
        var generator = SystemRandomNumberGenerator()
        return "larder-" + String(UInt64.random(in: 0...UInt64.max, using: &generator) & 0xFFFF_FFFF_FFFF, radix: 16)
    }

    /// Whether any CDN-Loop field among `headers` names this instance: members are separated
    /// by commas, each a cdn-id optionally followed by `;` parameters.
    public func isLoop(_ headers: [(name: String, value: String)]) -> Bool {
        // Checked on every request: the length first (O(1) for native strings), the name only then.
        for field in headers where field.name.utf8.count == 8 && field.name.caseInsensitiveEquals("cdn-loop") {
            for member in field.value.split(separator: ",") {
                let id = member.split(separator: ";", maxSplits: 1).first.map { $0.trimmingSpaces } ?? ""
                if id == token { return true }
            }
        }
        return false
    }
}
