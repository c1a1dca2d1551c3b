// A response as a test reads it: from a socket (LarderServiceTesting's TestConnection) or from
// the engine harness (EngineTestCase), with the /fetch envelope's fields at hand.

import Foundation

public struct TestResponse: Sendable {
    public init(status: Int, headers: [String: String], body: [UInt8], rawHead: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
        self.rawHead = rawHead
    }

    public let status: Int
    public let headers: [String: String]
    public let body: [UInt8]
    /// The status line and header fields as received, for byte-exact checks.
    public var rawHead: [UInt8] = []

    public var text: String { String(decoding: body, as: UTF8.self) }

    /// Every value of the field `name` in the raw head, in order (`headers` keeps one per name).
    public func headerValues(_ name: String) -> [String] {
        String(decoding: rawHead, as: UTF8.self).components(separatedBy: "\r\n").compactMap { line in
            guard let colon = line.firstIndex(of: ":"), line[..<colon].lowercased() == name.lowercased() else { return nil }
            return line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
    }

    public var json: [String: Any] {
        (try? JSONSerialization.jsonObject(with: Data(body), options: [.fragmentsAllowed])) as? [String: Any] ?? [:]
    }

    /// The `cache` object of a /fetch envelope.
    public var cache: [String: Any] { json["cache"] as? [String: Any] ?? [:] }
    public var outcome: String? { cache["outcome"] as? String }
    public var errorCode: String? { (json["error"] as? [String: Any])?["code"] as? String }
    public var errorField: String? { (json["error"] as? [String: Any])?["field"] as? String }
    /// The upstream JSON body carried in the envelope.
    public var upstreamBody: [String: Any] { json["body"] as? [String: Any] ?? [:] }
    /// The origin's request counter for the path, as it answered.
    public var originCount: Int? { upstreamBody["n"] as? Int }
}
