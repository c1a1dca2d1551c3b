// The web console (GET /cache/console): a page, a stylesheet and a script, held in the binary
// as string literals (ConsoleAssets; SwiftPM resources are not embedded on Linux) and served on
// the admin listener. They are served without the admin token: a browser navigating to a page
// cannot send a Bearer header, and these files hold no data. Every call the script makes to the
// admin API sends `Authorization: Bearer <token>` (typed once, kept in the tab's
// sessionStorage), so the data stays behind the token; no cookie is ever set, so a cross-site
// request carries no credential (no CSRF by construction).
//
// Every answer carries a strict Content-Security-Policy: scripts, styles and connections only
// from this origin, no inline script or style, no framing, no form submission. The script
// renders every value from the cache as text (entry bodies and headers are the origin's,
// attacker-chosen), and the policy stops an injected script should one ever slip through.

import LarderCore
import LarderHTTP

struct ConsoleRoute: Sendable {
    /// Whether the admin routes have their own listener (--admin-port). Only then is the console
    /// served: on the main listener it would share an origin with /proxy/NAME/…, where an
    /// upstream's own HTML and scripts run (an upload, a reflected page), and a script of that
    /// origin can read the tab's sessionStorage or register a service worker that sees every
    /// Authorization header the console sends.
    let served: Bool

    static let pagePath = "/cache/console"
    static let scriptPath = "/cache/console/app.js"
    static let stylePath = "/cache/console/app.css"

    /// The policy of every console answer.
    static let contentSecurityPolicy =
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
        + "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

    /// The fields every console answer carries besides its type.
    static let securityHeaders: [(name: String, value: String)] = [
        ("Content-Security-Policy", contentSecurityPolicy),
        ("X-Frame-Options", "DENY"),
        ("X-Content-Type-Options", "nosniff"),
        ("Referrer-Policy", "no-referrer"),
        // The files change with the binary; a browser asks again rather than keep an old script.
        ("Cache-Control", "no-cache")
    ]

    func html() throws(LarderError) -> RouteAnswer? { try answer(Self.page) }
    func javascript() throws(LarderError) -> RouteAnswer? { try answer(Self.scriptFile) }
    func css() throws(LarderError) -> RouteAnswer? { try answer(Self.styleFile) }

    private func answer(_ response: HTTPServerResponse) throws(LarderError) -> RouteAnswer? {
        guard served else {
            throw LarderError(
                .notFound,
                "the console is served on the --admin-port listener only: here it would share an origin with the /proxy routes")
        }
        return RouteAnswer(response)
    }

    // Built once: the files are the binary's, the same for every request.
    private static let page = answer("text/html; charset=utf-8", ConsoleAssets.html)
    private static let scriptFile = answer("application/javascript; charset=utf-8", ConsoleAssets.script)
    private static let styleFile = answer("text/css; charset=utf-8", ConsoleAssets.style)

    private static func answer(_ type: String, _ text: String) -> HTTPServerResponse {
        HTTPServerResponse(status: 200, headers: [("Content-Type", type)] + securityHeaders, body: Array(text.utf8))
    }
}
