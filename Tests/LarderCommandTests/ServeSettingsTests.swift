// `larder serve`'s options come from the settings table (Setting.all): every setting has its
// option, with a help that names its environment variable and its default; the default the help
// names is the one LarderConfiguration has; the command line, the environment and the config file
// set the same field the same way; and the docs name every setting. Parsed in process, as the
// executable parses its arguments.

import ArgumentParser
import Foundation
import LarderCore
import LarderService
import XCTest

@testable import larder

final class ServeSettingsTests: XCTestCase {
    /// Settings whose default is described in words (nil, or an empty list): no value to give.
    private let describedDefaults: Set<String> = [
        "secretFile", "proxyRoot", "adminToken", "metricsToken", "requestMemoMb", "maxObjectBytes", "adminPort", "allowHosts",
        "resolve", "upstreams", "tlsCert", "tlsKey", "adminTlsCert", "adminTlsKey", "otlpEndpoint", "serverNames"
    ]

    func testServesPropertiesAreTheSettingsAndNothingGivenIsTheDefaults() throws {
        XCTAssertEqual(Set(try Serve.parse([]).parsedProperties.keys), Set(Setting.all.map(\.key) + ["config"]))
        XCTAssertEqual(Set(Setting.all.map(\.key)).count, Setting.all.count, "a key is in the table twice")
        XCTAssertEqual(Set(Setting.all.map(\.option)).count, Setting.all.count, "an option is in the table twice")
        XCTAssertEqual(fields(try configuration([])), fields(LarderConfiguration()))
    }

    func testEverySettingHasItsOptionAndAHelpNamingItsEnvironmentVariableAndDefault() {
        let help = Larder.helpMessage(for: Serve.self, columns: 100_000).split(whereSeparator: \.isWhitespace).joined(separator: " ")
        for setting in Setting.all {
            XCTAssertTrue(
                help.contains("--\(setting.option) ") || help.contains("--\(setting.option)/--no-\(setting.option) "),
                "\(setting.key): no --\(setting.option) in serve --help")
            XCTAssertTrue(help.contains(setting.help), "\(setting.key): serve --help lacks '\(setting.help)'")
            XCTAssertTrue(setting.help.contains("default \(setting.defaultText))."), setting.help)
            if let name = setting.environment {
                XCTAssertTrue(setting.help.contains("(env \(name); default"), setting.help)
            }
        }
        XCTAssertEqual(
            Setting.all.compactMap(\.environment).sorted(),
            [
                "LARDER_ADMIN_TOKEN", "LARDER_DB", "LARDER_HOST", "LARDER_LOG_FORMAT", "LARDER_LOG_LEVEL", "LARDER_METRICS_TOKEN",
                "LARDER_PORT", "LARDER_SECRET_FILE", "LARDER_STORE", "LARDER_TLS_CERT", "LARDER_TLS_KEY"
            ])
        XCTAssertTrue(Setting.named("maxBytes").help.hasSuffix("(default 1GiB)."), Setting.named("maxBytes").help)
        XCTAssertTrue(Setting.named("db").help.hasSuffix("(env LARDER_DB; default data/larder.sqlite)."))
    }

    /// `serve --help` is in the table's sections: each group of Serve holds exactly its
    /// section's settings, and each option is listed under its section's title.
    func testServeHelpIsInTheSectionsOfTheTable() throws {
        let groups: [(Setting.Group, any ParsableArguments.Type)] = [
            (.network, NetworkSettings.self), (.storage, StorageSettings.self), (.upstream, UpstreamSettings.self),
            (.safety, SafetySettings.self), (.observability, ObservabilitySettings.self)
        ]
        XCTAssertEqual(groups.map(\.0), Setting.Group.allCases)
        for (group, type) in groups {
            XCTAssertEqual(
                Set(try type.parse([]).parsedProperties.keys), Set(Setting.all.filter { $0.group == group }.map(\.key)), "\(group)")
        }
        let help = Larder.helpMessage(for: Serve.self, columns: 100_000)
        let titles = Setting.Group.allCases.map { "\n\($0.title.uppercased()):\n" }
        var sections: [Substring] = []
        for (index, title) in titles.enumerated() {
            let start = try XCTUnwrap(help.range(of: title), "no section \(title) in serve --help")
            let end = index + 1 < titles.count ? try XCTUnwrap(help.range(of: titles[index + 1])).lowerBound : help.endIndex
            XCTAssertLessThan(start.upperBound, end, "\(title) comes before the next section")
            sections.append(help[start.upperBound..<max(start.upperBound, end)])
        }
        for setting in Setting.all {
            let index = try XCTUnwrap(Setting.Group.allCases.firstIndex(of: setting.group))
            XCTAssertTrue(sections[index].contains("--\(setting.option)"), "--\(setting.option) is not under \(setting.group.title)")
        }
    }

