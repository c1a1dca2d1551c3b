// The admin routes that show and write entries, and the namespace versions:
//   GET  /cache/entries?namespace=&urlPrefix=&host=&tag=&status=&expired=&limit=&cursor=
//   GET  /cache/entries/{key}[?body=true]     every variant under the key
//   PUT  /cache/entries                       {"request", "response", "cache"} → 201 {"key"}
//   GET  /cache/namespaces                    entries, bytes and current version of each
//   POST /cache/namespaces/{ns}/version       {"version": N} | {"bump": true}

import Foundation
import LarderCore
import LarderEngine
import LarderHTTP

extension AdminRoute {
    static let listNames: Set<String> = ["namespace", "urlPrefix", "host", "tag", "status", "expired", "limit", "cursor"]

    // MARK: - GET /cache/entries

    func listEntries(_ request: RouteRequest) throws(LarderError) -> RouteAnswer? {
        var filter = PurgeFilter()
        var limit = 100
        var cursor: String?
        let query = Self.query(of: request.http.rawTarget)
        try Self.readQuery(query, allowed: Self.listNames, kind: "listing filter") { name, value throws(LarderError) in
            if try Self.applyShared(name, value, to: &filter) { return }
            switch name {
            case "status":
                guard let status = Int(value), (100...599).contains(status) else {
                    throw .invalid(name, "must be an HTTP status, 100 to 599")
                }
                filter.status = status
            case "expired":
                switch value {
                case "true": filter.expiredAt = clock.now()
                case "false": filter.notExpiredAt = clock.now()
                default: throw .invalid(name, "must be true or false")
                }
            case "limit":
                guard let count = Int(value), (1...1000).contains(count) else { throw .invalid(name, "must be 1 to 1000") }
                limit = count
            default: // cursor
                guard Self.isKey(value) else { throw .invalid(name, "must be a nextCursor from an earlier page") }
                cursor = value
            }
        }
        let page = store.list(filter, after: cursor, limit: limit)
        guard !page.failed else { throw Self.unreadable }
        var out: [UInt8] = Array(#"{"entries":["#.utf8)
        for (index, record) in page.records.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            Self.append(record, to: &out, closing: true)
        }
        out.append(contentsOf: #"],"nextCursor":"#.utf8)
        if let next = page.nextCursor { JSONWriter.appendString(next, to: &out) } else { out.append(contentsOf: "null".utf8) }
        out.append(UInt8(ascii: "}"))
        return RouteAnswer(Self.json(200, out))
    }

    // MARK: - GET /cache/entries/{key}

    func showEntry(_ request: RouteRequest) throws(LarderError) -> RouteAnswer? {
        let key = try Self.key(request)
        var withBody = false
        for (name, value) in Self.query(of: request.http.rawTarget) {
            guard name == "body" else { throw .invalid(name, "is not an option here (body)") }
            guard value == "true" || value == "false" else { throw .invalid(name, "must be true or false") }
            withBody = value == "true"
        }
        let records = store.records(primaryKey: key)
        guard !records.isEmpty else {
            // Nothing read from a store that does not answer is no proof that nothing is there.
            if (store as? any StorageHealth)?.storageHealthy == false { throw Self.unreadable }
            throw LarderError(.notFound, "no entry is stored under this key")
        }
        let stored = withBody ? tier.lookup(key) : []
        var out: [UInt8] = Array(#"{"key":"#.utf8)
        JSONWriter.appendString(key.hex, to: &out)
        out.append(contentsOf: #","variants":["#.utf8)
        for (index, record) in records.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            Self.append(record, to: &out, closing: false)
            if withBody, let entry = stored.first(where: { $0.key == record.rowKey }), let body = engine.storedBody(of: entry) {
                out.append(contentsOf: #","response":{"#.utf8)
                Envelope.appendResponse(status: entry.status, headersJSON: entry.headersJSON, body: body, kind: entry.bodyKind, to: &out)
                out.append(UInt8(ascii: "}"))
            }
            out.append(UInt8(ascii: "}"))
        }
        out.append(contentsOf: "]}".utf8)
        return RouteAnswer(Self.json(200, out))
    }

    /// One record as a JSON object (left open when `closing` is false, for more members).
    static func append(_ record: EntryRecord, to out: inout [UInt8], closing: Bool) {
        func string(_ name: String, _ value: String?) {
            out.append(contentsOf: #","\#(name)":"#.utf8)
            if let value { JSONWriter.appendString(value, to: &out) } else { out.append(contentsOf: "null".utf8) }
        }
        func time(_ name: String, _ value: Double) {
            out.append(contentsOf: #","\#(name)":"#.utf8)
            JSONWriter.appendString(RFC3339Time.format(value), to: &out)
        }
        func strings(_ name: String, _ values: [String]) {
            out.append(contentsOf: #","\#(name)":["#.utf8)
            for (index, value) in values.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                JSONWriter.appendString(value, to: &out)
            }
            out.append(UInt8(ascii: "]"))
        }
        out.append(contentsOf: #"{"key":"#.utf8)
        JSONWriter.appendString(record.key.hex, to: &out)
        if record.rowKey != record.key { string("variantKey", record.rowKey.hex) }
        string("namespace", record.namespace)
        string("method", record.method)
        string("url", record.url)
        out.append(contentsOf: #","status":\#(record.status),"bytes":\#(record.bytes)"#.utf8)
        time("storedAt", record.storedAt)
        time("expiresAt", record.expiresAt)
        time("staleUntil", record.staleUntil)
        out.append(contentsOf: #","version":\#(record.version)"#.utf8)
        strings("tags", record.tags)
        out.append(contentsOf: #","hits":\#(record.hits)"#.utf8)
        time("lastAccessAt", record.lastAccessAt)
        string("etag", record.etag)
        string("lastModified", record.lastModified)
        strings("varies", record.varies)
        if closing { out.append(UInt8(ascii: "}")) }
    }

    /// A key as /fetch reports it (hex, and a variant suffix after a dot).
    static func isKey(_ text: String) -> Bool {
        !text.isEmpty && text.utf8.count <= 256 && text.utf8.allSatisfy { (0x21...0x7E).contains($0) && $0 != UInt8(ascii: "/") }
    }

    // MARK: - PUT /cache/entries

    func writeEntry(_ request: RouteRequest) throws(LarderError) -> RouteAnswer? {
        if request.http.bodyTooLarge { throw .invalid("body", "request body is larger than the limit") }
        let fields = try JSONFields(try JSONFields.parseBody(request.http.body), path: "")
        try fields.rejectUnknown(["request", "response", "cache"])
        guard case .object(var spec)? = fields.value("request") else { throw .invalid("request", "is required: a /fetch spec") }
        if let cache = try fields.typed("cache") {
            guard spec["cache"] == nil else { throw .invalid("cache", "give the cache options here or in request.cache, not both") }
            spec["cache"] = cache
        }
        let fetch = try FetchRequest.parse(.object(spec), path: "request", upstreams: upstreams)
        guard fetch.method == .get || fetch.method == .head || fetch.cache.ttl != nil else {
            throw .invalid("request.method", "only GET and HEAD responses are stored without a cache.ttl")
        }
        let response = try Self.response(fields)
        let now = clock.now()
        engine.write(
            UpstreamResponse(
                status: response.status, headers: response.headers, body: response.body,
                requestTime: now, responseTime: now),
            for: engine.prepare(fetch)
        ) { result in
            // (The engine's store is the memory tier: it keeps the new response, not the old.)
            switch result {
            case .success(let key):
                var out: [UInt8] = Array(#"{"key":"#.utf8)
                JSONWriter.appendString(key.hex, to: &out)
                out.append(UInt8(ascii: "}"))
                request.respond(Self.json(201, out))
            case .failure(let error):
                request.respond(Self.json(error.status, error.jsonBody))
            }
        }
        return nil
    }

    /// `{"status", "headers", "body" | "bodyText" | "bodyBase64"}`.
    static func response(_ fields: JSONFields) throws(LarderError) -> (status: Int, headers: [HeaderField], body: [UInt8]) {
        guard let value = fields.value("response") else { throw .invalid("response", "is required: {status, headers, body}") }
        let response = try JSONFields(value, path: "response")
        try response.rejectUnknown(["status", "headers", "body", "bodyText", "bodyBase64"])
        let status = Int(try response.integer("status") ?? 200)
        guard (200...599).contains(status), status != 206, status != 304 else {
            throw .invalid("response.status", "must be a final status, 200 to 599 (not 206 or 304)")
        }
        var headers: [HeaderField] = []
        for (name, text) in try response.stringMap("headers") ?? [] {
            guard HTTPToken.isValidName(name) else { throw .invalid("response.headers", "'\(name)' is not a valid header name") }
            guard HTTPToken.isValidValue(text) else { throw .invalid("response.headers.\(name)", "must not contain line breaks") }
            headers.append(HeaderField(name, text))
        }
        let given = ["body", "bodyText", "bodyBase64"].filter { response.has($0) }
        guard given.count <= 1 else { throw .invalid("response", "give one of body, bodyText and bodyBase64") }
        var body: [UInt8] = []
        switch given.first {
        case "body":
            body = response.value("body")?.canonicalBytes ?? Array("null".utf8)
            if headers.values("content-type").isEmpty { headers.append(HeaderField("content-type", "application/json")) }
        case "bodyText":
            body = Array((try response.string("bodyText") ?? "").utf8)
        case "bodyBase64":
            guard let data = Data(base64Encoded: try response.string("bodyBase64") ?? "") else {
                throw .invalid("response.bodyBase64", "is not valid base64")
            }
            body = Array(data)
        default:
            break
        }
        return (status, headers, body)
    }

    /// What a read of the store that failed answers: never an empty store that is not.
    static let unreadable = LarderError(
        .storageFailed,
        "the store could not be read (a shared Redis out of reach or too slow, or a database error); retry")

    // MARK: - Namespaces

    func listNamespaces() throws(LarderError) -> RouteAnswer? {
        let stored = store.statistics()
        guard !stored.failed else { throw Self.unreadable }
        let versions = engine.namespaces.all
        let dictionaries = engine.dictionaries?.figures() ?? [:]
        var names = Set(stored.namespaces.map(\.name))
        names.formUnion(versions.keys)
        var out: [UInt8] = Array(#"{"namespaces":["#.utf8)
        for (index, name) in names.sorted().enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            let figures = stored.namespaces.first { $0.name == name }
            out.append(contentsOf: #"{"name":"#.utf8)
            JSONWriter.appendString(name, to: &out)
            out.append(contentsOf: #","entries":\#(figures?.entries ?? 0),"bytes":\#(figures?.bytes ?? 0),"#.utf8)
            out.append(contentsOf: #""version":\#(versions[name] ?? 0)"#.utf8)
            if let maxBytes = figures?.maxBytes { out.append(contentsOf: #","maxBytes":\#(maxBytes)"#.utf8) }
            if let dictionary = dictionaries[name] { Self.appendDictionary(dictionary, to: &out) }
            out.append(UInt8(ascii: "}"))
        }
        out.append(contentsOf: "]}".utf8)
        return RouteAnswer(Self.json(200, out))
    }

    /// `,"dictionary":{…}`: the namespace's compression dictionary, and what is gathered for
    /// its next one.
    static func appendDictionary(_ dictionary: BodyDictionaries.Figures, to out: inout [UInt8]) {
        out.append(contentsOf: #","dictionary":{"#.utf8)
        if let id = dictionary.id, let trainedAt = dictionary.trainedAt {
            out.append(contentsOf: #""id":\#(id),"bytes":\#(dictionary.bytes),"trainedAt":"#.utf8)
            JSONWriter.appendString(RFC3339Time.format(trainedAt), to: &out)
            out.append(UInt8(ascii: ","))
        }
        out.append(contentsOf: #""versions":\#(dictionary.versions),"samples":\#(dictionary.samples),"#.utf8)
        out.append(contentsOf: #""training":\#(dictionary.training)}"#.utf8)
    }

    /// POST /cache/namespaces/{ns}/dictionary: a new compression dictionary for the namespace,
    /// trained from the bodies gathered so far, or once enough are.
    func trainDictionary(_ request: RouteRequest) throws(LarderError) -> RouteAnswer? {
        let namespace = request.parameter
        if let refusal = FetchRequest.namespaceRefusal(namespace) { throw .invalid("namespace", "a namespace \(refusal)") }
        if request.http.bodyTooLarge { throw .invalid("body", "request body is larger than the limit") }
        if !request.http.body.isEmpty {
            try JSONFields(try JSONFields.parseBody(request.http.body), path: "").rejectUnknown([])
        }
        guard let asked = engine.requestDictionary(for: namespace) else {
            throw LarderError(.dictionariesUnavailable, "this store keeps no compression dictionaries")
        }
        var out: [UInt8] = Array(#"{"namespace":"#.utf8)
        JSONWriter.appendString(namespace, to: &out)
        switch asked {
        case .training(let samples):
            out.append(contentsOf: #","state":"training","samples":\#(samples)}"#.utf8)
        case .alreadyTraining:
            out.append(contentsOf: #","state":"training"}"#.utf8)
        case .sampling(let samples, let needed):
            out.append(contentsOf: #","state":"sampling","samples":\#(samples),"needed":\#(needed)}"#.utf8)
        case .off:
            throw LarderError(.dictionariesUnavailable, "dictionaries are off (--compress-dictionary-samples 0)")
        case .tooManyNamespaces:
            throw LarderError(
                .dictionariesUnavailable, "\(DictionaryTraining.maxNamespaces) namespaces already sample or hold dictionaries")
        }
        return RouteAnswer(Self.json(202, out))
    }

    /// POST /cache/namespaces/{ns}/version
    func setVersion(_ request: RouteRequest) throws(LarderError) -> RouteAnswer? {
        // The route matches on the path libmicrohttpd already decoded: the parameter is the name.
        let namespace = request.parameter
        guard !namespace.isEmpty, namespace.utf8.count <= 256 else { throw .invalid("namespace", "must be 1 to 256 bytes") }
        if request.http.bodyTooLarge { throw .invalid("body", "request body is larger than the limit") }
        let fields = try JSONFields(try JSONFields.parseBody(request.http.body), path: "")
        try fields.rejectUnknown(["version", "bump"])
        let previous = engine.namespaces.current(namespace) ?? 0
        let version: Int64
        switch (try fields.integer("version"), try fields.bool("bump")) {
        case (let explicit?, nil):
            guard CacheOptions.versions.contains(explicit) else { throw .invalid("version", CacheOptions.versionRule) }
            version = explicit
        case (nil, true?):
            guard previous < CacheOptions.versions.upperBound else {
                throw LarderError(
                    .versionExhausted, "namespace '\(namespace)' is at the highest version; set a lower one explicitly",
                    field: "bump")
            }
            version = previous + 1
        default:
            throw .invalid("body", #"give {"version": N} or {"bump": true}"#)
        }
        store.setNamespaceVersion(namespace, to: version) { [engine, store, tier] recorded in
            guard recorded else {
                let error = LarderError(.storageFailed, "the version could not be recorded")
                return request.respond(Self.json(error.status, error.jsonBody))
            }
            // From here requests without their own version use the new one: the namespace's
            // entries under other versions are never served again, and go in the background.
            engine.namespaces.set(namespace, to: version)
            var retired = PurgeFilter()
            retired.namespace = namespace
            retired.versionOtherThan = version
            store.purge(retired) { result in
                for key in result.primaryKeys { tier.forget(key) }
            }
            var out: [UInt8] = Array(#"{"namespace":"#.utf8)
            JSONWriter.appendString(namespace, to: &out)
            out.append(contentsOf: #","version":\#(version),"previous":\#(previous)}"#.utf8)
            request.respond(Self.json(200, out))
        }
        return nil
    }
}
