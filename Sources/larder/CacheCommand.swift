// `larder cache …`: the admin API for humans, talking to a running server. Every command takes
// --server and --token (or LARDER_SERVER, LARDER_ADMIN_TOKEN) and --json for scripts.

import ArgumentParser
import Foundation
import LarderCore
import LarderCurl
import LarderService

#if canImport(Glibc)
    import Glibc
#endif

struct Cache: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Look at and manage a running Larder's cache (the /cache admin API).",
        subcommands: [Stats.self, List.self, Show.self, Purge.self, Warm.self, Namespaces.self])
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

    /// "1 entry", "2 entries": the count and the noun that agrees with it.
    static func count(_ value: Any?, _ one: String, _ many: String) -> String {
        let text = number(value)
        return "\(text) \(text == "1" ? one : many)"
    }

    static func number(_ value: Any?) -> String {
        if let int = value as? Int { return String(int) }
        if let double = value as? Double { return double == double.rounded() ? String(Int(double)) : String(format: "%.3f", double) }
        return "-"
    }

    static func seconds(_ value: Any?) -> Double? { (value as? Double) ?? (value as? Int).map(Double.init) }

    /// A time from the admin API: an RFC 3339 string (RFC3339Time), or seconds since 1970 as
    /// servers before RFC 3339 times gave them.
    static func time(_ value: Any?) -> Double? {
        if let text = value as? String { return RFC3339Time.parse(text) }
        return seconds(value)
    }

    static func age(since time: Any?) -> String {
        guard let time = self.time(time) else { return "-" }
        let age = max(0, Date().timeIntervalSince1970 - time)
        switch age {
        case ..<120: return "\(Int(age))s"
        case ..<7200: return "\(Int(age / 60))m"
        case ..<172_800: return "\(Int(age / 3600))h"
        default: return "\(Int(age / 86_400))d"
        }
    }

    /// The rows in columns, every cell's control characters shown (a cell is one line).
    static func table(_ rows: [[String]]) -> String {
        let rows = rows.map { $0.map { TerminalText.safe($0) } }
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
        let parts = pairs.compactMap { name, value in value.map { "\(name)=\(escaped($0))" } }
        return parts.isEmpty ? "" : "?" + parts.joined(separator: "&")
    }

    /// `value` percent-encoded but for RFC 3986's unreserved characters (ASCII letters and
    /// digits, `-._~`): a path segment or a query value.
    static func escaped(_ value: String) -> String {
        value.addingPercentEncoding(withAllowedCharacters: unreserved) ?? value
    }

    private static let unreserved = CharacterSet(
        charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
}

/// A time option: seconds, or a number and a unit as --retention takes them (90s, 15m, 1h, 7d).
enum DurationArgument {
    static func seconds(_ given: String) throws -> Double {
        guard let seconds = Quantity.seconds(given) else {
            throw ValidationError("'\(given)' is not a duration: give seconds, or a number with s, m, h or d (90s, 15m, 1h, 7d)")
        }
        return seconds
    }

    /// Seconds as the admin API takes them: 3600, or 1.5.
    static func text(_ seconds: Double) -> String {
        seconds == seconds.rounded() && seconds < 1e15 ? String(Int(seconds)) : String(seconds)
    }
}

