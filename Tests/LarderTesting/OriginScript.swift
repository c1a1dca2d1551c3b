// What the test origins answer, as a pure function of the request: the socket origin
// (LarderServiceTesting's TestOrigin) and the engine's (ScriptedOrigin) answer alike.
//
// Behaviour is chosen per request by query parameters:
//   status=NNN         response status (default 200)
//   unsafe=NNN         response status for methods other than GET and HEAD
//   delay=MS           answer after MS milliseconds (TestOrigin only; the connection waits, nothing blocks)
//   hold=N|gate        answer once N requests of the path wait, or the test releases the path
//   size=N             body of N bytes of "a" (application/octet-stream: filler whose stored size is its
//                      size, never compressed at rest) instead of the default JSON
//   cc=VALUE           Cache-Control
//   ct=VALUE           Content-Type
//   h=Name:Value       an extra response header (repeatable)
//   location=URL       Location header (use with status=302 etc.)
//   clself=1           Content-Location naming the request's own target
//   cookie=1           Set-Cookie: OriginScript.cookie (a value that appears nowhere in the URL)
//   etag=VALUE         ETag header; a request whose If-None-Match matches gets 304
//   lm=HTTP-DATE       Last-Modified header; a request whose If-Modified-Since equals it gets 304
//   loop=1             Location header pointing back at this very request
//   binary=1           a small binary body
//   jsonsize=N         a JSON array of about N bytes (application/json)
//   fill=N             N bytes made from the path (OriginScript.fill), so any body can be recomputed
//                      (application/octet-stream, as size=)
//   text=N             the same bytes as fill=N, as text/plain (compressed at rest)
//   records=N          a JSON API body of at least N bytes made from the path (OriginScript.records):
//                      records whose field names repeat and whose values do not (application/json)
// The default body is JSON: {"path": …, "n": <how many requests this path has seen>,
// "method": …, "query": …, "body": <request body as text>, "headers": {…}}.

import Foundation
import LarderCore

/// A request as an origin received it (header names lower-cased, one value per name).
public struct RecordedRequest: Sendable {
    public let method: String
    public let target: String
    public let headers: [String: String]
    public let body: [UInt8]

    public init(method: String, target: String, headers: [String: String], body: [UInt8]) {
        self.method = method
        self.target = target
        self.headers = headers
        self.body = body
    }
}

/// The answer the query parameters ask for, and how it is to be sent.
public struct OriginAnswer: Sendable {
    public var status: Int
    public var headers: [(name: String, value: String)]
    public var body: [UInt8]
    /// `hold=`'s value: answer when N requests of the path wait, or on release ("gate").
    public var hold: String?
    /// `delay=`'s milliseconds.
    public var delayMs: Int?
}

public enum OriginScript {
    public static let cookie = "sid=origin-cookie-secret-4242"

    /// The answer to `request`, the `n`th its path has seen; `date`, when given, is sent as
    /// the Date field (the test's clock: apparent ages stay truthful).
    public static func answer(to request: RecordedRequest, n: Int, date: Double?) -> OriginAnswer {
        let (path, query) = split(request.target)
        let headers = request.headers
        func value(_ name: String) -> String? { query.first { $0.0 == name }?.1 }

        var status = Int(value("status") ?? "") ?? 200
        if request.method != "GET", request.method != "HEAD", let unsafe = value("unsafe").flatMap({ Int($0) }) {
            status = unsafe
        }
        let etag = value("etag")
        let lastModified = value("lm")
        let notModified =
            (etag != nil && headers["if-none-match"] == etag)
            || (lastModified != nil && headers["if-modified-since"] == lastModified)
        if notModified { status = 304 }
        var responseHeaders: [(name: String, value: String)] = []
        var body: [UInt8]
        if let size = value("size").flatMap({ Int($0) }) {
            body = [UInt8](repeating: UInt8(ascii: "a"), count: size)
            responseHeaders.append(("Content-Type", "application/octet-stream"))
        } else if let size = value("fill").flatMap({ Int($0) }) {
            body = fill(path: path, size: size)
            responseHeaders.append(("Content-Type", "application/octet-stream"))
        } else if let size = value("text").flatMap({ Int($0) }) {
            body = fill(path: path, size: size)
            responseHeaders.append(("Content-Type", "text/plain"))
        } else if let size = value("records").flatMap({ Int($0) }) {
            body = records(path: path, size: size)
            responseHeaders.append(("Content-Type", "application/json"))
        } else if let size = value("jsonsize").flatMap({ Int($0) }) {
            body = Array("[".utf8) + Array(repeating: Array("123,".utf8), count: max(0, size / 4)).flatMap { $0 } + Array("0]".utf8)
            responseHeaders.append(("Content-Type", "application/json"))
        } else if value("binary") != nil {
            body = [0xFF, 0x00, 0xFE, 0x01, 0x80]
            responseHeaders.append(("Content-Type", "application/octet-stream"))
        } else {
            let document: [String: Any] = [
                "path": path, "n": n, "method": request.method,
                "query": Dictionary(query.map { ($0.0, $0.1) }, uniquingKeysWith: { $1 }),
                "body": String(decoding: request.body, as: UTF8.self), "headers": headers
            ]
            body = Array(try! JSONSerialization.data(withJSONObject: document, options: [.sortedKeys]))
            if value("ct") == nil { responseHeaders.append(("Content-Type", "application/json")) }
        }
        for (name, value) in query {
            switch name {
            case "cc": responseHeaders.append(("Cache-Control", value))
            case "ct": responseHeaders.append(("Content-Type", value))
            case "location": responseHeaders.append(("Location", value))
            case "loop": responseHeaders.append(("Location", request.target))
            case "clself": responseHeaders.append(("Content-Location", request.target))
            case "cookie": responseHeaders.append(("Set-Cookie", cookie))
            case "etag": responseHeaders.append(("ETag", value))
            case "lm": responseHeaders.append(("Last-Modified", value))
            case "h":
                if let colon = value.firstIndex(of: ":") {
                    responseHeaders.append((String(value[..<colon]), String(value[value.index(after: colon)...])))
                }
            default: break
            }
        }
        if notModified { responseHeaders.removeAll { $0.name == "Content-Type" } }
        if let date { responseHeaders.append(("Date", HTTPDate.format(date))) }
        return OriginAnswer(
            status: status, headers: responseHeaders, body: notModified ? [] : body, hold: value("hold"),
            delayMs: value("delay").flatMap { Int($0) })
    }

