// The cache-warming routes (see WarmJobs):
//   POST   /cache/warm        start a job → 202 {"job", "total"} with Location
//   GET    /cache/warm        every job
//   GET    /cache/warm/{ID}   one job's progress
//   DELETE /cache/warm/{ID}   cancel it (transfers in flight aborted)

import Foundation
import LarderCore
import LarderEngine
import LarderHTTP

struct WarmRoute: Sendable {
    let jobs: WarmJobs
    let upstreams: [String: NamedUpstream]

    static let prefix = "/cache/warm"

    func handle(_ request: HTTPServerRequest, responder: HTTPResponder, fail: (LarderError, String?) -> HTTPServerResponse,
                finish: @escaping @Sendable (HTTPServerResponse) -> HTTPServerResponse) -> HTTPServerResponse? {
        let rest = request.path.dropFirst(Self.prefix.count)
        if rest.isEmpty || rest == "/" {
            switch request.method {
            case "POST":
                if request.bodyTooLarge { return fail(.invalid("body", "request body is larger than the limit"), nil) }
                let parsed: WarmJobRequest
                do {
                    parsed = try WarmJobRequest.parse(json: request.body, upstreams: upstreams)
                } catch {
                    return fail(error, nil)
                }
                jobs.create(parsed) { record in
                    guard let record else {
                        let error = LarderError(.storageFailed, "the job could not be saved to the database")
                        return responder.respond(finish(Self.json(error.status, error.jsonBody)))
                    }
                    var body: [UInt8] = Array(#"{"job":"#.utf8)
                    JSONWriter.appendString(record.id, to: &body)
                    body.append(contentsOf: #","total":"#.utf8)
                    body.append(contentsOf: String(record.total).utf8)
                    body.append(UInt8(ascii: "}"))
                    var response = Self.json(202, body)
                    response.headers.append(("Location", "\(Self.prefix)/\(record.id)"))
                    responder.respond(finish(response))
                }
                return nil
            case "GET", "HEAD":
                var body: [UInt8] = Array(#"{"jobs":["#.utf8)
                for (index, record) in jobs.list().enumerated() {
                    if index > 0 { body.append(UInt8(ascii: ",")) }
                    body.append(contentsOf: Self.render(record))
                }
                body.append(contentsOf: "]}".utf8)
                return finish(Self.json(200, body))
            default:
                return fail(LarderError(.methodNotAllowed, "use POST or GET for \(Self.prefix)"), "GET, HEAD, POST")
            }
        }
        let id = String(rest.dropFirst())
        switch request.method {
        case "GET", "HEAD":
            guard let record = jobs.status(id) else { return fail(LarderError(.notFound, "no warm job '\(id)'"), nil) }
            return finish(Self.json(200, Self.render(record)))
        case "DELETE":
            jobs.cancel(id) { record, saved in
                guard let record else {
                    return responder.respond(finish(Self.json(404, LarderError(.notFound, "no warm job '\(id)'").jsonBody)))
                }
                guard saved else {
                    let error = LarderError(.storageFailed, "the job was cancelled on this instance, but the store did not take the change: another instance could resume it; retry")
                    return responder.respond(finish(Self.json(error.status, error.jsonBody)))
                }
                responder.respond(finish(Self.json(200, Self.render(record))))
            }
            return nil
        default:
            return fail(LarderError(.methodNotAllowed, "use GET or DELETE for a warm job"), "GET, HEAD, DELETE")
        }
    }

    static func json(_ status: Int, _ body: [UInt8]) -> HTTPServerResponse {
        HTTPServerResponse(status: status, headers: [("Content-Type", "application/json")], body: body)
    }

    /// `{"job","state","total","done","failed","stored","bytes","bytesExpected","createdAt","startedAt","finishedAt","errors"}`
    static func render(_ record: WarmJobRecord) -> [UInt8] {
        var out: [UInt8] = Array(#"{"job":"#.utf8)
        JSONWriter.appendString(record.id, to: &out)
        out.append(contentsOf: #","state":"#.utf8)
        JSONWriter.appendString(record.state.rawValue, to: &out)
        for (name, value) in [("total", record.total), ("done", record.done), ("failed", record.failed), ("stored", record.stored),
                              ("bytes", record.bytes), ("bytesExpected", record.bytesExpected)] {
            out.append(contentsOf: ",\"\(name)\":\(value)".utf8)
        }
        for (name, time) in [("createdAt", Optional(record.createdAt)), ("startedAt", record.startedAt), ("finishedAt", record.finishedAt)] {
            out.append(contentsOf: ",\"\(name)\":".utf8)
            if let time {
                JSONWriter.appendString(ISO8601DateFormatter().string(from: Date(timeIntervalSince1970: time)), to: &out)
            } else {
                out.append(contentsOf: "null".utf8)
            }
        }
        out.append(contentsOf: #","errors":"#.utf8)
        out.append(contentsOf: record.errorsJSON)
        out.append(UInt8(ascii: "}"))
        return out
    }
}
