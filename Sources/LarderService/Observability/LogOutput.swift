// Larder's log lines, on standard error, one per event: as text for people (`--log-format text`,
// the default) or as one JSON object per line for collectors (`json`). The level and the format
// are read on every event from one `LogControl`, so a reload (SIGHUP) changes them for every
// logger at once, those handed to the adapters at start included.
//
// Text:  2026-11-26T09:15:58.123Z info POST /fetch 200 miss 2.45ms request_id=… client=127.0.0.1
// JSON:  {"time":"2026-11-26T09:15:58.123Z","level":"info","message":"POST /fetch 200 miss 2.45ms","request_id":"…",…}
//
// Messages and values are escaped in both: a client-chosen path must not forge a second line,
// whatever a reader takes for a line end (`RequestFraming.printable`). JSON escapes the same
// characters (`\u2028`): valid JSON either way, but collectors and viewers that take U+2028 or
// NEL for a line end would split the object there, and a terminal would obey a C1 control.
// A line whose message already says some of its fields names them under `in_message`: text
// leaves them out (the access line would say its status twice), JSON keeps them as members.

import LarderCore
public import Logging
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// How log lines are written.
public enum LogFormat: String, Sendable, CaseIterable {
    case text, json
}

/// The level and format every Larder log handler follows; changed live by a reload.
public final class LogControl: Sendable {
    private let levelIndex: Atomic<Int>
    private let formatIndex: Atomic<Int>

    public init(level: Logger.Level = .info, format: LogFormat = .text) {
        levelIndex = Atomic(Self.index(of: level))
        formatIndex = Atomic(LogFormat.allCases.firstIndex(of: format) ?? 0)
    }

    public var level: Logger.Level {
        get { Logger.Level.allCases[levelIndex.load(ordering: .relaxed)] }
        set { levelIndex.store(Self.index(of: newValue), ordering: .relaxed) }
    }

    public var format: LogFormat {
        get { LogFormat.allCases[formatIndex.load(ordering: .relaxed)] }
        set { formatIndex.store(LogFormat.allCases.firstIndex(of: newValue) ?? 0, ordering: .relaxed) }
    }

    private static func index(of level: Logger.Level) -> Int {
        Logger.Level.allCases.firstIndex(of: level) ?? 0
    }
}

/// A swift-log handler writing Larder's lines; `write` gets each line without its newline.
public struct LarderLogHandler: LogHandler {
    public let control: LogControl
    public var metadata: Logger.Metadata = [:]
    private let write: @Sendable (String) -> Void

    public init(control: LogControl, write: @escaping @Sendable (String) -> Void = LarderLogHandler.standardError) {
        self.control = control
        self.write = write
    }

