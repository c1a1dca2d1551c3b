// One access-log line per request: the message says what a person scans for
// (`POST /fetch 200 miss 2.45ms`), the fields say the rest (request id, trace, route, bytes,
// client, upstream URL with --redact-query applied, key prefix), as `key=value` in text and as
// members of the object in JSON (LogOutput). The path is the client's (percent-decoded by the
// HTTP layer): the handler escapes its control characters (`/nope%0aFORGED` must not write a
// second line), and its spaces are shown as %20 (a fake `key=value` must not follow one).

import LarderCore
import LarderHTTP
import Logging

enum AccessLog {
    /// The key digits logged, as `larder cache ls` prints them (`show` takes any unique prefix).
    static let keyPrefixLength = 16

    static func write(
        to logger: Logger, request: HTTPServerRequest, answer: RouteAnswer, status: Int, seconds: Double, route: String,
        identity: RequestIdentity, redaction: QueryRedaction
    ) {
        let milliseconds = (seconds * 100_000).rounded() / 100
        let said = answer.outcome?.rawValue ?? answer.errorCode ?? "-"
        var fields: Logger.Metadata = [
            "request_id": .string(identity.id),
            "trace_id": .string(identity.span.context.traceID.description),
            "span_id": .string(identity.span.context.spanID.description),
            "route": .string(route),
            "method": .string(request.method),
            "path": .string(request.path),
            "status": .stringConvertible(status),
            "outcome": .string(said),
            "duration_ms": .stringConvertible(milliseconds),
            LarderLogHandler.inMessageKey: .array(["method", "path", "status", "outcome", "duration_ms"])
        ]
        if let bytes = bytes(of: answer.response) { fields["bytes"] = .stringConvertible(bytes) }
        if let client = request.clientAddress { fields["client"] = .string(client.description) }
        if let upstream = answer.upstream { fields["upstream"] = .string(redaction.apply(upstream.absoluteString)) }
        if let key = answer.key { fields["key"] = .string(String(key.prefix(keyPrefixLength))) }
        // The handler escapes control characters (text) or writes JSON; a space in the path is
        // shown as %20 here, or `/x request_id=forged` would read as a field of the line.
        let path = request.path.replacingOccurrences(of: " ", with: "%20")
        logger.info("\(request.method) \(path) \(status) \(said) \(milliseconds)ms", metadata: fields)
    }

    /// The body's length when it is known before it is sent (not for a stream).
    static func bytes(of response: HTTPServerResponse) -> Int? {
        if let file = response.file { return file.length }
        if response.stream != nil { return nil }
        return response.body.count
    }
}