extension Cache {
    struct Stats: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "What is stored, and the traffic since the server started.")
        @OptionGroup var options: ServerOptions
        @Option(help: "Stored figures of one namespace.") var namespace: String?

        func run() throws {
            try reporting {
                let answer = try options.call("GET", "/cache/stats" + Format.query([("namespace", namespace)]))
                let stats = try answer.requiring("stored", "sinceStart")
                if options.json { return options.printRaw(answer.bytes) }
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
                    ["stored", "\(Format.count(stored["entries"], "entry", "entries")), \(Format.bytes(stored["bytes"]))\(used)"],
                    [
                        "",
                        "\(Format.number(stored["evictions"])) evicted, \(Format.number(stored["expiredRemovals"])) expired since start"
                            + ((stored["evictionBacklog"] as? Int ?? 0) > 0
                                ? "; \(Format.number(stored["evictionBacklog"])) evicted still to delete" : "")
                    ],
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
                TerminalText.print(Format.table(rows))
                let namespaces = (stored["namespaces"] as? [String: [String: Any]] ?? [:]).sorted { $0.key < $1.key }
                if !namespaces.isEmpty {
                    TerminalText.print("")
                    TerminalText.print(
                        Format.table(
                            [["NAMESPACE", "ENTRIES", "BYTES"]]
                                + namespaces.map { [$0.key, Format.number($0.value["entries"]), Format.bytes($0.value["bytes"])] }))
                }
            }
        }
    }

    struct Namespaces: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Each namespace: what it holds, its budget, its version and its compression dictionary.")
        @OptionGroup var options: ServerOptions
        @Option(help: "Train a new compression dictionary for this namespace now (POST /cache/namespaces/{ns}/dictionary).")
        var trainDictionary: String?

        func run() throws {
            try reporting {
                if let namespace = trainDictionary {
                    let answer = try options.call("POST", "/cache/namespaces/\(Format.escaped(namespace))/dictionary")
                    let asked = try answer.requiring("state")
                    if options.json { return options.printRaw(answer.bytes) }
                    if asked["state"] as? String == "training" {
                        TerminalText.print(
                            asked["samples"] == nil
                                ? "a dictionary for \(namespace) is already being trained"
                                : "training a dictionary for \(namespace) from \(Format.number(asked["samples"])) bodies")
                    } else {
                        TerminalText.print(
                            "gathering bodies for \(namespace)'s next dictionary: \(Format.number(asked["samples"])) of "
                                + "\(Format.number(asked["needed"]))")
                    }
                    return
                }
                let answer = try options.call("GET", "/cache/namespaces")
                let listed = try answer.requiring("namespaces")
                if options.json { return options.printRaw(answer.bytes) }
                let rows = (listed["namespaces"] as? [[String: Any]] ?? []).map { namespace -> [String] in
                    let dictionary = namespace["dictionary"] as? [String: Any]
                    let trained =
                        dictionary.flatMap { dictionary in
                            (dictionary["id"] as? Int).map {
                                "\($0) (\(Format.bytes(dictionary["bytes"])), \(Format.age(since: dictionary["trainedAt"])) old, "
                                    + "\(Format.count(dictionary["versions"], "version", "versions")))"
                            }
                        } ?? "-"
                    return [
                        namespace["name"] as? String ?? "", Format.number(namespace["entries"]), Format.bytes(namespace["bytes"]),
                        namespace["maxBytes"].map { Format.bytes($0) } ?? "-", Format.number(namespace["version"]), trained
                    ]
                }
                TerminalText.print(Format.table([["NAMESPACE", "ENTRIES", "BYTES", "BUDGET", "VERSION", "DICTIONARY"]] + rows))
            }
        }
    }

    /// The filters `ls` and `purge` share, with the admin API's names.
    struct Filters: ParsableArguments {
        @Option(help: "Only entries of this namespace (/fetch's cache.namespace; the proxy's are proxy:NAME).")
        var namespace: String?
        @Option(help: "Only entries whose URL, as requested, starts with this.") var urlPrefix: String?
        @Option(help: "Only entries of this host (any port or scheme).") var host: String?
        @Option(help: "Only entries carrying this tag (cache.tags, Surrogate-Key or Cache-Tag).") var tag: String?

        var query: [(String, String?)] { [("namespace", namespace), ("urlPrefix", urlPrefix), ("host", host), ("tag", tag)] }
    }

    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "ls", abstract: "List stored entries (every page, or up to --limit).")
        @OptionGroup var options: ServerOptions
        @OptionGroup var filters: Filters
        @Option(help: "Only entries of this stored HTTP status, e.g. 200.") var status: Int?
        @Option(help: "At most this many entries.") var limit: Int?

        func run() throws {
            try reporting {
                var entries: [[String: Any]] = []
                var cursor: String?
                repeat {
                    let page = min(1000, (limit ?? Int.max) - entries.count)
                    let query = Format.query(
                        filters.query + [("status", status.map(String.init)), ("limit", String(page)), ("cursor", cursor)])
                    let answer = try options.call("GET", "/cache/entries" + query)
                    let listed = try answer.requiring("entries")["entries"] as? [[String: Any]] ?? []
                    if options.json {
                        // NDJSON: each entry's bytes as the server sent them, one per line.
                        for raw in RawJSON.elements(of: "entries", in: answer.bytes) ?? [] { options.printRaw(raw) }
                    }
                    entries += listed
                    cursor = answer.object["nextCursor"] as? String
                } while cursor != nil && entries.count < (limit ?? Int.max)
                if options.json { return }
                let rows = entries.map { entry -> [String] in
                    [
                        String((entry["key"] as? String ?? "").prefix(16)), Format.number(entry["status"]), Format.bytes(entry["bytes"]),
                        Format.age(since: entry["storedAt"]), Format.number(entry["hits"]), entry["namespace"] as? String ?? "",
                        (entry["tags"] as? [String] ?? []).joined(separator: ","), entry["url"] as? String ?? ""
                    ]
                }
                TerminalText.print(Format.table([["KEY", "STATUS", "BYTES", "AGE", "HITS", "NAMESPACE", "TAGS", "URL"]] + rows))
                TerminalText.print(Format.count(entries.count, "entry", "entries"))
            }
        }
    }

    struct Show: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Every variant stored under one key.")
        @OptionGroup var options: ServerOptions
        @Argument(help: "The key as /fetch reports it (cache.key), or any unique start of it, such as the 16 digits `ls` prints.")
        var key: String
        @Flag(help: "Include each variant's stored response.") var body = false

        func run() throws {
            try reporting {
                let key = try KeyPrefix.resolve(key, with: options)
                let path = "/cache/entries/\(Format.escaped(key))" + (body ? "?body=true" : "")
                let answer = try options.call("GET", path)
                let shown = try answer.requiring("variants")
                if options.json { return options.printRaw(answer.bytes) }
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
                    if let expires = Format.time(variant["expiresAt"]) {
                        rows.append(["fresh", expires > now ? "for \(Int(expires - now))s more" : "no (stale for \(Int(now - expires))s)"])
                    }
                    for name in ["tags", "varies"] {
                        let values = variant[name] as? [String] ?? []
                        if !values.isEmpty { rows.append([name, values.joined(separator: ", ")]) }
                    }
                    TerminalText.print(Format.table(rows))
                    if let response = variant["response"] as? [String: Any] {
                        for (name, value) in (response["headers"] as? [String: Any] ?? [:]).sorted(by: { $0.key < $1.key }) {
                            TerminalText.print("  \(TerminalText.safe(name)): \(TerminalText.safe("\(value)"))")
                        }
                        if let text = response["bodyText"] as? String {
                            TerminalText.print(text)
                        } else if let base64 = response["bodyBase64"] as? String {
                            TerminalText.print("(\(Data(base64Encoded: base64)?.count ?? 0) bytes of binary body)")
                        } else if let json = response["body"],
                            let data = try? JSONSerialization.data(
                                withJSONObject: json, options: [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes, .fragmentsAllowed])
                        {
                            TerminalText.print(String(decoding: data, as: UTF8.self))
                        }
                    }
                    TerminalText.print("")
                }
            }
        }
    }

    struct Purge: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Remove stored entries by filter (AND), by URL, or all of them; or, with --soft, mark them stale.")
        @OptionGroup var options: ServerOptions
        @OptionGroup var filters: Filters
        @Option(
            help: ArgumentHelp("Only entries stored at least this long ago: seconds, or like 90s, 15m, 1h, 7d.", valueName: "duration"),
            transform: DurationArgument.seconds)
        var olderThan: Double?
        @Option(help: "Only entries stored under a version below this one (cache.version).") var versionBelow: Int?
        @Flag(help: "Only entries past their freshness and every stale window.") var expired = false
        @Option(name: .customLong("url"), help: "Remove this URL's entries in every namespace (repeatable).") var urls: [String] = []
        @Flag(help: "Remove everything.") var all = false
        @Flag(help: "Do not ask before --all.") var yes = false
        @Flag(help: "Mark the entries stale instead of removing them: the next request revalidates, stale windows still answer.")
        var soft = false

        func run() throws {
            try reporting {
                let chosen: [(String, String?)] =
                    self.filters.query + [
                        ("olderThan", olderThan.map(DurationArgument.text)), ("versionBelow", versionBelow.map(String.init)),
                        ("expired", expired ? "true" : nil), ("all", all ? "true" : nil)
                    ]
                let result: AdminAnswer
                if !urls.isEmpty {
                    guard chosen.allSatisfy({ $0.1 == nil }) else {
                        throw CLIError("--url purges by URL alone; give no other filter with it")
                    }
                    var body: [String: Any] = ["urls": urls]
                    if soft { body["soft"] = true }
                    result = try options.call("POST", "/cache/purge", body: body)
                } else {
                    guard chosen.contains(where: { $0.1 != nil }) else {
                        throw CLIError(
                            "name a filter (--namespace, --url-prefix, --host, --tag, --older-than, --version-below, "
                                + "--expired, --url) or --all"
                        )
                    }
                    if all, !yes {
                        guard isatty(STDIN_FILENO) == 1 else {
                            let effect = soft ? "marks every entry stale" : "removes every entry"
                            throw CLIError("--all \(effect): add --yes to confirm (stdin is not a terminal)")
                        }
                        let action = soft ? "Mark stale" : "Remove"
                        let server = AddressRedaction.redacted(options.base)
                        FileHandle.standardError.write(Data("\(action) every entry stored in \(server)? Type 'yes' to confirm: ".utf8))
                        guard readLine()?.trimmingCharacters(in: .whitespaces) == "yes" else {
                            throw CLIError("not confirmed; nothing removed")
                        }
                    }
                    let mode: [(String, String?)] = [("soft", soft ? "true" : nil)]
                    result = try options.call("DELETE", "/cache" + Format.query(chosen + mode))
                }
                let answer = try result.requiring("removed")
                if options.json { return options.printRaw(result.bytes) }
                if soft {
                    TerminalText.print("marked \(Format.count(answer["invalidated"], "entry", "entries")) stale")
                } else {
                    TerminalText.print("removed \(Format.count(answer["removed"], "entry", "entries")), \(Format.bytes(answer["bytes"]))")
                }
            }
        }
    }
}