    /// A target's path and its query's decoded name-value pairs, in order.
    public static func split(_ target: String) -> (String, [(String, String)]) {
        guard let mark = target.firstIndex(of: "?") else { return (target, []) }
        let path = String(target[..<mark])
        let query = target[target.index(after: mark)...].split(separator: "&").map { pair -> (String, String) in
            let parts = pair.split(separator: "=", maxSplits: 1).map(String.init)
            let name = parts[0].removingPercentEncoding ?? parts[0]
            let value = parts.count > 1 ? (parts[1].replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? parts[1]) : ""
            return (name, value)
        }
        return (path, query)
    }

    /// A JSON object `{"data":[…],"total":N}` of at least `size` bytes, made from `path`: records
    /// as a service's API answers (ids, uuids, names, emails, flags, scores, tags), their values
    /// drawn from a generator seeded by the path.
    public static func records(path: String, size: Int) -> [UInt8] {
        var state = path.utf8.reduce(UInt64(0xcbf2_9ce4_8422_2325)) { ($0 ^ UInt64($1)) &* 0x100_0000_01b3 }
        func next(_ bound: Int) -> Int {
            state ^= state << 13
            state ^= state >> 7
            state ^= state << 17
            return Int(state % UInt64(bound))
        }
        let words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo", "lima"]
        var out = Array(#"{"data":["#.utf8)
        var count = 0
        while out.count < size {
            if count > 0 { out.append(UInt8(ascii: ",")) }
            let uuid = (0..<4).map { _ in String(next(1 << 30) | 1 << 30, radix: 16) }.joined()
            let name = (0...next(2)).map { _ in words[next(words.count)].capitalized }.joined(separator: " ")
            let tags = (0..<next(4)).map { _ in "\"\(words[next(words.count)])\"" }.joined(separator: ",")
            let record = """
                {"id":\(next(1_000_000_000)),"uuid":"\(uuid)","name":"\(name)",\
                "email":"\(words[next(words.count)]).\(words[next(words.count)])@example.com",\
                "active":\(next(10) < 7),"score":\(next(10_000)).\(next(100)),"tags":[\(tags)],\
                "address":{"street":"\(next(999) + 1) \(words[next(words.count)].capitalized) Street","zip":"\(10_000 + next(89_999))"}}
                """
            out.append(contentsOf: record.utf8)
            count += 1
        }
        out.append(contentsOf: #"],"total":\#(count)}"#.utf8)
        return out
    }

    /// `size` bytes: "<path>|<offset>\n" lines, over and over, cut at `size`.
    public static func fill(path: String, size: Int) -> [UInt8] {
        var body: [UInt8] = []
        body.reserveCapacity(size)
        while body.count < size { body.append(contentsOf: "\(path)|\(body.count)\n".utf8) }
        return Array(body.prefix(size))
    }
}
