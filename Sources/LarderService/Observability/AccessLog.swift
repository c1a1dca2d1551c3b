// One access-log line per request: the message says what a person scans for
// (`POST /fetch 200 miss 2.45ms`), the fields say the rest (request id, trace, route, bytes,
// client, upstream URL with --redact-query applied, key prefix), as `key=value` in text and as
// members of the object in JSON, exactly as LarderLogHandler writes other lines (LogOutput.swift).
// The path is the client's (percent-decoded by the HTTP layer): its control characters are
// escaped (`/nope%0aFORGED` must not write a second line), and in text its spaces are shown as
// %20 (a fake `key=value` must not follow one).
//
// The line is written straight into the bytes of its loop's buffer (AccessLogWriter), field by
// field in the order the handler sorts them: no metadata dictionary, no strings made per field.

import LarderCore
import LarderHTTP
import Logging

#if canImport(Glibc)
    import Glibc
#endif

enum AccessLog {
    /// The key digits logged, as `larder cache ls` prints them (`show` takes any unique prefix).
    static let keyPrefixLength = 16

    /// What one request's line says.
    struct Line {
        let request: HTTPServerRequest
        let answer: RouteAnswer
        let status: Int
        let seconds: Double
        let route: String
        let identity: RequestIdentity
        let redaction: QueryRedaction
    }

    static func write(_ line: Line, to writer: AccessLogWriter) {
        guard writer.isEnabled else { return }
        let format = writer.format
        writer.append(loop: line.request.loop) { out, clock in
            switch format {
            case .text: appendText(line, clock: &clock, to: &out)
            case .json: appendJSON(line, clock: &clock, to: &out)
            }
            out.append(UInt8(ascii: "\n"))
        }
    }

    /// An access line for a request the HTTP layer refused before routing it (no fields).
    static func writeRefusal(method: String, path: String, status: Int, code: String, to writer: AccessLogWriter) {
        guard writer.isEnabled else { return }
        let message = "\(method) \(path.replacingOccurrences(of: " ", with: "%20")) \(status) \(code) -"
        writer.append(loop: 0) { appendNotice(message, level: .info, format: writer.format, clock: &$1, to: &$0) }
    }

    /// A line of the access log's own (the writer's drop notices, refusals): time, level, message.
    static func appendNotice(
        _ message: String, level: Logger.Level, format: LogFormat, clock: inout LineClock, to out: inout [UInt8]
    ) {
        switch format {
        case .text:
            clock.append(to: &out)
            out.append(UInt8(ascii: " "))
            out.appendUTF8(level.rawValue)
            out.append(UInt8(ascii: " "))
            appendPrintable(message, to: &out)
        case .json:
            out.appendLiteral(#"{"time":""#)
            clock.append(to: &out)
            out.appendLiteral(#"","level":"#)
            LarderLogHandler.appendLogString(level.rawValue, to: &out)
            out.appendLiteral(#","message":"#)
            LarderLogHandler.appendLogString(message, to: &out)
            out.append(UInt8(ascii: "}"))
        }
        out.append(UInt8(ascii: "\n"))
    }

    // MARK: - Text

    /// `time info METHOD PATH STATUS OUTCOME MSms` and the fields in key order.
    private static func appendText(_ line: Line, clock: inout LineClock, to out: inout [UInt8]) {
        clock.append(to: &out)
        out.appendLiteral(" info ")
        appendPrintable(line.request.method, to: &out)
        out.append(UInt8(ascii: " "))
        appendPrintable(line.request.path, spacesEncoded: true, to: &out)
        out.append(UInt8(ascii: " "))
        DecimalDigits.append(line.status, to: &out)
        out.append(UInt8(ascii: " "))
        appendPrintable(outcome(of: line.answer), to: &out)
        out.append(UInt8(ascii: " "))
        appendMilliseconds(line.seconds, to: &out)
        out.appendLiteral("ms")
        if let bytes = bytes(of: line.answer.response) {
            out.appendLiteral(" bytes=")
            DecimalDigits.append(bytes, to: &out)
        }
        if let client = line.request.clientAddress { appendTextField("client", to: &out) { client.appendDescription(to: &$0) } }
        if let key = line.answer.key {
            out.appendLiteral(" key=")
            out.appendUTF8(key, prefix: keyPrefixLength)
        }
        out.appendLiteral(" request_id=")
        line.identity.appendID(to: &out)
        appendTextField("route", to: &out) { $0.appendUTF8(line.route) }
        let context = line.identity.span.context
        out.appendLiteral(" span_id=")
        withUnsafeBytes(of: context.spanID.bytes) { HexDigits.append($0, to: &out) }
        out.appendLiteral(" trace_id=")
        withUnsafeBytes(of: context.traceID.bytes) { HexDigits.append($0, to: &out) }
        if let upstream = line.answer.upstream {
            appendTextField("upstream", to: &out) { appendUpstream(upstream, redaction: line.redaction, to: &$0) }
        }
    }

    /// The upstream URL with --redact-query applied; written as it is when it has no query.
    private static func appendUpstream(_ upstream: UpstreamURL, redaction: QueryRedaction, to out: inout [UInt8]) {
        guard upstream.queryItems.isEmpty || redaction.names.isEmpty else {
            return out.append(contentsOf: redaction.apply(upstream.absoluteString).utf8)
        }
        upstream.appendAbsoluteString(to: &out)
    }

    /// ` name=value`, with the value `write` appends: most values need nothing more and stay as
    /// written; one with a byte to escape, a space or a quote, or none, is written again as
    /// `LarderLogHandler.fieldsText` writes it.
    private static func appendTextField(_ name: StaticString, to out: inout [UInt8], _ write: (inout [UInt8]) -> Void) {
        out.append(UInt8(ascii: " "))
        out.append(contentsOf: UnsafeBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount))
        out.append(UInt8(ascii: "="))
        let start = out.count
        write(&out)
        let needsMore =
            out.count == start
            || out[start...].contains { RequestFraming.mayStartUnsafeCharacter($0) || $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\"") }
        guard needsMore else { return }
        let value = String(decoding: out[start...], as: UTF8.self)
        out.removeSubrange(start...)
        appendEscapedValue(value, to: &out)
    }

    /// A value escaped, and quoted when it is empty or holds a space or a quote (logfmt).
    private static func appendEscapedValue(_ value: String, to out: inout [UInt8]) {
        let start = out.count
        appendPrintable(value, to: &out)
        let written = out[start...]
        guard written.isEmpty || written.contains(where: { $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\"") }) else { return }
        let quoted = Array(written)
        out.removeSubrange(start...)
        out.append(UInt8(ascii: "\""))
        for byte in quoted {
            if byte == UInt8(ascii: "\"") { out.append(UInt8(ascii: "\\")) }
            out.append(byte)
        }
        out.append(UInt8(ascii: "\""))
    }

