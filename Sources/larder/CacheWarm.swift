// `larder cache warm FILE|-`: one URL or /fetch JSON spec per line, sent as one warm job, then
// followed until it ends. Every failure is named by its input line and URL (the server's own
// words say `requests[4]`, the index of the spec, which a person never wrote).

import ArgumentParser
import Dispatch
import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

extension Cache {
    struct Warm: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Warm the cache from a file: one URL or /fetch JSON spec per line ('-' for stdin).",
            discussion: """
                Shows a progress bar on a terminal and plain lines otherwise; each failure is named by its line and URL. \
                Ctrl-C cancels the job on the server. Exits 0 when every line succeeded, 1 when some failed, 130 when cancelled.
                """)
        @OptionGroup var options: ServerOptions
        @Argument(help: "The file of URLs and specs, '-' for stdin.") var file: String
        @Option(help: "Requests in flight at once (default: the server's).") var concurrency: Int?

        /// One line of the input that became a request.
        struct Line {
            let number: Int
            /// The URL, or the spec's `url`, else the spec's text.
            let shown: String
        }

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
                var lines: [Line] = []
                for (index, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
                    let line = raw.trimmingCharacters(in: .whitespaces)
                    if line.isEmpty || line.hasPrefix("#") { continue }
                    if line.hasPrefix("{") {
                        guard let spec = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] else {
                            throw CLIError("\(file):\(index + 1): not a JSON object")
                        }
                        specs.append(spec)
                        lines.append(Line(number: index + 1, shown: spec["url"] as? String ?? line))
                    } else {
                        specs.append(["url": line])
                        lines.append(Line(number: index + 1, shown: line))
                    }
                }
                guard !specs.isEmpty else { throw CLIError("\(file) lists no URL or spec") }
                var body: [String: Any] = ["requests": specs]
                if let concurrency { body["concurrency"] = concurrency }
                let created: [String: Any]
                do {
                    created = try options.call("POST", "/cache/warm", body: body).requiring("job")
                } catch let refusal as AdminRefusal {
                    throw named(refusal, lines)
                }
                guard let id = created["job"] as? String else { throw CLIError("the server did not name the job") }
                let job = try follow(id, lines)
                if options.json { options.printRaw(job.bytes) }
                if job.object["state"] as? String == "cancelled" { throw ExitCode(130) }
                if (job.object["failed"] as? Int ?? 0) > 0 { throw ExitCode(1) }
            }
        }

        /// The server's refusal of `requests[i]…`, said of the line it came from.
        private func named(_ refusal: AdminRefusal, _ lines: [Line]) -> Error {
            guard let field = refusal.field, field.hasPrefix("requests["), let close = field.firstIndex(of: "]"),
                let index = Int(field[field.index(field.startIndex, offsetBy: 9)..<close]), lines.indices.contains(index)
            else { return refusal }
            let member = field[field.index(after: close)...].drop { $0 == "." }
            let line = lines[index]
            // The server's message may start with the field it names.
            let message = refusal.message.hasPrefix("\(field): ") ? String(refusal.message.dropFirst(field.count + 2)) : refusal.message
            return CLIError("\(file):\(line.number): \(line.shown): \(member.isEmpty ? "" : "\(member): ")\(message)")
        }

        /// "FILE:LINE: URL failed (code)" for one of the job's errors.
        private func failure(_ error: [String: Any], _ lines: [Line]) -> String {
            let index = error["index"] as? Int ?? -1
            let code = error["code"] as? String ?? "error"
            guard lines.indices.contains(index) else { return "\(error["url"] as? String ?? "?") failed (\(code))" }
            return "\(file):\(lines[index].number): \(lines[index].shown) failed (\(code))"
        }

        /// Polls the job until it ends, showing progress and each failure as it is reported;
        /// Ctrl-C cancels it on the server. Returns the last answer.
        private func follow(_ id: String, _ lines: [Line]) throws -> AdminAnswer {
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
            var reported: Set<Int> = []
            var cancelled = false
            var last: AdminAnswer?
            while true {
                var cancellation: AdminAnswer?
                if interrupted.isSet, !cancelled {
                    cancelled = true
                    cancellation = try? options.call("DELETE", "/cache/warm/\(id)")
                    // No job in the answer (204): it had finished since the last poll, and
                    // DELETE removed it; the last state read is the one to show.
                    if let cancellation, cancellation.object["state"] == nil, let last { return last }
                }
                let answer = try cancellation ?? options.call("GET", "/cache/warm/\(id)")
                last = answer
                let job = try answer.requiring("state", "total")
                let state = job["state"] as? String ?? "?"
                let total = job["total"] as? Int ?? 0
                let done = job["done"] as? Int ?? 0
                let failed = job["failed"] as? Int ?? 0
                let finished = state == "done" || state == "cancelled"
                let errors = job["errors"] as? [[String: Any]] ?? []
                if !options.json {
                    for error in errors {
                        guard let index = error["index"] as? Int, reported.insert(index).inserted else { continue }
                        print((terminal ? "\r\u{1B}[K" : "") + TerminalText.safe(failure(error, lines)))
                    }
                    let summary = "\(done)/\(total) done, \(failed) failed, \(Format.bytes(job["bytes"]))"
                    if terminal {
                        let width = 30
                        let filled = total == 0 ? width : width * min(total, done + failed) / total
                        print(
                            "\r[\(String(repeating: "#", count: filled))\(String(repeating: ".", count: width - filled))] \(summary)  ",
                            terminator: finished ? "\n" : "")
                    } else if summary != lastLine || finished {
                        TerminalText.print("\(state): \(summary)")
                    }
                    fflush(nil)
                    lastLine = summary
                }
                if finished {
                    if !options.json {
                        if failed > errors.count {
                            print("(\(failed - errors.count) more failures; the server lists the first \(errors.count))")
                        }
                        if state == "cancelled" { print("cancelled") }
                    }
                    return answer
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
