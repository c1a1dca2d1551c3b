// Issue 37, the web console: its files served on the admin listener without the token and with a
// strict policy, everything else under /cache still guarded; and the console itself in a real
// browser (headless Chromium through chromedriver, WebDriver.swift) against a real Larder and
// origin: the token typed once, the figures moving, an entry opened and removed, purges counted
// before they go, a warm job followed, cancelled and removed, and an entry whose URL, headers,
// tags and body carry markup shown as text with no script run.
//
// With LARDER_CONSOLE_SCREENSHOTS=DIR, the browser test saves a PNG of each page there
// (docs/console/*.png were taken so).

import Foundation
import LarderService
import LarderServiceTesting
import XCTest

final class ConsoleTests: IntegrationTestCase {
    private let token = "console-test-token-4711"

    override func setUpWithError() throws {
        try super.setUpWithError()
        // The browser reads ages against the real time: the test clock starts when XCTest makes
        // the test case, which may be long before it runs.
        clock.advance(by: Date().timeIntervalSince1970 - clock.now)
    }

    /// Whether `text` starts with `prefix` written with `minutes` minutes for {m}, or one less
    /// (the seconds between storing and reading may round it down).
    private func startsWith(_ text: String, _ prefix: String, minutes: Int) -> Bool {
        [minutes, minutes - 1].contains { text.hasPrefix(prefix.replacingOccurrences(of: "{m}", with: String($0))) }
    }

    private func startGuarded() throws -> (RunningLarder, Int) {
        let larder = try startLarder {
            $0.adminToken = token
            $0.adminPort = 0
            // The server's readings of its counters, often enough to catch the traffic a test sends.
            $0.trafficHistorySeconds = 0.25
            $0.namespaceMaxBytes = ["shop": 8 << 20]
        }
        return (larder, try XCTUnwrap(larder.adminPort))
    }

