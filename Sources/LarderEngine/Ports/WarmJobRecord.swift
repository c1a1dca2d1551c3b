import LarderCore

/// A cache-warming job as persisted (POST /cache/warm).
public struct WarmJobRecord: Sendable, Equatable {
    public enum State: String, Sendable {
        case queued, running, done, cancelled
    }

    public struct ItemError: Sendable, Equatable {
        public var index: Int
        public var url: String
        public var code: String
        public init(index: Int, url: String, code: String) {
            self.index = index
            self.url = url
            self.code = code
        }
    }

    public var id: String
    public var state: State
    public var total: Int
    public var done = 0
    public var failed = 0
    public var stored = 0
    public var bytes = 0
    public var bytesExpected = 0
    public var concurrency: Int
    public var createdAt: Double
    public var startedAt: Double?
    public var finishedAt: Double?
    /// The first 100 failures.
    public var errors: [ItemError] = []

    public init(id: String, state: State, total: Int, concurrency: Int, createdAt: Double) {
        self.id = id
        self.state = state
        self.total = total
        self.concurrency = concurrency
        self.createdAt = createdAt
    }

    /// `[{"index","url","code"}, …]`, as the API shows it and the store keeps it.
    public var errorsJSON: [UInt8] {
        var out: [UInt8] = [UInt8(ascii: "[")]
        for (position, error) in errors.enumerated() {
            if position > 0 { out.append(UInt8(ascii: ",")) }
            out.append(contentsOf: #"{"index":"#.utf8)
            out.append(contentsOf: String(error.index).utf8)
            out.append(contentsOf: #","url":"#.utf8)
            JSONWriter.appendString(error.url, to: &out)
            out.append(contentsOf: #","code":"#.utf8)
            JSONWriter.appendString(error.code, to: &out)
            out.append(UInt8(ascii: "}"))
        }
        out.append(UInt8(ascii: "]"))
        return out
    }

    /// Reads what `errorsJSON` wrote.
    public static func errors(fromJSON bytes: [UInt8]) -> [ItemError] {
        guard case .array(let items)? = try? JSONParser.parse(bytes) else { return [] }
        return items.compactMap { item in
            guard case .object(let members) = item, case .number(let number)? = members["index"], let index = number.int64,
                case .string(let url)? = members["url"],
                case .string(let code)? = members["code"]
            else { return nil }
            return ItemError(index: Int(index), url: url, code: code)
        }
    }
}
