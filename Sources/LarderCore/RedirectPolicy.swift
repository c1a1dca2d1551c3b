// Following an upstream's redirect for /fetch (RFC 9110 §15.4), as a pure decision: given the
// request as it went to this hop and the response's status and Location, whether the response
// is the answer, the request goes on to another hop (and as what), or the exchange fails. The
// upstream adapter (LarderCurl's CurlDriver) does the sending; the proxy never follows.

import Foundation

public enum RedirectPolicy {
    /// The statuses followed (RFC 9110 §15.4.2–§15.4.9); 300 and 304 are answers, 305 and 306
    /// are obsolete.
    public static let followedStatuses: Set<Int> = [301, 302, 303, 307, 308]
    /// Redirects followed in one exchange before it fails with `too_many_redirects`
    /// (RFC 9110 §15.4: a client ought to detect infinite redirection loops).
    public static let maxHops = 5

    /// The request as it goes to one hop.
    public struct Hop: Sendable, Equatable {
        public var method: HTTPMethod
        public var url: UpstreamURL
        public var headers: [HeaderField]
        public var body: [UInt8]?

        public init(method: HTTPMethod, url: UpstreamURL, headers: [HeaderField], body: [UInt8]?) {
            self.method = method
            self.url = url
            self.headers = headers
            self.body = body
        }
    }

    public enum Action: Sendable, Equatable {
        /// The response is the exchange's answer (not a redirect, or not one to follow).
        case deliver
        /// Send this request next.
        case follow(Hop)
        /// The exchange fails with this error.
        case fail(LarderError)
    }

    /// What to do with a response of `status` and `location` to `hop`, the `hops`-th redirect
    /// already followed. `following`: the request follows redirects (/fetch does, the proxy
    /// passes them on). `originBound`: fields (lower-case) that, like credentials, never go to
    /// another origin (those a named upstream's configuration added).
    public static func next(
        after hop: Hop, status: Int, location: String?, hops: Int, following: Bool,
        originBound: Set<String> = []
    ) -> Action {
        guard following, followedStatuses.contains(status), let location else { return .deliver }
        guard hops < maxHops else { return .fail(LarderError(.tooManyRedirects, "more than \(maxHops) redirects")) }
        guard let resolved = URL(string: location, relativeTo: URL(string: hop.url.absoluteString))?.absoluteString else {
            return .fail(LarderError(.upstreamError, "redirect to an invalid location"))
        }
        var next = hop
        do {
            // Parsed (not just resolved) so that a scheme other than http(s) is refused by name.
            next.url = try UpstreamURL(parsing: resolved, field: "location")
        } catch {
            return .fail(LarderError(.upstreamForbidden, "redirect refused: \(error.message)"))
        }
        // §15.4.4: 303 turns anything but HEAD into GET; §15.4.2, §15.4.3: 301 and 302 turn POST
        // into GET (as browsers do).
        if (status == 303 && hop.method != .head) || ((status == 301 || status == 302) && hop.method == .post) {
            next.method = .get
            next.body = nil
            next.headers.removeAll { $0.name.caseInsensitiveEquals("content-type") }
        }
        // §15.4: credentials never follow a redirect to another origin, nor do the fields a
        // named upstream's configuration added (an API key is a credential by another name).
        if !next.url.isSameOrigin(as: hop.url) {
            next.headers.removeAll { field in
                field.name.caseInsensitiveEquals("authorization") || field.name.caseInsensitiveEquals("cookie")
                    || originBound.contains(field.name.lowercasedASCII)
            }
        }
        return .follow(next)
    }
}
