// `larder cache …`: the admin API for humans, talking to a running server. Every command takes
// --server and --token (or LARDER_SERVER, LARDER_ADMIN_TOKEN) and --json for scripts.

import ArgumentParser
import Dispatch
import Foundation
import LarderCurl
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

struct Cache: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Look at and manage a running Larder's cache (the /cache admin API).",
        subcommands: [Stats.self, List.self, Show.self, Purge.self, Warm.self])
}

struct ServerOptions: ParsableArguments {
    @Option(help: "The Larder to talk to (env LARDER_SERVER; default http://127.0.0.1:8080).")
    var server: String?

    @Option(help: "The admin token (env LARDER_ADMIN_TOKEN).")
    var token: String?

    @Flag(help: "Print the server's JSON instead of a table.")
    var json = false

    var base: String { Self.base(server) }

    /// `--server`, else LARDER_SERVER, else the default, without a trailing slash.
    static func base(_ server: String?) -> String {
        let chosen = server ?? ProcessInfo.processInfo.environment["LARDER_SERVER"] ?? "http://127.0.0.1:8080"
        return chosen.hasSuffix("/") ? String(chosen.dropLast()) : chosen
    }

    /// Sends one admin request; the JSON answer on 2xx, else the server's error on stderr and exit 1.
    func call(_ method: String, _ path: String, body: Any? = nil) throws -> Any? {
        var headers: [(String, String)] = []
        if let token = token ?? ProcessInfo.processInfo.environment["LARDER_ADMIN_TOKEN"], !token.isEmpty {
            headers.append(("Authorization", "Bearer \(token)"))
        }
        var bytes: [UInt8]?
        if let body {
            bytes = Array(try JSONSerialization.data(withJSONObject: body))
            headers.append(("Content-Type", "application/json"))
        }
        let response: BlockingHTTPResponse
        do {
            response = try BlockingHTTPClient.send(method, base + path, headers: headers, body: bytes)
        } catch {
            throw CLIError("cannot reach \(base): \(error.description)")
        }
        let parsed = response.body.isEmpty ? nil : try? JSONSerialization.jsonObject(with: Data(response.body))
        guard (200...299).contains(response.status) else {
            let error = (parsed as? [String: Any])?["error"] as? [String: Any]
            let message = error.map {
                "\($0["code"] ?? "error"): \($0["message"] ?? "")" + (($0["field"] as? String).map { " (\($0))" } ?? "")
            }
            throw CLIError("\(method) \(path) → \(response.status) \(message ?? String(decoding: response.body, as: UTF8.self))")
        }
        return parsed
    }

    func printJSON(_ value: Any) {
        if let data = try? JSONSerialization.data(withJSONObject: value, options: [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]) {
            print(String(decoding: data, as: UTF8.self))
        }
    }
}

struct CLIError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Runs `body`, printing a CLIError on stderr and exiting 1 instead of a stack of context.
func reporting(_ body: () throws -> Void) throws {
    do {
        try body()
    } catch let error as CLIError {
        FileHandle.standardError.write(Data("larder: \(error.description)\n".utf8))
        throw ExitCode(1)
    }
}

enum Format {
    static func bytes(_ value: Any?) -> String {
        let count = Double((value as? Int) ?? Int((value as? Double) ?? 0))
        let units = ["B", "KiB", "MiB", "GiB", "TiB"]
        var scaled = count
        var unit = 0
        while scaled >= 1024, unit < units.count - 1 {
            scaled /= 1024
            unit += 1
        }
        return unit == 0 ? "\(Int(count)) B" : String(format: "%.1f %@", scaled, units[unit])
    }

    static func number(_ value: Any?) -> String {
        if let int = value as? Int { return String(int) }
        if let double = value as? Double { return double == double.rounded() ? String(Int(double)) : String(format: "%.3f", double) }
        return "-"
    }

    static func seconds(_ value: Any?) -> Double? { (value as? Double) ?? (value as? Int).map(Double.init) }

    static func age(since time: Any?) -> String {
        guard let time = seconds(time) else { return "-" }
        let age = max(0, Date().timeIntervalSince1970 - time)
        switch age {
        case ..<120: return "\(Int(age))s"
        case ..<7200: return "\(Int(age / 60))m"
        case ..<172_800: return "\(Int(age / 3600))h"
        default: return "\(Int(age / 86_400))d"
        }
    }

    static func table(_ rows: [[String]]) -> String {
        guard let first = rows.first else { return "" }
        var widths = Array(repeating: 0, count: first.count)
        for row in rows {
            for (index, cell) in row.enumerated() where index < widths.count { widths[index] = max(widths[index], cell.count) }
        }
        return rows.map { row in
            row.enumerated().map { index, cell in
                index == row.count - 1 ? cell : cell.padding(toLength: widths[index], withPad: " ", startingAt: 0)
            }.joined(separator: "  ")
        }.joined(separator: "\n")
    }

