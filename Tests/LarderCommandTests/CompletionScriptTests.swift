// The shell completion the built executable writes (`larder --generate-completion-script`), as the
// container image installs it: bash accepts the script, and completing in a real bash offers the
// subcommands and options the command line has.

import Foundation
import LarderServiceTesting
import XCTest

final class CompletionScriptTests: XCTestCase {
    private func script(for shell: String) throws -> String {
        guard FileManager.default.isExecutableFile(atPath: larderExecutable.path) else {
            throw skipOrFail("the larder executable is not built next to the tests (run scripts/test, or set LARDER_BINARY)")
        }
        let (status, out, err) = try runToEnd(larderExecutable, ["--generate-completion-script", shell])
        XCTAssertEqual(status, 0, String(decoding: err, as: UTF8.self))
        return String(decoding: out, as: UTF8.self)
    }

    /// What bash offers for `line` (completed at its end), with `script` loaded as
    /// bash-completion would load it.
    private func complete(_ line: String, with script: URL) throws -> [String] {
        let words = line.split(separator: " ", omittingEmptySubsequences: false).map(String.init)
        let quoted = words.map { "'\($0)'" }.joined(separator: " ")
        let program = """
            source '\(script.path)'
            COMP_WORDS=(\(quoted)); COMP_CWORD=\(words.count - 1); COMP_LINE='\(line)'; COMP_POINT=\(line.utf8.count)
            _larder larder '\(words.last ?? "")' '\(words.count > 1 ? words[words.count - 2] : "")'
            printf '%s\\n' "${COMPREPLY[@]}"
            """
        let (status, out, err) = try runToEnd(URL(fileURLWithPath: "/bin/bash"), ["--norc", "--noprofile", "-c", program])
        XCTAssertEqual(status, 0, String(decoding: err, as: UTF8.self))
        return String(decoding: out, as: UTF8.self).split(separator: "\n").map(String.init).sorted()
    }

    func testTheBashCompletionParsesAndCompletesSubcommandsAndOptions() throws {
        let bash = try script(for: "bash")
        XCTAssertTrue(bash.contains("complete -o filenames -F _larder larder"), "registers itself for `larder`")
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("larder-completion-\(UUID().uuidString).bash")
        try Data(bash.utf8).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }

        let (syntax, _, syntaxErrors) = try runToEnd(URL(fileURLWithPath: "/bin/bash"), ["-n", file.path])
        XCTAssertEqual(syntax, 0, "bash -n: " + String(decoding: syntaxErrors, as: UTF8.self))

        XCTAssertEqual(
            try complete("larder ", with: file), ["--help", "--version", "-h", "cache", "check-config", "healthcheck", "help", "serve"])
        XCTAssertEqual(try complete("larder se", with: file), ["serve"])
        XCTAssertEqual(
            try complete("larder cache ", with: file), ["--help", "--version", "-h", "ls", "namespaces", "purge", "show", "stats", "warm"])
        XCTAssertEqual(try complete("larder cache purge --exp", with: file), ["--expired"])
        XCTAssertEqual(
            try complete("larder serve --max-b", with: file), ["--max-batch", "--max-batch-bytes", "--max-body-bytes", "--max-bytes"])
    }

    func testTheZshAndFishCompletionsNameTheSubcommands() throws {
        for shell in ["zsh", "fish"] {
            let text = try script(for: shell)
            for name in ["serve", "cache", "healthcheck", "purge", "--max-bytes"] {
                XCTAssertTrue(text.contains(name), "\(shell) completion lacks \(name)")
            }
        }
    }
}