    /// Every option of `ls` and `purge` says what it does.
    func testEveryOptionOfLsAndPurgeHasHelp() {
        for command in [Cache.List.self, Cache.Purge.self] as [any ParsableCommand.Type] {
            let lines = Larder.helpMessage(for: command, columns: 100_000).split(separator: "\n")
                .map { $0.trimmingCharacters(in: .whitespaces) }
            var options = 0
            for (index, line) in lines.enumerated() where line.hasPrefix("--") {
                // `--name <value> Its help.`, or the help on the next line when the name is long.
                var words = line.split(separator: " ").dropFirst()
                if words.first?.hasPrefix("<") == true { words = words.dropFirst() }
                let next = index + 1 < lines.count && !lines[index + 1].hasPrefix("-") ? lines[index + 1] : ""
                XCTAssertFalse(words.isEmpty && next.isEmpty, "\(command): no help for \(line)")
                options += 1
            }
            XCTAssertGreaterThan(options, 5)
        }
        XCTAssertTrue(Larder.helpMessage(for: Cache.Purge.self).contains("--older-than <duration>"))
    }

    /// The default each help names, given on the command line, is LarderConfiguration's default.
    func testTheDefaultInEachHelpIsTheConfigurationsDefault() throws {
        let defaults = fields(LarderConfiguration())
        for setting in Setting.all where !describedDefaults.contains(setting.key) {
            let arguments: [String]
            switch setting.form {
            case .value: arguments = ["--\(setting.option)", setting.defaultText]
            case .repeated: arguments = setting.defaultText.components(separatedBy: ", ").flatMap { ["--\(setting.option)", $0] }
            case .flag:
                XCTAssertTrue(["on", "off"].contains(setting.defaultText), setting.key)
                arguments = ["--\(setting.option)"]
            }
            let given = fields(try configuration(arguments))
            if setting.defaultText == "off" {
                XCTAssertNotEqual(given, defaults, "\(arguments) turns \(setting.key) on")
            } else {
                XCTAssertEqual(given, defaults, "\(arguments) is not the default of \(setting.key)")
            }
        }
        for key in describedDefaults {
            let setting = Setting.named(key)
            XCTAssertFalse(setting.defaultText.isEmpty, key)
            XCTAssertNotEqual(setting.form, .flag, key)
        }
    }

