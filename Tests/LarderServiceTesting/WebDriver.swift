// A real browser for the console's tests: Debian's headless Chromium driven through chromedriver
// over the W3C WebDriver protocol (HTTP and JSON on a loopback port), with the test client below
// (TestConnection). No Selenium: the protocol is a dozen JSON commands.

import Foundation
import XCTest

public final class WebDriver {
    public static let chromedriver = "/usr/bin/chromedriver"
    public static let chromium = "/usr/bin/chromium"
    /// The key under which WebDriver names an element (W3C WebDriver §12.2).
    private static let elementKey = "element-6066-11e4-a52e-4f735466cecf"

    private let process: Process
    private let port: Int
    private var session = ""

    /// Starts chromedriver on a free loopback port and opens a headless Chromium session; a skip
    /// (a failure under scripts/test) when Debian's chromium and chromium-driver are missing.
    public init(windowWidth: Int = 1280, windowHeight: Int = 900) throws {
        for tool in [Self.chromedriver, Self.chromium] where !FileManager.default.isExecutableFile(atPath: tool) {
            throw skipOrFail("\(tool) is missing (apt-get install chromium chromium-driver; scripts/setup with LARDER_SETUP_TESTS=1)")
        }
        port = IntegrationTestCase.freeLoopbackPort()
        process = Process()
        process.executableURL = URL(fileURLWithPath: Self.chromedriver)
        process.arguments = ["--port=\(port)"]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        // chromedriver says when it listens.
        var seen = ""
        while !seen.contains("started successfully") {
            let chunk = output.fileHandleForReading.availableData
            guard !chunk.isEmpty else { throw TestClientError(description: "chromedriver exited: \(seen)") }
            seen += String(decoding: chunk, as: UTF8.self)
        }
        let arguments = [
            // Root in a container has no user namespaces for Chromium's sandbox.
            "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
            "--window-size=\(windowWidth),\(windowHeight)", "--lang=en-GB"
        ]
        let capabilities: [String: Any] = [
            "capabilities": [
                "alwaysMatch": [
                    "browserName": "chrome",
                    "goog:loggingPrefs": ["browser": "ALL"],
                    "goog:chromeOptions": ["binary": Self.chromium, "args": arguments]
                ]
            ]
        ]
        let created = try command("POST", "/session", capabilities, sessionPath: false) as? [String: Any]
        guard let id = created?["sessionId"] as? String else {
            throw TestClientError(description: "no session: \(String(describing: created))")
        }
        session = id
        _ = try command("POST", "/timeouts", ["script": 60_000, "implicit": 0, "pageLoad": 30_000])
    }

    deinit { quit() }

    /// Ends the session and chromedriver (which ends Chromium).
    public func quit() {
        guard process.isRunning else { return }
        if !session.isEmpty { _ = try? command("DELETE", "", nil) }
        process.terminate()
        process.waitUntilExit()
    }

    /// One WebDriver command; returns its `value`.
    @discardableResult
    public func command(_ method: String, _ path: String, _ body: Any?, sessionPath: Bool = true) throws -> Any? {
        let connection = try TestConnection(port: port, timeoutSeconds: 90)
        let payload = try body.map { try JSONSerialization.data(withJSONObject: $0) }.map(Array.init) ?? []
        let target = sessionPath ? "/session/\(session)\(path)" : path
        let headers = payload.isEmpty ? [:] : ["Content-Type": "application/json; charset=utf-8"]
        let response = try connection.request(method, target, headers: headers, body: payload)
        let value = response.json["value"]
        guard response.status == 200 else {
            throw TestClientError(description: "WebDriver \(method) \(path): \(response.status) \(response.text.prefix(600))")
        }
        return value
    }

    public func navigate(_ url: String) throws { try command("POST", "/url", ["url": url]) }

    /// The first element matching a CSS selector.
    public func element(_ selector: String) throws -> String {
        let found = try command("POST", "/element", ["using": "css selector", "value": selector]) as? [String: Any]
        guard let id = found?[Self.elementKey] as? String else { throw TestClientError(description: "no element \(selector)") }
        return id
    }

    public func click(_ selector: String) throws {
        try onFreshElement(selector) { id in try command("POST", "/element/\(id)/click", [:]) }
    }

    public func type(_ text: String, into selector: String) throws {
        try onFreshElement(selector) { id in
            try command("POST", "/element/\(id)/clear", [:])
            try command("POST", "/element/\(id)/value", ["text": text])
        }
    }

    public func text(_ selector: String) throws -> String {
        try onFreshElement(selector) { id in try command("GET", "/element/\(id)/text", nil) as? String ?? "" }
    }

    /// Runs `body` on the element `selector` finds, finding it again when the page replaced it
    /// in between (the console redraws what it shows as it reads the server: "stale element
    /// reference"), a few times at most.
    private func onFreshElement<Result>(_ selector: String, _ body: (String) throws -> Result) throws -> Result {
        var attempt = 0
        while true {
            do {
                return try body(try element(selector))
            } catch let error as TestClientError where error.description.contains("stale element reference") && attempt < 5 {
                attempt += 1
            }
        }
    }

    /// Runs `script` (a function body; `arguments` as given) in the page and returns its value.
    public func execute(_ script: String, _ arguments: [Any] = []) throws -> Any? {
        try command("POST", "/execute/sync", ["script": script, "args": arguments])
    }

    /// Waits until the JavaScript expression `condition` is true in the page: checked now and
    /// after every change of the document (a MutationObserver), so the wait ends the moment
    /// the page shows it, not on a timer. Throws with `description` when it is not within
    /// `timeout` seconds.
    public func wait(for condition: String, _ description: String, timeout: Double = 20) throws {
        let script = """
            const done = arguments[arguments.length - 1];
            const check = () => { try { return Boolean(\(condition)); } catch (error) { return false; } };
            if (check()) { done(true); return; }
            const observer = new MutationObserver(() => {
              if (check()) { observer.disconnect(); clearTimeout(timer); done(true); }
            });
            observer.observe(document, { subtree: true, childList: true, characterData: true, attributes: true });
            const timer = setTimeout(() => { observer.disconnect(); done(check()); }, \(Int(timeout * 1000)));
            """
        let met = try command("POST", "/execute/async", ["script": script, "args": []]) as? Bool
        guard met == true else {
            let page = (try? execute("return document.body ? document.body.innerText : ''") as? String) ?? ""
            throw TestClientError(description: "timed out waiting for \(description); the page shows: \(page.prefix(1500))")
        }
    }

    /// A PNG of the window.
    public func screenshot() throws -> Data {
        guard let base64 = try command("GET", "/screenshot", nil) as? String, let png = Data(base64Encoded: base64) else {
            throw TestClientError(description: "no screenshot")
        }
        return png
    }

    /// The browser's console messages since the last call (Chromium's log, not W3C).
    public func browserLog() -> [String] {
        let entries = (try? command("POST", "/se/log", ["type": "browser"])) as? [[String: Any]] ?? []
        return entries.compactMap { $0["message"] as? String }
    }
}