    /// The shared level: setting it on one logger sets it for all (the level is the service's).
    public var logLevel: Logger.Level {
        get { control.level }
        set { control.level = newValue }
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    /// The metadata key listing the fields the message already says (left out of text lines).
    public static let inMessageKey = "in_message"

    public func log(event: LogEvent) {
        var fields = metadata
        if let more = event.metadata { fields.merge(more) { _, new in new } }
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        let time = RFC3339Time.format(Double(now.tv_sec) + Double(now.tv_nsec) / 1e9)
        switch control.format {
        case .text: write(Self.textLine(time: time, level: event.level, message: event.message.description, fields: fields))
        case .json: write(Self.jsonLine(time: time, level: event.level, message: event.message.description, fields: fields))
        }
    }

    /// `time level message key=value…`, keys sorted; values with spaces or quotes are quoted.
    static func textLine(time: String, level: Logger.Level, message: String, fields: Logger.Metadata) -> String {
        "\(time) \(level) \(RequestFraming.printable(message))" + fieldsText(fields)
    }

    /// ` key=value…` as text lines end: keys sorted, the message's own fields left out; a value
    /// with a space or a quote is quoted (logfmt).
    public static func fieldsText(_ fields: Logger.Metadata) -> String {
        var line = ""
        var said: Set<String> = [inMessageKey]
        if case .array(let names)? = fields[inMessageKey] { said.formUnion(names.map(\.description)) }
        for key in fields.keys.sorted() where !said.contains(key) {
            let value = RequestFraming.printable(fields[key]!.description)
            let plain = !value.isEmpty && !value.contains(where: { $0 == " " || $0 == "\"" })
            line += plain ? " \(key)=\(value)" : " \(key)=\"\(value.replacingOccurrences(of: "\"", with: "\\\""))\""
        }
        return line
    }

    /// One JSON object: time, level, message, then the fields (integers and numbers as numbers).
    static func jsonLine(time: String, level: Logger.Level, message: String, fields: Logger.Metadata) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(160 + message.utf8.count)
        out.append(contentsOf: #"{"time":"#.utf8)
        appendLogString(time, to: &out)
        out.append(contentsOf: #","level":"#.utf8)
        appendLogString(level.rawValue, to: &out)
        out.append(contentsOf: #","message":"#.utf8)
        appendLogString(message, to: &out)
        let skipped: Set<String> = ["time", "level", "message", inMessageKey]
        for key in fields.keys.sorted() where !skipped.contains(key) {
            out.append(UInt8(ascii: ","))
            appendLogString(key, to: &out)
            out.append(UInt8(ascii: ":"))
            appendJSON(fields[key]!, to: &out)
        }
        out.append(UInt8(ascii: "}"))
        return String(decoding: out, as: UTF8.self)
    }

    private static func appendJSON(_ value: Logger.Metadata.Value, to out: inout [UInt8]) {
        switch value {
        case .string(let text):
            appendLogString(text, to: &out)
        case .stringConvertible(let number as Int):
            out.append(contentsOf: String(number).utf8)
        case .stringConvertible(let number as Double) where number.isFinite:
            out.append(contentsOf: "\(number)".utf8)
        case .stringConvertible(let other):
            appendLogString(other.description, to: &out)
        case .array(let values):
            out.append(UInt8(ascii: "["))
            for (index, element) in values.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                appendJSON(element, to: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .dictionary(let values):
            out.append(UInt8(ascii: "{"))
            for (index, key) in values.keys.sorted().enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                appendLogString(key, to: &out)
                out.append(UInt8(ascii: ":"))
                appendJSON(values[key]!, to: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    /// A JSON string as `JSONWriter` writes it, with the characters text lines escape for being
    /// line ends, terminal controls or bidirectional controls also escaped (`\u0085`, `\u2028`).
    static func appendLogString(_ text: String, to out: inout [UInt8]) {
        guard text.utf8.contains(where: { $0 >= 0x80 && RequestFraming.mayStartUnsafeCharacter($0) }) else {
            return JSONWriter.appendString(text, to: &out)
        }
        out.append(UInt8(ascii: "\""))
        var run = ""
        for scalar in text.unicodeScalars {
            guard scalar.value >= 0x80, RequestFraming.isUnsafeInLogs(scalar) else {
                run.unicodeScalars.append(scalar)
                continue
            }
            JSONWriter.appendEscaped(run.utf8, to: &out)
            run = ""
            let digits = String(scalar.value, radix: 16)
            out.append(contentsOf: ("\\u" + String(repeating: "0", count: 4 - digits.count) + digits).utf8)
        }
        JSONWriter.appendEscaped(run.utf8, to: &out)
        out.append(UInt8(ascii: "\""))
    }

    /// Writes the line and its newline to standard error in one write(2), so lines from several
    /// threads do not interleave (a pipe keeps writes up to PIPE_BUF whole).
    public static let standardError: @Sendable (String) -> Void = { line in
        var bytes = Array(line.utf8)
        bytes.append(UInt8(ascii: "\n"))
        bytes.withUnsafeBytes { writeAll($0, to: 2) }
    }

    /// Writes all of `bytes` to `descriptor`, again after a partial write or an interrupted one;
    /// gives up on an error (a log line has nowhere else to go).
    static func writeAll(_ bytes: UnsafeRawBufferPointer, to descriptor: Int32) {
        var offset = 0
        while offset < bytes.count {
            let written = Glibc.write(descriptor, bytes.baseAddress! + offset, bytes.count - offset)
            if written > 0 {
                offset += written
            } else if written < 0, errno == EINTR {
                continue
            } else {
                return
            }
        }
    }
}