    func testConsoleFilesAreServedWithoutTheTokenAndWithAStrictPolicy() throws {
        let (larder, adminPort) = try startGuarded()
        let admin = try TestConnection(port: adminPort)
        for (path, type) in [
            ("/cache/console", "text/html; charset=utf-8"), ("/cache/console/app.js", "application/javascript; charset=utf-8"),
            ("/cache/console/app.css", "text/css; charset=utf-8")
        ] {
            for method in ["GET", "HEAD"] {
                let response = try admin.request(method, path)
                XCTAssertEqual(response.status, 200, "\(method) \(path)")
                XCTAssertEqual(response.headers["content-type"], type, path)
                XCTAssertEqual(
                    response.headers["content-security-policy"],
                    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
                        + "base-uri 'none'; form-action 'none'; frame-ancestors 'none'", path)
                XCTAssertEqual(response.headers["x-frame-options"], "DENY", path)
                XCTAssertEqual(response.headers["x-content-type-options"], "nosniff", path)
                XCTAssertEqual(response.headers["referrer-policy"], "no-referrer", path)
                XCTAssertNil(response.headers["set-cookie"], path)
                if method == "GET" { XCTAssertFalse(response.body.isEmpty, path) }
            }
        }
        let page = try admin.request("GET", "/cache/console").text
        XCTAssertTrue(page.contains(#"<script src="/cache/console/app.js" defer></script>"#))
        XCTAssertTrue(page.contains(#"<link rel="stylesheet" href="/cache/console/app.css">"#))
        // Nothing inline for the policy to refuse: no inline script, no style element or attribute.
        XCTAssertNil(page.range(of: #"<script>|<style|\sstyle=|\son[a-z]+="#, options: .regularExpression), page)
        XCTAssertEqual(try admin.request("POST", "/cache/console").status, 405)
        // On the admin listener only, as every /cache route.
        XCTAssertEqual(try larder.connection().request("GET", "/cache/console").status, 404)
    }

    func testEverythingElseUnderCacheStillNeedsTheToken() throws {
        let (_, adminPort) = try startGuarded()
        let admin = try TestConnection(port: adminPort)
        for path in [
            "/cache/consolex", "/cache/console/", "/cache/console/../stats", "/cache/console/app.js/../../stats",
            "/cache/console%2F..%2Fstats", "/cache/console/app.jsx", "/cache/console/app.js?x=/../stats", "/cache/console/x",
            "/cache/stats", "/cache/entries", "/cache/warm"
        ] {
            let response = try admin.request("GET", path)
            if path.hasPrefix("/cache/console/app.js?") {
                XCTAssertEqual(response.status, 200, "a query does not change the path: \(path)")
                continue
            }
            XCTAssertEqual(response.status, 401, path)
            XCTAssertEqual(response.errorCode, "unauthorized", path)
            XCTAssertNil(response.headers["content-security-policy"], path)
        }
        XCTAssertEqual(try admin.request("DELETE", "/cache/console/../../cache?all=true").status, 401)
        let withToken = try admin.request("GET", "/cache/stats", headers: ["Authorization": "Bearer \(token)"])
        XCTAssertEqual(withToken.status, 200)
    }

    // MARK: In a real browser

    private var screenshotsWanted: Bool { !(ProcessInfo.processInfo.environment["LARDER_CONSOLE_SCREENSHOTS"] ?? "").isEmpty }

    private func screenshot(_ driver: WebDriver, _ name: String) throws {
        guard let directory = ProcessInfo.processInfo.environment["LARDER_CONSOLE_SCREENSHOTS"], !directory.isEmpty else { return }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try driver.screenshot().write(to: URL(fileURLWithPath: directory).appendingPathComponent("\(name).png"))
    }

    /// Opens the console and signs in with the token.
    private func signIn(_ driver: WebDriver, adminPort: Int) throws {
        try driver.navigate("http://127.0.0.1:\(adminPort)/cache/console")
        try driver.wait(for: "!document.getElementById('login').hidden", "the token form")
        XCTAssertNil(try driver.execute("return sessionStorage.getItem('larder.console.token')") as? String)
        try driver.type(token, into: "#token")
        try driver.click("#login-submit")
        try driver.wait(for: "document.querySelector('#stat-entries .value')", "the overview")
    }

    /// The literal text of the entries' count on the overview.
    private func entriesShown(_ count: Int) -> String {
        "document.querySelector('#stat-entries .value') && document.querySelector('#stat-entries .value').textContent === '\(count)'"
    }

    func testTheConsoleInARealBrowser() throws {
        let (larder, adminPort) = try startGuarded()
        let client = try larder.connection()
        let admin = try TestConnection(port: adminPort)
        let driver = try WebDriver()
        defer { driver.quit() }
        try signIn(driver, adminPort: adminPort)
        try driver.wait(for: entriesShown(0), "no entries yet")
        // The token: in this tab's sessionStorage, and never in the address.
        XCTAssertEqual(try driver.execute("return sessionStorage.getItem('larder.console.token')") as? String, token)
        XCTAssertEqual(try driver.execute("return document.cookie") as? String, "")
        XCTAssertFalse((try driver.execute("return location.href") as? String ?? "").contains(token))
        // Typed once: a reload in the same tab opens the console without asking again.
        try driver.execute("window.__beforeReload = true")
        try driver.command("POST", "/refresh", [:])
        try driver.wait(
            for: "window.__beforeReload === undefined && " + entriesShown(0) + " && document.getElementById('login').hidden",
            "the overview after a reload")

        // The figures move with /fetch calls.
        let base = uniquePath()
        var keys: [String: String] = [:]
        for (name, tags) in [("a", ["catalog"]), ("b", ["catalog"]), ("c", ["news"])] {
            let response = try client.fetch([
                "url": url("\(base)/\(name)", "cc=max-age%3D3600&etag=%22\(name)1%22"), "cache": ["tags": tags, "namespace": "shop"]
            ])
            XCTAssertEqual(response.outcome, "miss")
            keys[name] = response.cache["key"] as? String
            let again = try client.fetch([
                "url": url("\(base)/\(name)", "cc=max-age%3D3600&etag=%22\(name)1%22"), "cache": ["tags": tags, "namespace": "shop"]
            ])
            XCTAssertEqual(again.outcome, "hit")
        }
        try driver.wait(for: entriesShown(3), "3 entries on the overview")
        try driver.wait(
            for: "[...document.querySelectorAll('.namespace-row')].some((row) => row.textContent.startsWith('shop') && "
                + "row.textContent.includes('(0 evicted)'))",
            "the budget of namespace shop")
        try driver.wait(for: "document.querySelector('#hit-chart polyline')", "the hit-ratio line")
        if screenshotsWanted {
            // Some traffic of a changing hit ratio over a few reads, for a chart worth showing.
            // (Misses by reload, which replace the same three entries.)
            for round in 1...6 {
                for index in 0..<(2 + round % 3) {
                    let name = ["a", "b", "c"][index % 3]
                    var cache: [String: Any] = ["tags": name == "c" ? ["news"] : ["catalog"], "namespace": "shop"]
                    if index == 0 { cache["policy"] = "reload" }
                    _ = try client.fetch(["url": url("\(base)/\(name)", "cc=max-age%3D3600&etag=%22\(name)1%22"), "cache": cache])
                }
                try driver.wait(for: "document.querySelectorAll('#hit-chart circle').length > \(round)", "read \(round) in the chart")
            }
        }
        try screenshot(driver, "overview")
        // Opened again with no traffic since, the chart starts with the server's past readings: a
        // page that only charted its own reads would show no line until new requests came.
        try driver.execute("window.__beforeHistory = true")
        try driver.command("POST", "/refresh", [:])
        try driver.wait(for: "window.__beforeHistory === undefined && " + entriesShown(3), "the overview opened again")
        try driver.wait(for: "document.querySelector('#hit-chart polyline')", "the past minutes' line from /cache/stats/history")

        // The listing, then one entry.
        try driver.click("#nav-entries")
        try driver.wait(for: "document.querySelectorAll('.entry-row').length === 3", "3 rows")
        try screenshot(driver, "entries")
        try driver.type("news", into: "#filter-tag")
        try driver.click("#entries-apply")
        try driver.wait(for: "document.querySelectorAll('.entry-row').length === 1", "the filtered row")
        try driver.type("", into: "#filter-tag")
        try driver.click("#entries-apply")
        try driver.wait(for: "document.querySelectorAll('.entry-row').length === 3", "3 rows again")
        let key = try XCTUnwrap(keys["a"])
        try driver.click(".entry-row[data-key='\(key)']")
        try driver.wait(
            for: "document.getElementById('entry-key') && document.getElementById('entry-key').textContent === '\(key)'", "entry a")
        let freshness = try driver.text(".freshness")
        XCTAssertTrue(startsWith(freshness, "fresh for {m} min: max-age=3600 from the origin", minutes: 60), freshness)
        XCTAssertTrue(try driver.text(".body-preview").contains(#""path": "\#(base)/a""#), "JSON pretty-printed")
        XCTAssertTrue(try driver.text(".tags").contains("catalog"))
        try screenshot(driver, "entry")

        // Removed from its page, after a confirmation.
        try driver.click("#entry-remove")
        try driver.wait(for: "document.querySelector('.confirm-message')", "the confirmation")
        XCTAssertTrue(try driver.text(".confirm-message").contains("1 variant(s) will go"))
        try driver.click(".confirm-yes")
        try driver.wait(for: "document.querySelectorAll('.entry-row').length === 2", "2 rows once it is gone")
        let removed = try admin.request("GET", "/cache/entries/\(key)", headers: ["Authorization": "Bearer \(token)"])
        XCTAssertEqual(removed.errorCode, "not_found", removed.text)
        try driver.click("#nav-overview")
        try driver.wait(for: entriesShown(2), "2 entries on the overview")

        // A purge by tag says how many entries will go before it goes.
        try driver.click("#nav-actions")
        try driver.type("catalog", into: "#purge-tag-form input[name=tag]")
        try driver.click("#purge-tag-form button")
        try driver.wait(for: "document.querySelector('#purge-tag .confirm-message')", "the count")
        XCTAssertTrue(try driver.text("#purge-tag .confirm-message").contains("will remove 1 entry"))
        try driver.type("shop", into: "#purge-filter-form input[name=namespace]")
        try driver.click("#purge-filter-count")
        try driver.wait(for: "document.querySelector('#purge-filter .confirm-message')", "the filter's count")
        XCTAssertTrue(try driver.text("#purge-filter .confirm-message").contains("will remove 2 entries"))
        try driver.wait(for: "document.querySelector('.namespace-bump')", "the namespaces")
        try screenshot(driver, "actions")
        try driver.click("#purge-tag .confirm-yes")
        try driver.wait(for: "document.querySelector('#purge-tag .action-result')", "the purge's answer")
        XCTAssertTrue(try driver.text("#purge-tag .action-result").hasPrefix("Removed 1 entry ("))

        // A soft purge by URL, counted by the URL as listed: the entry stays, marked stale.
        try driver.type(url("\(base)/c", "cc=max-age%3D3600&etag=%22c1%22"), into: "#purge-url-form textarea")
        try driver.click("#purge-url-form input[name=soft]")
        try driver.click("#purge-url-form button")
        try driver.wait(for: "document.querySelector('#purge-url .confirm-message')", "the URL's count")
        XCTAssertTrue(try driver.text("#purge-url .confirm-message").contains("will mark stale 1 entry"))
        try driver.click("#purge-url .confirm-yes")
        try driver.wait(for: "document.querySelector('#purge-url .action-result')", "the URL purge's answer")
        XCTAssertTrue(try driver.text("#purge-url .action-result").hasPrefix("Marked 1 entry stale"))
        let left = try admin.request("GET", "/cache/entries", headers: ["Authorization": "Bearer \(token)"])
        let kept = try XCTUnwrap((left.json["entries"] as? [[String: Any]])?.first, left.text)
        XCTAssertEqual((left.json["entries"] as? [Any])?.count, 1, left.text)
        XCTAssertEqual(kept["expiresAt"] as? String, kept["storedAt"] as? String, "stale from the purge on (the test clock stands still)")

        // A namespace's version bumped.
        try driver.click(".namespace-bump")
        try driver.wait(for: "document.querySelector('#namespaces .confirm-yes')", "the bump's confirmation")
        XCTAssertTrue(try driver.text("#namespaces .confirm-message").contains("Bump namespace shop from version 0 to 1"))
        try driver.click("#namespaces .confirm-yes")
        try driver.wait(for: "document.querySelector('#namespaces .action-result')", "the bump's answer")
        XCTAssertEqual(try driver.text("#namespaces .action-result"), "Namespace shop is at version 1 (was 0).")

        // A warm job followed live and cancelled while its request is held at the origin.
        let held = "\(base)/warm"
        try driver.type(url(held, "hold=gate"), into: "#warm-form textarea")
        try driver.click("#warm-form button")
        try driver.wait(for: "document.querySelector('.warm-job[data-state=running] .warm-cancel')", "the running job")
        XCTAssertTrue(origin.holds.waitForHeld(held, count: 1))
        try driver.click(".warm-job[data-state=running] .warm-cancel")
        try driver.wait(for: "document.querySelector('.warm-job[data-state=cancelled] .warm-remove')", "the cancelled job")
        origin.holds.release(held)
        // Finished, it can be removed.
        try driver.click(".warm-job[data-state=cancelled] .warm-remove")
        try driver.wait(for: "!document.querySelector('.warm-job')", "the job removed")
        XCTAssertEqual(driver.browserLog().filter { $0.contains("Content Security Policy") }, [])

        // Forgetting the token takes the tab back to the form, and the API calls stop working.
        try driver.click("#forget")
        try driver.wait(for: "!document.getElementById('login').hidden", "the token form again")
        XCTAssertNil(try driver.execute("return sessionStorage.getItem('larder.console.token')") as? String)
    }

    func testEntriesPageByCursorAndABinaryBodyIsShownInHex() throws {
        let (_, adminPort) = try startGuarded()
        let admin = try TestConnection(port: adminPort)
        let auth = ["Authorization": "Bearer \(token)", "Content-Type": "application/json"]
        let base = uniquePath()
        for index in 0..<30 {
            let body: [String: Any] = [
                "request": ["url": url("\(base)/\(index)")], "cache": ["ttl": 600],
                "response": ["status": 200, "bodyText": "entry \(index)", "headers": ["content-type": "text/plain"]]
            ]
            let put = try admin.request(
                "PUT", "/cache/entries", headers: auth, body: Array(try JSONSerialization.data(withJSONObject: body)))
            XCTAssertEqual(put.status, 201, put.text)
        }
        let binary: [String: Any] = [
            "request": ["url": url("\(base)/binary")], "cache": ["ttl": 600],
            "response": ["status": 200, "bodyBase64": "/wD+AYA=", "headers": ["content-type": "application/octet-stream"]]
        ]
        let put = try admin.request("PUT", "/cache/entries", headers: auth, body: Array(try JSONSerialization.data(withJSONObject: binary)))
        let key = try XCTUnwrap(put.json["key"] as? String, put.text)

        let driver = try WebDriver()
        defer { driver.quit() }
        try signIn(driver, adminPort: adminPort)
        try driver.click("#nav-entries")
        try driver.wait(for: "document.querySelectorAll('.entry-row').length === 31", "31 rows on one page of 50")
        try driver.execute("document.getElementById('filter-limit').value = '25'")
        try driver.click("#entries-apply")
        try driver.wait(for: "document.querySelectorAll('.entry-row').length === 25", "a page of 25")
        let firstPage =
            try driver.execute("return [...document.querySelectorAll('.entry-row')].map((r) => r.dataset.key)") as? [String] ?? []
        try driver.click("#entries-next")
        try driver.wait(for: "document.querySelectorAll('.entry-row').length === 6", "the last 6")
        let secondPage =
            try driver.execute("return [...document.querySelectorAll('.entry-row')].map((r) => r.dataset.key)") as? [String] ?? []
        XCTAssertEqual(Set(firstPage + secondPage).count, 31, "no entry twice, none missing")
        XCTAssertEqual(try driver.execute("return document.getElementById('entries-next').disabled") as? Bool, true)
        try driver.click("#entries-previous")
        try driver.wait(for: "document.querySelectorAll('.entry-row').length === 25", "the first page again")

        try driver.navigate("http://127.0.0.1:\(adminPort)/cache/console#entry/\(key)")
        try driver.wait(for: "document.querySelector('.body-preview')", "the binary entry")
        XCTAssertEqual(try driver.text(".body-preview"), "00000000  ff 00 fe 01 80" + String(repeating: " ", count: 48 - 14) + "  .....")
        let freshness = try driver.text(".freshness")
        XCTAssertTrue(startsWith(freshness, "fresh for {m} min: a lifetime of 10 min from the caller's cache.ttl", minutes: 10), freshness)
        // A link's key of `..` would climb out of /cache/entries/ once the browser resolves the path.
        try driver.navigate("http://127.0.0.1:\(adminPort)/cache/console#entry/..")
        try driver.wait(for: "document.getElementById('entry-error')", "the refusal")
        XCTAssertEqual(try driver.text("#entry-error"), "not a cache key: ..")
    }

    /// Without --admin-port the console would share its origin with /proxy/NAME/…, whose upstream
    /// pages could read the token: it is not served there.
    func testWithoutAnAdminPortTheConsoleIsNotServed() throws {
        let larder = try startLarder { $0.adminToken = String(repeating: "a", count: 32) }
        let main = try larder.connection()
        for path in ["/cache/console", "/cache/console/app.js", "/cache/console/app.css"] {
            let response = try main.request("GET", path)
            XCTAssertEqual(response.status, 404, path)
            XCTAssertTrue(response.text.contains("--admin-port"), response.text)
        }
    }

    func testWithoutAnAdminTokenTheConsoleOpensAtOnce() throws {
        let larder = try startLarder { $0.adminPort = 0 }
        let driver = try WebDriver()
        defer { driver.quit() }
        try driver.navigate("http://127.0.0.1:\(try XCTUnwrap(larder.adminPort))/cache/console")
        try driver.wait(for: entriesShown(0), "the overview without a token form")
        XCTAssertEqual(try driver.execute("return document.getElementById('login').hidden") as? Bool, true)
        XCTAssertEqual(try driver.execute("return document.getElementById('forget').hidden") as? Bool, true)
    }

    func testMarkupFromTheCacheIsShownAsTextAndNeverRuns() throws {
        let (larder, adminPort) = try startGuarded()
        let client = try larder.connection()
        let script = "<script>document.title='pwned';window.__pwned=1</script>"
        let image = #""><img src=x onerror="window.__pwned=2;document.title='pwned'">"#
        let encoded = { (text: String) in text.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? "" }
        let fetched = try client.fetch([
            "url": url(uniquePath(), "ct=text/html&cc=max-age%3D600&s=\(encoded(script))&h=X-Payload:\(encoded(image))"),
            "cache": ["tags": ["<script>window.__pwned=3</script>"]]
        ])
        XCTAssertEqual(fetched.outcome, "miss")
        let key = try XCTUnwrap(fetched.cache["key"] as? String)

        let driver = try WebDriver()
        defer { driver.quit() }
        try signIn(driver, adminPort: adminPort)
        try driver.click("#nav-entries")
        try driver.wait(for: "document.querySelectorAll('.entry-row').length === 1", "the entry's row")
        XCTAssertTrue(try driver.text(".entry-row").contains("<script>window.__pwned=3</script>"), "the tag as text")
        try driver.click(".entry-row")
        try driver.wait(for: "document.getElementById('entry-key') && document.querySelector('.body-preview')", "the entry")
        XCTAssertEqual(try driver.text("#entry-key"), key)
        let headerShown =
            try driver.execute(
                "return [...document.querySelectorAll('.header-value')].map((td) => td.textContent)") as? [String] ?? []
        XCTAssertTrue(headerShown.contains(image), "\(headerShown)")
        XCTAssertTrue(try driver.text(".body-preview").contains("<script>document.title='pwned'"))
        let page =
            try driver.execute(
                """
                return { title: document.title, pwned: typeof window.__pwned, images: document.querySelectorAll('img').length,
                         scripts: [...document.querySelectorAll('script')].map((s) => s.getAttribute('src')) };
                """) as? [String: Any] ?? [:]
        XCTAssertEqual(page["title"] as? String, "Larder console")
        XCTAssertEqual(page["pwned"] as? String, "undefined")
        XCTAssertEqual(page["images"] as? Int, 0)
        XCTAssertEqual(page["scripts"] as? [String], ["/cache/console/app.js"])
        try driver.execute("console.error('larder-console-log-probe')")
        let log = driver.browserLog()
        XCTAssertTrue(log.contains { $0.contains("larder-console-log-probe") }, "the browser's log is read: \(log)")
        XCTAssertEqual(log.filter { $0.contains("Content Security Policy") }, [], "nothing inline was even tried")
        // And the browser enforces the policy: an inline script put into the page does not run.
        let inline =
            try driver.execute(
                """
                const script = document.createElement('script');
                script.textContent = 'window.__inline = 1';
                document.body.appendChild(script);
                return typeof window.__inline;
                """) as? String
        XCTAssertEqual(inline, "undefined")
        XCTAssertTrue(driver.browserLog().contains { $0.contains("Content Security Policy") }, "the refusal is logged")
    }
}