    /// `text` as `RequestFraming.printable` writes it; most text has nothing to escape and is
    /// copied as it is.
    private static func appendPrintable(_ text: String, spacesEncoded: Bool = false, to out: inout [UInt8]) {
        if text.utf8.contains(where: RequestFraming.mayStartUnsafeCharacter) {
            let escaped = RequestFraming.printable(text)
            out.append(contentsOf: spacesEncoded ? escaped.replacingOccurrences(of: " ", with: "%20").utf8 : escaped.utf8)
            return
        }
        guard spacesEncoded else { return out.appendUTF8(text) }
        for byte in text.utf8 {
            if byte == UInt8(ascii: " ") {
                out.appendLiteral("%20")
            } else {
                out.append(byte)
            }
        }
    }

    // MARK: - JSON

    /// `{"time":…,"level":"info","message":…}` with the fields as members, in key order.
    private static func appendJSON(_ line: Line, clock: inout LineClock, to out: inout [UInt8]) {
        let said = outcome(of: line.answer)
        out.appendLiteral(#"{"time":""#)
        clock.append(to: &out)
        out.appendLiteral(#"","level":"info","message":"#)
        // The message is the text line's (the path with its spaces shown as %20), one string.
        var message: [UInt8] = []
        message.reserveCapacity(line.request.path.utf8.count + 48)
        message.appendUTF8(line.request.method)
        message.append(UInt8(ascii: " "))
        for byte in line.request.path.utf8 {
            if byte == UInt8(ascii: " ") {
                message.appendLiteral("%20")
            } else {
                message.append(byte)
            }
        }
        message.append(UInt8(ascii: " "))
        DecimalDigits.append(line.status, to: &message)
        message.append(UInt8(ascii: " "))
        message.appendUTF8(said)
        message.append(UInt8(ascii: " "))
        appendMilliseconds(line.seconds, to: &message)
        message.appendLiteral("ms")
        LarderLogHandler.appendLogString(String(decoding: message, as: UTF8.self), to: &out)
        if let bytes = bytes(of: line.answer.response) {
            out.appendLiteral(#","bytes":"#)
            DecimalDigits.append(bytes, to: &out)
        }
        if let client = line.request.clientAddress {
            out.appendLiteral(#","client":""#)
            client.appendDescription(to: &out) // digits, dots and colons: nothing to escape
            out.append(UInt8(ascii: "\""))
        }
        out.appendLiteral(#","duration_ms":"#)
        if line.seconds.isFinite {
            appendMilliseconds(line.seconds, to: &out)
        } else {
            // Not a JSON number: written as a string, as LarderLogHandler writes one.
            LarderLogHandler.appendLogString("\(line.seconds)", to: &out)
        }
        if let key = line.answer.key {
            out.appendLiteral(#","key":""#)
            out.appendUTF8(key, prefix: keyPrefixLength)
            out.append(UInt8(ascii: "\""))
        }
        appendJSONMember("method", line.request.method, to: &out)
        appendJSONMember("outcome", said, to: &out)
        appendJSONMember("path", line.request.path, to: &out)
        out.appendLiteral(#","request_id":""#)
        // Made ids are hex, and a caller's are checked to need no escaping (isWellFormedID).
        line.identity.appendID(to: &out)
        out.append(UInt8(ascii: "\""))
        appendJSONMember("route", line.route, to: &out)
        let context = line.identity.span.context
        out.appendLiteral(#","span_id":""#)
        withUnsafeBytes(of: context.spanID.bytes) { HexDigits.append($0, to: &out) }
        out.appendLiteral(#"","status":"#)
        DecimalDigits.append(line.status, to: &out)
        out.appendLiteral(#","trace_id":""#)
        withUnsafeBytes(of: context.traceID.bytes) { HexDigits.append($0, to: &out) }
        out.append(UInt8(ascii: "\""))
        if let upstream = line.answer.upstream {
            appendJSONMember("upstream", line.redaction.apply(upstream.absoluteString), to: &out)
        }
        out.append(UInt8(ascii: "}"))
    }

    private static func appendJSONMember(_ name: String, _ value: String, to out: inout [UInt8]) {
        out.appendLiteral(#",""#)
        out.appendUTF8(name)
        out.appendLiteral(#"":"#)
        LarderLogHandler.appendLogString(value, to: &out)
    }

    // MARK: - Parts

    private static func outcome(of answer: RouteAnswer) -> String {
        answer.outcome?.rawValue ?? answer.errorCode ?? "-"
    }

    /// The body's length when it is known before it is sent (not for a stream).
    static func bytes(of response: HTTPServerResponse) -> Int? {
        if let file = response.file { return file.length }
        if response.stream != nil { return nil }
        return response.body.count
    }

    /// A duration in milliseconds rounded to two decimals, as Swift prints that Double
    /// (`2.45`, `2.5`, `2.0`).
    static func appendMilliseconds(_ seconds: Double, to out: inout [UInt8]) {
        let scaled = (seconds * 100_000).rounded()
        guard scaled.isFinite, abs(scaled) < 1e15 else { return out.appendUTF8("\(scaled / 100)") }
        var hundredths = Int(scaled)
        if hundredths < 0 {
            out.append(UInt8(ascii: "-"))
            hundredths = -hundredths
        }
        DecimalDigits.append(hundredths / 100, to: &out)
        out.append(UInt8(ascii: "."))
        let fraction = hundredths % 100
        out.append(UInt8(ascii: "0") + UInt8(fraction / 10))
        if fraction % 10 != 0 { out.append(UInt8(ascii: "0") + UInt8(fraction % 10)) }
    }
}

/// The wall-clock time as log lines carry it (`YYYY-MM-DDTHH:MM:SS.mmmZ`), the date and the
/// second written once a second: each loop's buffer keeps one, used under its lock.
struct LineClock {
    private var second: Int64 = .min
    /// `YYYY-MM-DDTHH:MM:SS.` of `second`.
    private var secondText: [UInt8] = []

    mutating func append(to out: inout [UInt8]) {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        let milliseconds = Int64(now.tv_sec) * 1000 + Int64(now.tv_nsec) / 1_000_000
        if milliseconds / 1000 != second {
            second = milliseconds / 1000
            secondText.removeAll(keepingCapacity: true)
            RFC3339Time.append(second * 1000, to: &secondText)
            secondText.removeLast(4) // "000Z"
        }
        out.append(contentsOf: secondText)
        let millisecond = Int(milliseconds % 1000)
        out.append(UInt8(ascii: "0") + UInt8(millisecond / 100))
        out.append(UInt8(ascii: "0") + UInt8(millisecond / 10 % 10))
        out.append(UInt8(ascii: "0") + UInt8(millisecond % 10))
        out.append(UInt8(ascii: "Z"))
    }
}
