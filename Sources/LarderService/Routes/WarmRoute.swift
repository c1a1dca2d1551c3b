// The cache-warming routes (see WarmJobs):
//   POST   /cache/warm        start a job → 202 {"job", "total"} with Location
//   GET    /cache/warm?limit=&cursor=   the jobs, newest first, a page at a time
//   GET    /cache/warm/{ID}   one job's progress
//   DELETE /cache/warm/{ID}   a queued or running job: cancel it (transfers in flight aborted)
//                             → 200 with its final state; a finished job: remove it → 204

import Foundation
import LarderCore
import LarderEngine
import LarderHTTP

struct WarmRoute: Sendable {
    let jobs: WarmJobs
    let upstreams: [String: NamedUpstream]

    static let prefix = "/cache/warm"
    /// Jobs on a page unless `limit` says, and at most.
    static let defaultPageSize = 50
    static let maxPageSize = 500

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

    /// GET /cache/warm: `{"jobs": [...], "nextCursor"}`, newest first; `cursor` is a page's
    /// `nextCursor` (null on the last page).
    func list(_ request: RouteRequest) throws(LarderError) -> RouteAnswer? {
        var limit = Self.defaultPageSize
        var cursor: Int?
        let query = AdminRoute.query(of: request.http.rawTarget)
        try AdminRoute.readQuery(query, allowed: ["limit", "cursor"], kind: "listing option") { name, value throws(LarderError) in
            if name == "limit" {
                guard let count = Self.decimal(value), (1...Self.maxPageSize).contains(count) else {
                    throw .invalid(name, "must be 1 to \(Self.maxPageSize)")
                }
                limit = count
            } else {
                guard let position = Self.decimal(value), position > 0 else {
                    throw .invalid(name, "must be a nextCursor from an earlier page")
                }
                cursor = position
            }
        }
        let page = jobs.page(before: cursor, limit: limit)
        var body: [UInt8] = Array(#"{"jobs":["#.utf8)
        for (index, record) in page.jobs.enumerated() {
            if index > 0 { body.append(UInt8(ascii: ",")) }
            body.append(contentsOf: Self.render(record))
        }
        body.append(contentsOf: #"],"nextCursor":"#.utf8)
        if let next = page.nextCursor { JSONWriter.appendString(String(next), to: &body) } else { body.append(contentsOf: "null".utf8) }
        body.append(UInt8(ascii: "}"))
        return RouteAnswer(Self.json(200, body))
    }

    /// Digits only (no sign, no spaces), at most 18 of them; nil otherwise.
    private static func decimal(_ text: String) -> Int? {
        guard (1...18).contains(text.utf8.count), text.utf8.allSatisfy({ (0x30...0x39).contains($0) }) else { return nil }
        return Int(text)
    }

    /// GET /cache/warm/{id}
    func status(_ request: RouteRequest) throws(LarderError) -> RouteAnswer? {
        guard let record = jobs.status(request.parameter) else { throw LarderError(.notFound, "no warm job '\(request.parameter)'") }
        return RouteAnswer(Self.json(200, Self.render(record)))
    }

    /// DELETE /cache/warm/{id}: cancels a queued or running job (transfers in flight aborted;
    /// 200 with the job, which stays readable), removes a finished one (204).
    func delete(_ request: RouteRequest) -> RouteAnswer? {
        let id = request.parameter
        jobs.delete(id) { deletion in
            switch deletion {
            case .unknown:
                request.respond(Self.json(404, LarderError(.notFound, "no warm job '\(id)'").jsonBody))
            case .cancelled(_, saved: false):
                let error = LarderError(
                    .storageFailed,
                    "the job was cancelled on this instance, but the store did not take the change: "
                        + "another instance could resume it; retry")
                request.respond(Self.json(error.status, error.jsonBody))
            case .cancelled(let record, saved: true):
                request.respond(Self.json(200, Self.render(record)))
            case .removed(saved: false):
                let error = LarderError(.storageFailed, "the store did not take the job's removal: it is kept; retry")
                request.respond(Self.json(error.status, error.jsonBody))
            case .removed(saved: true):
                request.respond(HTTPServerResponse(status: 204))
            }
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