struct Healthcheck: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Exit 0 when the server answers GET /healthz with 200 (for container health checks).")
    @Option(help: "The Larder to check (env LARDER_SERVER; default http://127.0.0.1:8080, or LARDER_HOST and LARDER_PORT when set).")
    var server: String?

    @Option(help: "PEM file of the CA that signed an https:// server's certificate (env LARDER_CACERT).")
    var cacert: String?

    func run() throws {
        // Without a server named, the check is of the Larder on this machine (LARDER_HOST,
        // LARDER_PORT, https when LARDER_TLS_CERT is set), whose certificate need not name the
        // loopback address: it is not verified then, as the check sends nothing secret.
        let named = server != nil || !(ProcessInfo.processInfo.environment["LARDER_SERVER"] ?? "").isEmpty
        let caFile = ServerOptions.caFile(cacert)
        let tls = BlockingTLSOptions(caFile: caFile, verifyPeer: named || caFile != nil)
        do {
            let response = try BlockingHTTPClient.send("GET", ServerOptions.base(server) + "/healthz", timeoutSeconds: 5, tls: tls)
            guard response.status == 200 else { throw ExitCode(1) }
        } catch let error as BlockingHTTPError {
            FileHandle.standardError.write(Data("larder: \(error.description)\n".utf8))
            throw ExitCode(1)
        }
    }
}
