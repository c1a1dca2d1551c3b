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

    /// POST /cache/warm
    func create(_ request: RouteRequest) throws(LarderError) -> RouteAnswer? {
        if request.http.bodyTooLarge { throw .invalid("body", "request body is larger than the limit") }
        let parsed = try WarmJobRequest.parse(json: request.http.body, upstreams: upstreams)
        jobs.create(parsed) { record in
            guard let record else {
                let error = LarderError(.storageFailed, "the job could not be saved to the database")
                return request.respond(Self.json(error.status, error.jsonBody))
            }
            var body: [UInt8] = Array(#"{"job":"#.utf8)
            JSONWriter.appendString(record.id, to: &body)
            body.append(contentsOf: #","total":"#.utf8)
            body.append(contentsOf: String(record.total).utf8)
            body.append(UInt8(ascii: "}"))
            var response = Self.json(202, body)
            response.headers.append(("Location", "\(Self.prefix)/\(record.id)"))
            request.respond(response)
        }
        return nil
    }

    /// GET /cache/warm
    func list() -> RouteAnswer? {
        var body: [UInt8] = Array(#"{"jobs":["#.utf8)
        for (index, record) in jobs.list().enumerated() {
            if index > 0 { body.append(UInt8(ascii: ",")) }
            body.append(contentsOf: Self.render(record))
        }
        body.append(contentsOf: "]}".utf8)
        return RouteAnswer(Self.json(200, body))
    }

    /// GET /cache/warm/{id}
    func status(_ request: RouteRequest) throws(LarderError) -> RouteAnswer? {
        guard let record = jobs.status(request.parameter) else { throw LarderError(.notFound, "no warm job '\(request.parameter)'") }
        return RouteAnswer(Self.json(200, Self.render(record)))
    }

    /// DELETE /cache/warm/{id}: cancels the job (transfers in flight aborted).
    func cancel(_ request: RouteRequest) -> RouteAnswer? {
        let id = request.parameter
        jobs.cancel(id) { record, saved in
            guard let record else {
                return request.respond(Self.json(404, LarderError(.notFound, "no warm job '\(id)'").jsonBody))
            }
            guard saved else {
                let error = LarderError(
                    .storageFailed,
                    "the job was cancelled on this instance, but the store did not take the change: "
                        + "another instance could resume it; retry")
                return request.respond(Self.json(error.status, error.jsonBody))
            }
            request.respond(Self.json(200, Self.render(record)))
        }
        return nil
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
        for (name, value) in [
            ("total", record.total), ("done", record.done), ("failed", record.failed), ("stored", record.stored),
            ("bytes", record.bytes), ("bytesExpected", record.bytesExpected)
        ] {
            out.append(contentsOf: ",\"\(name)\":\(value)".utf8)
        }
        let times = [("createdAt", Optional(record.createdAt)), ("startedAt", record.startedAt), ("finishedAt", record.finishedAt)]
        for (name, time) in times {
            out.append(contentsOf: ",\"\(name)\":".utf8)
            if let time {
                JSONWriter.appendString(RFC3339Time.format(time), to: &out)
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
