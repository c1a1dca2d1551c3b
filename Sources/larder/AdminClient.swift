// How `larder cache …` talks to the admin API: the options every command takes (--server,
// --token, --json), one request and what its answer must look like, and the errors a person
// reads. An answer that is not the admin API's (another server on that port, Larder's proxy
// listener, an HTML page) is named as such instead of being shown as an empty table.

import ArgumentParser
import Foundation
import LarderCore
import LarderCurl

struct ServerOptions: ParsableArguments {
    @Option(help: "The Larder to talk to (env LARDER_SERVER; default http://127.0.0.1:8080, or LARDER_HOST and LARDER_PORT when set).")
    var server: String?

    @Option(help: "The admin token (env LARDER_ADMIN_TOKEN).")
    var token: String?

    @Option(help: "PEM file of the CA that signed an https:// server's certificate, instead of the system's CAs (env LARDER_CACERT).")
    var cacert: String?

    @Flag(help: "Print the server's JSON as received instead of a table (ls: one entry per line, NDJSON).")
    var json = false

    var base: String { Self.base(server) }

    /// `--server`, else LARDER_SERVER, else where `larder serve` listens by LARDER_HOST and
    /// LARDER_PORT (as in the container; a wildcard host is reached on loopback; https when
    /// LARDER_TLS_CERT is set), else 127.0.0.1:8080; without a trailing slash.
    static func base(_ server: String?, environment: [String: String] = ProcessInfo.processInfo.environment) -> String {
        let port = environment["LARDER_PORT"].flatMap { Int($0) } ?? 8080
        let host: String
        switch environment["LARDER_HOST"] ?? "" {
        case "", "0.0.0.0": host = "127.0.0.1"
        case "::": host = "[::1]"
        case let given where given.contains(":"): host = "[\(given)]"
        case let given: host = given
        }
        let scheme = (environment["LARDER_TLS_CERT"] ?? "").isEmpty ? "http" : "https"
        let chosen = server ?? environment["LARDER_SERVER"].flatMap { $0.isEmpty ? nil : $0 } ?? "\(scheme)://\(host):\(port)"
        return chosen.hasSuffix("/") ? String(chosen.dropLast()) : chosen
    }

    /// `--cacert`, else LARDER_CACERT.
    static func caFile(_ given: String?, environment: [String: String] = ProcessInfo.processInfo.environment) -> String? {
        given ?? environment["LARDER_CACERT"].flatMap { $0.isEmpty ? nil : $0 }
    }

    private var givenToken: String? {
        guard let token = token ?? ProcessInfo.processInfo.environment["LARDER_ADMIN_TOKEN"], !token.isEmpty else { return nil }
        return token
    }

    /// Sends one admin request. A 2xx answer is a JSON object (or empty, for 204); anything else
    /// throws: the server's error (AdminRefusal), or NotAdminAPI when the answer is not Larder's.
    func call(_ method: String, _ path: String, body: Any? = nil) throws -> AdminAnswer {
        var headers: [(String, String)] = []
        if let givenToken { headers.append(("Authorization", "Bearer \(givenToken)")) }
        var bytes: [UInt8]?
        if let body {
            bytes = Array(try JSONSerialization.data(withJSONObject: body))
            headers.append(("Content-Type", "application/json"))
        }
        let response: BlockingHTTPResponse
        do {
            response = try BlockingHTTPClient.send(
                method, base + path, headers: headers, body: bytes, tls: BlockingTLSOptions(caFile: Self.caFile(cacert)))
        } catch {
            throw CLIError(
                "cannot reach \(AddressRedaction.redacted(base)): \(error.description)\n"
                    + "  is Larder running there? Point --server (or LARDER_SERVER) at it")
        }
        let parsed = response.body.isEmpty ? nil : try? JSONSerialization.jsonObject(with: Data(response.body))
        let request = "\(method) \(path.split(separator: "?", maxSplits: 1).first.map(String.init) ?? path)"
        guard (200...299).contains(response.status) else {
            guard let error = (parsed as? [String: Any])?["error"] as? [String: Any], let code = error["code"] as? String else {
                throw NotAdminAPI(base: base, reason: "\(request) answered \(response.status) \(Self.describe(response))")
            }
            throw AdminRefusal(
                request: request, status: response.status, code: code, message: error["message"] as? String ?? "",
                field: error["field"] as? String, tokenGiven: givenToken != nil)
        }
        guard response.body.isEmpty || parsed is [String: Any] else {
            throw NotAdminAPI(base: base, reason: "\(request) answered \(response.status) \(Self.describe(response))")
        }
        return AdminAnswer(base: base, request: request, bytes: response.body, value: parsed)
    }