    static func query(_ pairs: [(String, String?)]) -> String {
        let allowed = CharacterSet.alphanumerics.union(CharacterSet(charactersIn: "-._~"))
        let parts = pairs.compactMap { name, value in
            value.map { "\(name)=\($0.addingPercentEncoding(withAllowedCharacters: allowed) ?? $0)" }
        }
        return parts.isEmpty ? "" : "?" + parts.joined(separator: "&")
    }
}

extension Cache {
    struct Stats: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "What is stored, and the traffic since the server started.")
        @OptionGroup var options: ServerOptions
        @Option(help: "Stored figures of one namespace.") var namespace: String?

        func run() throws {
            try reporting {
                let stats = try options.call("GET", "/cache/stats" + Format.query([("namespace", namespace)])) as? [String: Any] ?? [:]
                if options.json { return options.printJSON(stats) }
                let stored = stats["stored"] as? [String: Any] ?? [:]
                let tier = stats["memoryTier"] as? [String: Any] ?? [:]
                let traffic = stats["sinceStart"] as? [String: Any] ?? [:]
                let capacity = Format.seconds(stored["capacityBytes"])
                let used =
                    capacity.map {
                        String(
                            format: " (%.1f%% of %@)", 100 * (Format.seconds(stored["bytes"]) ?? 0) / $0,
                            Format.bytes(stored["capacityBytes"]))
                    } ?? ""
                var rows: [[String]] = [
                    ["stored", "\(Format.number(stored["entries"])) entries, \(Format.bytes(stored["bytes"]))\(used)"],
                    ["", "\(Format.number(stored["evictions"])) evicted, \(Format.number(stored["expiredRemovals"])) expired since start"],
                    ["memory tier", "\(Format.bytes(tier["bytes"])) of \(Format.bytes(tier["capacityBytes"]))"],
                    [
                        "since start",
                        ["requests", "hits", "misses", "stale", "revalidated", "bypass", "coalesced"]
                            .map { "\($0) \(Format.number(traffic[$0]))" }.joined(separator: ", ")
                    ],
                    ["hit ratio", Format.seconds(traffic["hitRatio"]).map { String(format: "%.1f%%", $0 * 100) } ?? "-"]
                ]
                let errors = (traffic["errors"] as? [String: Any] ?? [:]).sorted { $0.key < $1.key }
                if !errors.isEmpty {
                    rows.append(["errors", errors.map { "\($0.key) \(Format.number($0.value))" }.joined(separator: ", ")])
                }
                print(Format.table(rows))
                let namespaces = (stored["namespaces"] as? [String: [String: Any]] ?? [:]).sorted { $0.key < $1.key }
                if !namespaces.isEmpty {
                    print("")
                    print(
                        Format.table(
                            [["NAMESPACE", "ENTRIES", "BYTES"]]
                                + namespaces.map { [$0.key, Format.number($0.value["entries"]), Format.bytes($0.value["bytes"])] }))
                }
            }
        }
    }

    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "ls", abstract: "List stored entries (every page, or up to --limit).")
        @OptionGroup var options: ServerOptions
        @Option var namespace: String?
        @Option var urlPrefix: String?
        @Option var host: String?
        @Option var tag: String?
        @Option var status: Int?
        @Option(help: "At most this many entries.") var limit: Int?

        func run() throws {
            try reporting {
                var entries: [[String: Any]] = []
                var cursor: String?
                repeat {
                    let page = min(1000, (limit ?? Int.max) - entries.count)
                    let query = Format.query([
                        ("namespace", namespace), ("urlPrefix", urlPrefix), ("host", host), ("tag", tag),
                        ("status", status.map(String.init)), ("limit", String(page)), ("cursor", cursor)
                    ])
                    let answer = try options.call("GET", "/cache/entries" + query) as? [String: Any] ?? [:]
                    entries += answer["entries"] as? [[String: Any]] ?? []
                    cursor = answer["nextCursor"] as? String
                } while cursor != nil && entries.count < (limit ?? Int.max)
                if options.json { return options.printJSON(entries) }
                let rows = entries.map { entry -> [String] in
                    [
                        String((entry["key"] as? String ?? "").prefix(16)), Format.number(entry["status"]), Format.bytes(entry["bytes"]),
                        Format.age(since: entry["storedAt"]), Format.number(entry["hits"]), entry["namespace"] as? String ?? "",
                        (entry["tags"] as? [String] ?? []).joined(separator: ","), entry["url"] as? String ?? ""
                    ]
                }
                print(Format.table([["KEY", "STATUS", "BYTES", "AGE", "HITS", "NAMESPACE", "TAGS", "URL"]] + rows))
                print("\(entries.count) entr\(entries.count == 1 ? "y" : "ies")")
            }
        }
    }

    struct Show: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Every variant stored under one key.")
        @OptionGroup var options: ServerOptions
        @Argument(help: "The key, as /fetch reports it (cache.key) or `larder cache ls --json` lists it.") var key: String
        @Flag(help: "Include each variant's stored response.") var body = false

        func run() throws {
            try reporting {
                let allowed = CharacterSet.alphanumerics.union(CharacterSet(charactersIn: "-._~"))
                let path = "/cache/entries/\(key.addingPercentEncoding(withAllowedCharacters: allowed) ?? key)" + (body ? "?body=true" : "")
                let shown = try options.call("GET", path) as? [String: Any] ?? [:]
                if options.json { return options.printJSON(shown) }
                for variant in shown["variants"] as? [[String: Any]] ?? [] {
                    var rows: [[String]] = []
                    for name in [
                        "key", "variantKey", "namespace", "method", "url", "status", "bytes", "version", "hits", "etag",
                        "lastModified"
                    ] where !(variant[name] is NSNull) && variant[name] != nil {
                        rows.append([name, name == "bytes" ? Format.bytes(variant[name]) : "\(variant[name]!)"])
                    }
                    rows.append(["stored", "\(Format.age(since: variant["storedAt"])) ago"])
                    let now = Date().timeIntervalSince1970
                    if let expires = Format.seconds(variant["expiresAt"]) {
                        rows.append(["fresh", expires > now ? "for \(Int(expires - now))s more" : "no (stale for \(Int(now - expires))s)"])
                    }
                    for name in ["tags", "varies"] {
                        let values = variant[name] as? [String] ?? []
                        if !values.isEmpty { rows.append([name, values.joined(separator: ", ")]) }
                    }
                    print(Format.table(rows))
                    if let response = variant["response"] as? [String: Any] {
                        for (name, value) in (response["headers"] as? [String: Any] ?? [:]).sorted(by: { $0.key < $1.key }) {
                            print("  \(name): \(value)")
                        }
                        if let text = response["bodyText"] as? String {
                            print(text)
                        } else if let base64 = response["bodyBase64"] as? String {
                            print("(\(Data(base64Encoded: base64)?.count ?? 0) bytes of binary body)")
                        } else if let json = response["body"] {
                            options.printJSON(json)
                        }
                    }
                    print("")
                }
            }
        }
    }

    struct Purge: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Remove stored entries by filter (AND), by URL, or all of them.")
        @OptionGroup var options: ServerOptions
        @Option var namespace: String?
        @Option var urlPrefix: String?
        @Option var host: String?
        @Option var tag: String?
        @Option(help: "Seconds since stored.") var olderThan: Double?
        @Option var versionBelow: Int?
        @Flag(help: "Entries past their freshness and every stale window.") var expired = false
        @Option(name: .customLong("url"), help: "Remove this URL's entries in every namespace (repeatable).") var urls: [String] = []
        @Flag(help: "Remove everything.") var all = false
        @Flag(help: "Do not ask before --all.") var yes = false

        func run() throws {
            try reporting {
                let filters: [(String, String?)] = [
                    ("namespace", namespace), ("urlPrefix", urlPrefix), ("host", host), ("tag", tag),
                    ("olderThan", olderThan.map { String($0) }), ("versionBelow", versionBelow.map(String.init)),
                    ("expired", expired ? "true" : nil), ("all", all ? "true" : nil)
                ]
                let result: Any?
                if !urls.isEmpty {
                    guard filters.allSatisfy({ $0.1 == nil }) else {
                        throw CLIError("--url purges by URL alone; give no other filter with it")
                    }
                    result = try options.call("POST", "/cache/purge", body: ["urls": urls])
                } else {
                    guard filters.contains(where: { $0.1 != nil }) else {
                        throw CLIError(
                            "name a filter (--namespace, --url-prefix, --host, --tag, --older-than, --version-below, "
                                + "--expired, --url) or --all"
                        )
                    }
                    if all, !yes {
                        guard isatty(STDIN_FILENO) == 1 else {
                            throw CLIError("--all removes every entry: add --yes to confirm (stdin is not a terminal)")
                        }
                        FileHandle.standardError.write(Data("Remove every entry stored in \(options.base)? Type 'yes' to confirm: ".utf8))
                        guard readLine()?.trimmingCharacters(in: .whitespaces) == "yes" else {
                            throw CLIError("not confirmed; nothing removed")
                        }
                    }
                    result = try options.call("DELETE", "/cache" + Format.query(filters))
                }
                let answer = result as? [String: Any] ?? [:]
                if options.json { return options.printJSON(answer) }
                print("removed \(Format.number(answer["removed"])) entries, \(Format.bytes(answer["bytes"]))")
            }
        }
    }

    struct Warm: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Warm the cache from a file: one URL or /fetch JSON spec per line ('-' for stdin).",
            discussion: "Shows a progress bar on a terminal and plain lines otherwise; Ctrl-C cancels the job on the server.")
        @OptionGroup var options: ServerOptions
        @Argument var file: String
        @Option(help: "Requests in flight at once (default: the server's).") var concurrency: Int?

        func run() throws {
            try reporting {
                let text: String
                if file == "-" {
                    text = String(decoding: FileHandle.standardInput.readDataToEndOfFile(), as: UTF8.self)
                } else {
                    guard let data = FileManager.default.contents(atPath: file) else { throw CLIError("cannot read \(file)") }
                    text = String(decoding: data, as: UTF8.self)
                }
                var specs: [Any] = []
                for (number, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
                    let line = raw.trimmingCharacters(in: .whitespaces)
                    if line.isEmpty || line.hasPrefix("#") { continue }
                    if line.hasPrefix("{") {
                        guard let spec = try? JSONSerialization.jsonObject(with: Data(line.utf8)) else {
                            throw CLIError("\(file):\(number + 1): not a JSON object")
                        }
                        specs.append(spec)
                    } else {
                        specs.append(["url": line])
                    }
                }
                guard !specs.isEmpty else { throw CLIError("\(file) lists no URL or spec") }
                var body: [String: Any] = ["requests": specs]
                if let concurrency { body["concurrency"] = concurrency }
                let created = try options.call("POST", "/cache/warm", body: body) as? [String: Any] ?? [:]
                guard let id = created["job"] as? String else { throw CLIError("the server did not name the job") }
                let job = try follow(id)
                if options.json { options.printJSON(job) }
                if job["state"] as? String == "cancelled" { throw ExitCode(130) }
                if (job["failed"] as? Int ?? 0) > 0 { throw ExitCode(1) }
            }
        }

        /// Polls the job until it ends, showing progress; Ctrl-C cancels it on the server.
        private func follow(_ id: String) throws -> [String: Any] {
            let interrupted = ManagedFlag()
            signal(SIGINT, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: SIGINT, queue: .global())
            source.setEventHandler { interrupted.set() }
            source.resume()
            defer {
                source.cancel()
                signal(SIGINT, SIG_DFL)
            }
            let terminal = isatty(STDOUT_FILENO) == 1 && !options.json
            var lastLine = ""
            var cancelled = false
            while true {
                if interrupted.isSet, !cancelled {
                    cancelled = true
                    _ = try? options.call("DELETE", "/cache/warm/\(id)")
                }
                let job = try options.call("GET", "/cache/warm/\(id)") as? [String: Any] ?? [:]
                let state = job["state"] as? String ?? "?"
                let total = job["total"] as? Int ?? 0
                let done = job["done"] as? Int ?? 0
                let failed = job["failed"] as? Int ?? 0
                let finished = state == "done" || state == "cancelled"
                if !options.json {
                    let summary = "\(done)/\(total) done, \(failed) failed, \(Format.bytes(job["bytes"]))"
                    if terminal {
                        let width = 30
                        let filled = total == 0 ? width : width * done / total
                        print(
                            "\r[\(String(repeating: "#", count: filled))\(String(repeating: ".", count: width - filled))] \(summary)  ",
                            terminator: finished ? "\n" : "")
                        fflush(nil)
                    } else if summary != lastLine || finished {
                        print("\(state): \(summary)")
                        fflush(nil)
                    }
                    lastLine = summary
                }
                if finished {
                    if !options.json, state == "cancelled" { print("cancelled") }
                    return job
                }
                usleep(200_000)
            }
        }
    }
}

/// Set from the signal handler's queue, read by the polling loop.
final class ManagedFlag: Sendable {
    private let value = Atomic(false)
    func set() { value.store(true, ordering: .relaxed) }
    var isSet: Bool { value.load(ordering: .relaxed) }
}

struct Healthcheck: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Exit 0 when the server answers GET /healthz with 200 (for container health checks).")
    @Option(help: "The Larder to check (env LARDER_SERVER; default http://127.0.0.1:8080).") var server: String?

    func run() throws {
        do {
            let response = try BlockingHTTPClient.send("GET", ServerOptions.base(server) + "/healthz", timeoutSeconds: 5)
            guard response.status == 200 else { throw ExitCode(1) }
        } catch let error as BlockingHTTPError {
            FileHandle.standardError.write(Data("larder: \(error.description)\n".utf8))
            throw ExitCode(1)
        }
    }
}