    /// The command line, the environment and the config file read a value into the same field
    /// the same way, and each setting changes its field.
    func testTheCommandLineTheEnvironmentAndTheFileSetTheSameField() throws {
        let defaults = fields(LarderConfiguration())
        let candidates = [
            "7", "90s", "2MiB", "rename", "pass-through", "sample-value", "sample=http://127.0.0.1:9/", "404=30s", "sample=2MiB"
        ]
        for setting in Setting.all {
            var agreed = 0
            for candidate in setting.form == .flag ? [""] : candidates {
                let arguments: [String]
                let document: String
                switch setting.form {
                case .value:
                    arguments = ["--\(setting.option)", candidate]
                    document = "\(setting.key): \(Int(candidate) != nil ? candidate : "\"\(candidate)\"")"
                case .repeated:
                    arguments = ["--\(setting.option)", candidate]
                    let parts = candidate.split(separator: "=", maxSplits: 1)
                    if setting.key == "negativeTtl", parts.count == 2 {
                        document = "\(setting.key): {\(parts[0]): \(parts[1])}"
                    } else if setting.key == "namespaces", parts.count == 2 {
                        document = "\(setting.key): {\(parts[0]): {maxBytes: \(parts[1])}}"
                    } else {
                        document =
                            setting.key == "upstreams" && parts.count == 2
                            ? "\(setting.key): [{name: \(parts[0]), baseUrl: \"\(parts[1])\"}]" : "\(setting.key): [\"\(candidate)\"]"
                    }
                case .flag:
                    let on = setting.defaultText == "off"
                    arguments = [on ? "--\(setting.option)" : "--no-\(setting.option)"]
                    document = "\(setting.key): \(on)"
                }
                guard let parsed = try? Serve.parse(arguments).parsedProperties[setting.key] else { continue }
                var fromCommandLine = LarderConfiguration()
                guard (try? setting.apply(commandLine: parsed, to: &fromCommandLine)) != nil else { continue }
                var fromFile = LarderConfiguration()
                guard (try? ConfigFile.apply(text: document, source: "test", to: &fromFile)) != nil else { continue }
                XCTAssertEqual(fields(fromCommandLine), fields(fromFile), "\(arguments) and '\(document)'")
                let changed = fields(fromCommandLine).filter { defaults[$0.key] != $0.value }.keys
                XCTAssertEqual(changed.count, 1, "\(arguments) changes \(changed.sorted())")
                if let name = setting.environment {
                    var fromEnvironment = LarderConfiguration()
                    try Setting.apply(environment: [name: candidate], to: &fromEnvironment)
                    XCTAssertEqual(fields(fromEnvironment), fields(fromFile), "\(name)=\(candidate)")
                }
                agreed += 1
            }
            XCTAssertGreaterThan(agreed, 0, "no value set \(setting.key) from both the command line and the file")
        }
    }

    /// Defaults, then the config file, then the environment, then the command line.
    func testTheCommandLineOverridesTheEnvironmentWhichOverridesTheFile() throws {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("serve-settings-\(UUID().uuidString).yaml")
        defer { try? FileManager.default.removeItem(at: file) }
        try """
        host: 127.0.0.2
        port: 1111
        maxBytes: 2GiB
        upstreams: [{name: api, baseUrl: "http://127.0.0.1:9/a"}, {name: other, baseUrl: "http://127.0.0.1:9/o"}]
        """.write(to: file, atomically: true, encoding: .utf8)
        let fromFile = try configuration(["--config", file.path])
        XCTAssertEqual(fromFile.port, 1111)
        XCTAssertEqual(fromFile.maxBytes, 2 << 30)
        let fromEnvironment = try configuration(["--config", file.path], environment: ["LARDER_PORT": "2222"])
        XCTAssertEqual(fromEnvironment.port, 2222)
        XCTAssertEqual(fromEnvironment.host, "127.0.0.2")
        let fromCommandLine = try configuration(
            ["--config", file.path, "--port", "3333", "--upstream", "api=http://127.0.0.1:9/b"], environment: ["LARDER_PORT": "2222"])
        XCTAssertEqual(fromCommandLine.port, 3333)
        XCTAssertEqual(fromCommandLine.maxBytes, 2 << 30)
        XCTAssertEqual(fromCommandLine.upstreams.map(\.name), ["other", "api"], "--upstream replaces the upstream of its name")
        XCTAssertEqual(fromCommandLine.upstreams.last?.baseURL, "http://127.0.0.1:9/b")
    }

    func testListsTakeNoneOnTheCommandLineAndTagHeadersInLowerCase() throws {
        let none = try configuration(["--tag-header", "none", "--redact-query", "none"])
        XCTAssertEqual(none.tagHeaders, [])
        XCTAssertEqual(none.redactQuery, [])
        let given = try configuration(["--tag-header", "X-Tag", "--redact-query", "Secret", "--allow-host", "*.example.com"])
        XCTAssertEqual(given.tagHeaders, ["x-tag"])
        XCTAssertEqual(given.redactQuery, ["Secret"])
        XCTAssertEqual(given.allowHosts, ["*.example.com"])
    }

    func testNegativeLifetimesAndTargetedFieldsOnTheCommandLine() throws {
        let given = try configuration([
            "--negative-ttl", "404=30s", "--negative-ttl", "502=5", "--negative-ttl", "404=1m", "--targeted-cache-control", "Edge-Control",
            "--pass-own-cache-control"
        ])
        XCTAssertEqual(given.negativeTTL, NegativeTTL([404: 60, 502: 5]), "a status given twice takes the last")
        XCTAssertEqual(given.targetedCacheControl, ["edge-control"])
        XCTAssertTrue(given.passOwnCacheControl)
        XCTAssertEqual(try configuration(["--targeted-cache-control", "none"]).targetedCacheControl, [])
        XCTAssertEqual(LarderConfiguration().targetedCacheControl, ["larder-cache-control", "cdn-cache-control"])
        for bad in ["404", "404=soon", "200=5s", "4o4=5s", "404=-5", "+404=5s", "0404=5s"] {
            XCTAssertThrowsError(try configuration(["--negative-ttl", bad]), bad) {
                XCTAssertTrue("\($0)".contains("--negative-ttl"), "\($0)")
            }
        }
    }

    func testNamespaceBudgetsAndCompressionOnTheCommandLine() throws {
        let given = try configuration([
            "--namespace-max-bytes", "reports=200MB", "--namespace-max-bytes", "proxy:api=1GiB", "--compress-min-bytes", "1024",
            "--compress-type", "application/json", "--compress-type", "text/*"
        ])
        XCTAssertEqual(given.namespaceMaxBytes, ["reports": 200_000_000, "proxy:api": 1 << 30])
        XCTAssertEqual(given.compressMinBytes, 1024)
        XCTAssertEqual(given.compressTypes, ["application/json", "text/*"])
        XCTAssertEqual(try configuration(["--compress-type", "none"]).compressTypes, [])
        XCTAssertEqual(try configuration(["--namespace-max-bytes", "none"]).namespaceMaxBytes, [:])
        for bad in ["reports", "reports=lots", "=1MB"] {
            XCTAssertThrowsError(try configuration(["--namespace-max-bytes", bad]), bad)
        }
        XCTAssertThrowsError(try configuration(["--namespace-max-bytes", "tiny=1KB"])) {
            XCTAssertTrue("\($0)".contains("at least 1 MiB"), "\($0)")
        }
        XCTAssertThrowsError(try configuration(["--compress-type", "json"])) {
            XCTAssertTrue("\($0)".contains("is not a media type"), "\($0)")
        }
    }

    func testTheEnvironmentsEmptyValues() throws {
        XCTAssertEqual(try configuration([], environment: ["LARDER_STORE": ""]).store, "sqlite", "an empty LARDER_STORE is unset")
        XCTAssertEqual(try configuration([], environment: ["LARDER_STORE": ""]).host, "127.0.0.1")
        for name in ["LARDER_ADMIN_TOKEN", "LARDER_METRICS_TOKEN", "LARDER_SECRET_FILE"] {
            XCTAssertEqual(
                message { try configuration([], environment: [name: ""]) },
                "\(name) is set but empty: give a value, or unset it (an empty token would leave the routes open)")
        }
        XCTAssertEqual(message { try configuration([], environment: ["LARDER_DB": ""]) }, "the database path is empty")
        XCTAssertEqual(
            message { try configuration([], environment: ["LARDER_PORT": "eighty"]) }, "LARDER_PORT 'eighty' is not a port number")
        XCTAssertEqual(try configuration([], environment: ["LARDER_ADMIN_TOKEN": "t0ken"]).adminToken, "t0ken")
    }

    /// The words of each refusal, as they were before the table.
    func testCommandLineRefusalsNameTheOption() {
        let refusals: [([String], String)] = [
            (["--max-bytes", "lots"], "--max-bytes 'lots' is not a size (e.g. 1GiB, 100MB)"),
            (["--max-object-bytes", "lots"], "--max-object-bytes 'lots' is not a size"),
            (["--max-batch-bytes", "lots"], "--max-batch-bytes 'lots' is not a size (e.g. 64MiB)"),
            (["--retention", "forever"], "--retention 'forever' is not a duration (e.g. 7d, 12h)"),
            (["--on-corrupt", "ignore"], "--on-corrupt must be fail or rename"),
            (["--store-fallback", "ignore"], "--store-fallback must be fail or pass-through"),
            (["--memory-mb", "2000000000"], "--memory-mb 2000000000 is out of range"),
            (["--request-memo-mb", "2000000000"], "--request-memo-mb 2000000000 is out of range"),
            (["--max-inflight-mb", "2000000000"], "--max-inflight-mb 2000000000 is out of range"),
            (["--upstream", "api"], "--upstream 'api' is not NAME=URL"),
            (["--threads", "1"], "at least 2 server threads are needed")
        ]
        for (arguments, expected) in refusals {
            XCTAssertEqual(message { try configuration(arguments) }, expected, "\(arguments)")
        }
    }

    /// docs/larder.example.yaml has a line for every key, and docs/operations.md names every
    /// option and environment variable.
    func testTheDocsNameEverySetting() throws {
        let docs = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("docs")
        let example = try String(contentsOf: docs.appendingPathComponent("larder.example.yaml"), encoding: .utf8)
        let exampleKeys = Set(example.split(separator: "\n").compactMap { $0.split(separator: ":").first.map(String.init) })
        let operations = try String(contentsOf: docs.appendingPathComponent("operations.md"), encoding: .utf8)
        for setting in Setting.all {
            XCTAssertTrue(exampleKeys.contains(setting.key), "docs/larder.example.yaml has no line for \(setting.key)")
            let option = setting.form == .flag && setting.defaultText == "on" ? "--[no-]\(setting.option)" : "--\(setting.option)"
            XCTAssertTrue(operations.contains(option), "docs/operations.md does not name \(option)")
            if let name = setting.environment {
                XCTAssertTrue(operations.contains("`\(name)`"), "docs/operations.md does not name \(name)")
            }
        }
    }

    private func configuration(_ arguments: [String], environment: [String: String] = [:]) throws -> LarderConfiguration {
        try Serve.parse(arguments).configuration(environment: environment)
    }

    /// The message of the ValidationError `body` throws, or nil.
    private func message(_ body: () throws -> Any) -> String? {
        do {
            _ = try body()
            return nil
        } catch let error as ValidationError {
            return error.message
        } catch {
            return "\(error)"
        }
    }

    private func fields(_ configuration: LarderConfiguration) -> [String: String] {
        var fields: [String: String] = [:]
        for child in Mirror(reflecting: configuration).children {
            if let label = child.label { fields[label] = String(reflecting: child.value) }
        }
        return fields
    }
}
