// The attributes of a request's server span, from OpenTelemetry's semantic conventions for HTTP
// servers (http.request.method, url.path, http.route, http.response.status_code, client.address)
// and Larder's own (larder.request_id, larder.cache.outcome, larder.cache.key). Values go out as
// protobuf strings, so the client's path needs no escaping here.

import LarderCore
import LarderHTTP

enum ServerSpan {
    static func attributes(
        _ request: HTTPServerRequest, answer: RouteAnswer, status: Int, httpRoute: String?, identity: RequestIdentity
    ) -> SpanAttributes {
        var attributes: SpanAttributes = [
            "http.request.method": .string(request.method),
            "url.path": .string(request.path),
            "http.response.status_code": .int(status),
            "larder.request_id": .string(identity.id)
        ]
        if let httpRoute { attributes["http.route"] = .string(httpRoute) }
        if let client = request.clientAddress { attributes["client.address"] = .string(client.description) }
        if let outcome = answer.outcome { attributes["larder.cache.outcome"] = .string(outcome.rawValue) }
        if let code = answer.errorCode { attributes["error.type"] = .string(code) }
        if let key = answer.key { attributes["larder.cache.key"] = .string(key) }
        return attributes
    }
}