    /// "with text/html: <html>…", the content type and the start of the body, for errors.
    private static func describe(_ response: BlockingHTTPResponse) -> String {
        guard !response.body.isEmpty else { return "with an empty body" }
        let start = String(decoding: response.body.prefix(60), as: UTF8.self).replacingOccurrences(of: "\n", with: " ")
        let kind = response.contentType.map { "with \($0)" } ?? "with no content type"
        return "\(kind), not a JSON object: \(start)\(response.body.count > 60 ? "…" : "")"
    }

    /// Writes bytes the server sent, as they are, and a newline.
    func printRaw(_ bytes: some Collection<UInt8>) {
        FileHandle.standardOutput.write(Data(bytes) + Data("\n".utf8))
    }
}

/// A 2xx answer of the admin API: its bytes as received and the JSON they hold.
struct AdminAnswer {
    let base: String
    let request: String
    let bytes: [UInt8]
    let value: Any?

    var object: [String: Any] { value as? [String: Any] ?? [:] }

    /// The answer, when it has every member `names`; else it is not the admin API's answer.
    func requiring(_ names: String...) throws -> [String: Any] {
        let missing = names.filter { object[$0] == nil }
        guard missing.isEmpty else {
            let start = String(decoding: bytes.prefix(60), as: UTF8.self)
            throw NotAdminAPI(
                base: base,
                reason: "\(request) answered JSON without \(missing.joined(separator: ", ")): \(start)\(bytes.count > 60 ? "…" : "")")
        }
        return object
    }
}

struct CLIError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// The admin API's own error answer: its code, message and field, with what to do about it.
struct AdminRefusal: Error, CustomStringConvertible {
    let request: String
    let status: Int
    let code: String
    let message: String
    let field: String?
    let tokenGiven: Bool

    var description: String {
        var text = "\(request) → \(status) \(code): \(message)" + (field.map { " (\($0))" } ?? "")
        if status == 401 {
            text +=
                tokenGiven
                ? "\n  the admin token given (--token or LARDER_ADMIN_TOKEN) is not this server's --admin-token"
                : "\n  this server requires its admin token: give it with --token TOKEN or LARDER_ADMIN_TOKEN=TOKEN"
        } else if status == 404, code == "not_found", message.hasPrefix("no route for") {
            text += "\n  the admin routes are not on this port: point --server at Larder's --admin-port"
        }
        return text
    }
}

/// The answer came from something that is not Larder's admin API.
struct NotAdminAPI: Error, CustomStringConvertible {
    let base: String
    let reason: String

    var description: String {
        "this is not a Larder admin API at \(AddressRedaction.redacted(base)) (\(reason))\n"
            + "  point --server (or LARDER_SERVER) at Larder's port, or at its --admin-port when it has one"
    }
}

/// Runs `body`, printing an expected error on stderr and exiting 1 instead of a stack of context.
func reporting(_ body: () throws -> Void) throws {
    do {
        try body()
    } catch let error as CLIError {
        try fail(error.description)
    } catch let error as AdminRefusal {
        try fail(error.description)
    } catch let error as NotAdminAPI {
        try fail(error.description)
    }
}

private func fail(_ message: String) throws -> Never {
    FileHandle.standardError.write(Data("larder: \(message)\n".utf8))
    throw ExitCode(1)
}
