// Fuzz targets for every parser of untrusted input (issue 9). Each takes the fuzzer's bytes,
// feeds them to one parser and checks what must hold whatever the input: no crash, no hang,
// results within their bounds, normal forms that are stable when parsed again, values that
// round-trip (decode(encode(x)) == x) and sealed values that refuse any change. A broken
// property stops the process (`require`), which libFuzzer reports as a crash with its input.
// Each returns whether the input got past its parser to the properties that hold only for
// what is accepted, so the corpus replay can show its seeds reach them (issue 35).
//
// `scripts/fuzz` links these into a libFuzzer binary; `LarderFuzzTests` replays the committed
// seed corpora and every past crash (Tests/Fuzz/) through the same functions in `swift test`.
//
// Inputs that carry header fields are text, one `name: value` line per field.

import Foundation
import LarderCore
import LarderEngine
import LarderRE2
import LarderRedis
import LarderService

public enum FuzzTargets {
    public static let all: [String: @Sendable ([UInt8]) -> Bool] = [
        "cache-control": cacheControl,
        "http-date": httpDate,
        "vary": vary,
        "range": range,
        "age": age,
        "json": json,
        "fetch-request": fetchRequest,
        "url": url,
        "config": config,
        "batch-request": batchRequest,
        "chain-request": chainRequest,
        "chain-reference": chainReference,
        "chain-pattern": chainPattern,
        "warm-request": warmRequest,
        "request-framing": requestFraming,
        "query-redaction": queryRedaction,
        "entry-codec": entryCodec
    ]

    public static var names: [String] { all.keys.sorted() }

    /// A property every input must keep; its failure is a finding.
    static func require(_ condition: Bool, _ message: @autoclosure () -> String) {
        if !condition { fatalError("fuzz property broken: \(message())") }
    }

    static func text(_ bytes: [UInt8]) -> String { String(decoding: bytes, as: UTF8.self) }

    static func fields(_ bytes: [UInt8]) -> [HeaderField] {
        text(bytes).split(whereSeparator: \.isNewline).map { line in
            guard let colon = line.firstIndex(of: ":") else { return HeaderField(String(line), "") }
            return HeaderField(String(line[..<colon]), String(line[line.index(after: colon)...]).trimmingSpaces)
        }
    }

    static let upstreams: [String: NamedUpstream] = [
        "api": NamedUpstream(name: "api", baseURL: "http://127.0.0.1:9/v1/", headers: [HeaderField("x-key", "k")])
    ]

    // MARK: header fields

    /// Cache-Control (RFC 9111 §5.2) and CDN-Cache-Control (RFC 9213, a Structured Field), and
    /// the freshness decided from them: never negative, never NaN.
    static func cacheControl(_ bytes: [UInt8]) -> Bool {
        let headers = fields(bytes)
        let directives = CacheControl(headers.values("cache-control"))
        for name in ["max-age", "s-maxage", "stale-while-revalidate", "stale-if-error", "max-stale", "min-fresh"] {
            _ = directives.seconds(name)
        }
        _ = CacheControl(structuredField: text(bytes))
        let effective = CacheRules.effectiveCacheControl(headers)
        for status in [200, 404, 500] {
            let lifetime = CacheRules.freshnessLifetime(
                status: status, cacheControl: effective, headers: headers,
                receivedAt: 1_700_000_000)
            require(lifetime.seconds >= 0 && !lifetime.seconds.isNaN, "freshness lifetime \(lifetime.seconds)")
        }
        _ = CacheRules.storableHeaders(headers)
        return true
    }

    /// HTTP dates (RFC 9110 §5.6.7): a parsed date formats as IMF-fixdate and parses back to
    /// the same second.
    static func httpDate(_ bytes: [UInt8]) -> Bool {
        guard let seconds = HTTPDate.parse(text(bytes)) else { return false }
        require(seconds.isFinite, "date \(seconds)")
        guard (0...253_402_300_799).contains(seconds) else { return true } // 1970 to 9999: four-digit years
        let formatted = HTTPDate.format(seconds)
        require(HTTPDate.parse(formatted) == seconds.rounded(.down), "\(formatted) does not parse back to \(seconds)")
        require(HTTPDate.format(seconds.rounded(.down)) == formatted, "\(formatted) is not the only form of its second")
        return true
    }

    /// Vary (RFC 9111 §4.1): the nominated names are lower-case, sorted and unique, and come
    /// back the same from the list the stores keep (the names joined by ","); the selecting
    /// values are the same for the same request, and a request carrying a value's normal form
    /// selects the same variant.
    static func vary(_ bytes: [UInt8]) -> Bool {
        let headers = fields(bytes)
        guard let names = Vary.names(in: headers) else { return false }
        require(names == Array(Set(names)).sorted(), "names not sorted and unique: \(names)")
        require(names.allSatisfy { $0 == $0.lowercasedASCII && !$0.isEmpty && $0 != "*" }, "names not normal: \(names)")
        let stored = names.joined(separator: ",")
        require(Vary.names(in: [HeaderField("vary", stored)]) == names, "names do not come back from '\(stored)'")
        require(Vary.selectingValues(names, of: headers) == Vary.selectingValues(names, of: headers), "selecting values unstable")
        for name in names {
            // The value as it selects ("name:value\n", or "name\0\n" when absent), sent again.
            let selecting = Vary.selectingValues([name], of: headers)
            guard selecting.count > name.utf8.count + 1, selecting[name.utf8.count] == UInt8(ascii: ":") else { continue }
            let normal = String(decoding: selecting[(name.utf8.count + 1)..<(selecting.count - 1)], as: UTF8.self)
            require(
                Vary.selectingValues([name], of: [HeaderField(name, normal)]) == selecting,
                "the normal form '\(normal)' of \(name) selects another variant")
        }
        return !names.isEmpty
    }

    /// Range and If-Range (RFC 9110 §14): the first two bytes are the body's length, the rest
    /// the fields; a partial answer always lies inside the body.
    static func range(_ bytes: [UInt8]) -> Bool {
        guard bytes.count >= 2 else { return false }
        let length = Int(bytes[0]) << 8 | Int(bytes[1])
        let headers = fields(Array(bytes.dropFirst(2)))
        let answer = ByteRange.answer(
            range: headers.combined("range"), ifRange: headers.combined("if-range"), length: length,
            etag: headers.combined("etag"), lastModified: headers.combined("last-modified"))
        var partial = false
        if case .partial(let bounds) = answer {
            require(bounds.lowerBound >= 0 && bounds.upperBound < length, "range \(bounds) outside \(length) bytes")
            partial = true
        }
        if let contentRange = headers.combined("content-range"), let part = StoredPart(contentRange: contentRange, bodyCount: length),
            let requested = StoredPart.requested(headers.combined("range"), total: part.total)
        {
            require(requested.lowerBound >= 0 && requested.upperBound < part.total, "requested \(requested) outside \(part.total)")
        }
        return partial
    }

    /// Age (RFC 9111 §5.1) with Date: the initial age is never negative.
    static func age(_ bytes: [UInt8]) -> Bool {
        let age = CacheRules.initialAge(headers: fields(bytes), requestTime: 1_700_000_000, responseTime: 1_700_000_001)
        require(age >= 0 && !age.isNaN, "initial age \(age)")
        return true
    }

    /// The request framing checks (smuggling: Content-Length with Transfer-Encoding, duplicate
    /// lengths, obs-fold, bare CR/LF). What is accepted has token names, values without controls,
    /// one length at most, and no length beside a transfer coding, whose only coding is chunked
    /// (RFC 9110 §5.1, §5.5; RFC 9112 §6.1, §6.3); what `printable` makes of any text has no
    /// control characters, line separators or bidirectional controls left (for logs).
    static func requestFraming(_ bytes: [UInt8]) -> Bool {
        let lines = text(bytes).split(separator: "\n", omittingEmptySubsequences: false)
        let pairs = lines.map { line -> (name: String, value: String) in
            guard let colon = line.firstIndex(of: ":") else { return (String(line), "") }
            return (String(line[..<colon]), String(line[line.index(after: colon)...]))
        }
        let printable = RequestFraming.printable(text(bytes))
        require(!printable.unicodeScalars.contains(where: RequestFraming.isUnsafeInLogs), "a control character left in \(printable)")
        guard RequestFraming.check(pairs) == nil else { return false }
        let tchar = Set("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ".utf8)
        var lengths: Set<String> = []
        var codings: [String] = []
        for pair in pairs {
            require(!pair.name.isEmpty && pair.name.utf8.allSatisfy(tchar.contains), "accepted the name '\(pair.name)'")
            require(!pair.value.utf8.contains { ($0 < 0x20 && $0 != 0x09) || $0 == 0x7F }, "accepted a control in \(pair.name)")
            switch pair.name.lowercasedASCII {
            case "content-length":
                for member in pair.value.split(separator: ",", omittingEmptySubsequences: false) { lengths.insert(member.trimmingSpaces) }
            case "transfer-encoding":
                codings += pair.value.split(separator: ",").map { $0.trimmingSpaces.lowercasedASCII }.filter { !$0.isEmpty }
            default: break
            }
        }
        require(
            lengths.count <= 1 && lengths.allSatisfy { !$0.isEmpty && $0.utf8.allSatisfy { (0x30...0x39).contains($0) } },
            "accepted the lengths \(lengths)")
        require(codings.isEmpty || (codings == ["chunked"] && lengths.isEmpty), "accepted \(codings) with lengths \(lengths)")
        return true
    }

    // MARK: JSON bodies

    /// The JSON parser: what `parse` builds, `isValid` (the scan for upstream bodies) accepts —
    /// the scan alone lets duplicate names pass — and what parses renders (canonically) to
    /// JSON that parses and renders to the same bytes.
    static func json(_ bytes: [UInt8]) -> Bool {
        let parsed = try? JSONParser.parse(bytes, maxDepth: 512)
        require(parsed == nil || JSONParser.isValid(bytes, maxDepth: 512), "parse accepts what isValid refuses")
        if let parsed {
            let rendered = parsed.canonicalBytes
            require((try? JSONParser.parse(rendered, maxDepth: 512))?.canonicalBytes == rendered, "rendered JSON does not parse back")
        }
        return parsed != nil
    }

    static func fetchRequest(_ bytes: [UInt8]) -> Bool {
        guard let request = try? FetchRequest.parse(json: bytes, upstreams: upstreams) else { return false }
        // Percent-encoding can lengthen a URL past the 8192-byte limit a caller's URL must keep.
        let sent = request.url.absoluteString
        guard sent.utf8.count <= 8192 else { return true }
        require((try? UpstreamURL(parsing: sent)) != nil, "accepted URL does not parse again")
        return true
    }

    static func batchRequest(_ bytes: [UInt8]) -> Bool {
        guard let batch = try? BatchRequest.parse(json: bytes, upstreams: upstreams, maxRequests: 100) else { return false }
        require(batch.items.count <= 100, "batch of \(batch.items.count) accepted")
        return true
    }

    /// An accepted chain can run: 1 to 50 steps with unique ids, every dependency a step of the
    /// chain, and an order in which each step comes after those it waits for (no cycle).
    static func chainRequest(_ bytes: [UInt8]) -> Bool {
        guard let plan = try? ChainPlan.parse(json: bytes, maxSteps: 50, patterns: RE2Compiler()) else { return false }
        let ids = plan.steps.map(\.id)
        require((1...50).contains(ids.count) && Set(ids).count == ids.count, "steps \(ids) accepted")
        require(plan.steps.allSatisfy { $0.dependencies.isSubset(of: ids) }, "a dependency outside the chain accepted")
        var done: Set<String> = []
        while done.count < ids.count {
            let ready = plan.steps.filter { !done.contains($0.id) && $0.dependencies.isSubset(of: done) }
            require(!ready.isEmpty, "steps in a cycle accepted: \(ids.filter { !done.contains($0) })")
            done.formUnion(ready.map(\.id))
        }
        return true
    }

    /// A chain's reference (`{{step.body.items[0].id}}`) and templates rendered against a
    /// fixed result document.
    static func chainReference(_ bytes: [UInt8]) -> Bool {
        let raw = text(bytes)
        let documents: [String: JSONValue] = [
            "input": .object(["id": .number(7), "list": .array([.string("a"), .string("b")])]),
            "user": .object(["status": .number(200), "body": .object(["items": .array([.object(["id": .string("x/y")])])])])
        ]
        let reference = ChainReference(parsing: raw)
        if let reference {
            _ = reference.resolve(in: documents)
        }
        let template = JSONValue.object(["url": .string(raw), "query": .object(["q": .string(raw)]), "body": .string(raw)])
        _ = try? Template.render(template, documents: documents, encodeIn: ["url"], textIn: ["query"])
        _ = try? Template.render(template, documents: documents, lenient: true)
        return reference != nil
    }

    /// A `matches` pattern (the first line) searched in a text (the rest), through RE2: any
    /// bytes compile or are refused without a crash, and the text, every character quoted, is
    /// found in itself, anchored at both ends or not.
    static func chainPattern(_ bytes: [UInt8]) -> Bool {
        let split = bytes.firstIndex(of: UInt8(ascii: "\n")) ?? bytes.endIndex
        let source = text(Array(bytes[..<split]))
        let subject = text(Array(bytes[min(split + 1, bytes.endIndex)...]))
        let compiler = RE2Compiler()
        var quoted = ""
        for character in subject.unicodeScalars {
            if character.isASCII, !(character.properties.isAlphabetic || ("0"..."9").contains(character)) {
                quoted += character == "\0" ? "\\x00" : "\\" + String(character)
            } else {
                quoted.unicodeScalars.append(character)
            }
        }
        if let literal = try? compiler.compile(quoted), let whole = try? compiler.compile("^" + quoted + "$") {
            require(literal.isFound(in: subject) && whole.isFound(in: subject), "the quoted text /\(quoted)/ is not found in itself")
        }
        guard let pattern = try? compiler.compile(source) else { return false }
        _ = pattern.isFound(in: subject)
        return true
    }

    /// An accepted warm job is within its bounds, and every spec, as it is sealed and stored
    /// (its canonical JSON), parses again as a /fetch with a policy: a job survives a restart.
    static func warmRequest(_ bytes: [UInt8]) -> Bool {
        guard let job = try? WarmJobRequest.parse(json: bytes, upstreams: upstreams) else { return false }
        require((1...WarmJobRequest.maxRequests).contains(job.specs.count), "\(job.specs.count) specs accepted")
        require((1...BatchRequest.maxConcurrency).contains(job.concurrency), "concurrency \(job.concurrency) accepted")
        for spec in job.specs {
            let stored = spec.canonicalBytes
            var policy: JSONValue?
            if case .object(let members)? = try? JSONParser.parse(stored), case .object(let cache)? = members["cache"] {
                policy = cache["policy"]
            }
            require(policy != nil, "a stored spec without a policy: \(text(stored))")
            require((try? FetchRequest.parse(json: stored, upstreams: upstreams)) != nil, "a stored spec does not parse again")
        }
        return true
    }

    // MARK: URLs

    /// URL normalisation (RFC 3986 §6.2.2): the key of a URL's normal form is its own key; a
    /// reference resolved against it (a redirect's Location) is an http(s) URL again. The
    /// input is the URL, then optionally a newline and a reference.
    static func url(_ bytes: [UInt8]) -> Bool {
        let parts = text(bytes).split(separator: "\n", maxSplits: 1, omittingEmptySubsequences: false)
        guard let url = try? UpstreamURL(parsing: String(parts[0])) else { return false }
        let key = url.keyString()
        guard let again = try? UpstreamURL(parsing: url.absoluteString) else {
            require(false, "\(url.absoluteString) (from \(parts[0])) does not parse again")
            return true
        }
        require(again.keyString() == key, "key not stable: \(key) vs \(again.keyString())")
        _ = QueryRedaction().apply(url.absoluteString)
        if parts.count == 2, let resolved = url.resolving(String(parts[1])) {
            require(resolved.scheme == "http" || resolved.scheme == "https", "resolved to \(resolved.scheme)")
        }
        return true
    }

    /// `--redact-query`: redacting twice changes nothing more.
    static func queryRedaction(_ bytes: [UInt8]) -> Bool {
        let redaction = QueryRedaction()
        let once = redaction.apply(text(bytes))
        require(redaction.apply(once) == once, "redaction not idempotent: \(once)")
        return once != text(bytes)
    }

    // MARK: stored values

    static let entryCodecUnderTest = EntryCodec(secret: Array(repeating: 7, count: 32))
    static let entryCodecOfAnotherInstance = EntryCodec(secret: Array(repeating: 8, count: 32))

    /// A shared store's entry (EntryCodec) as a value planted in Redis is read. Without the
    /// secret a writer is stopped at the HMAC, so the input is taken as a payload that did
    /// authenticate, to reach every field check behind it; as a whole value it must not
    /// authenticate. Whatever is accepted encodes to the same bytes, decodes again to the same
    /// entry, is refused once sealed with another secret, with any one bit changed or one byte
    /// cut, and renders (the /fetch envelope, the proxy's Age and ttl) as valid JSON without
    /// trapping.
    static func entryCodec(_ bytes: [UInt8]) -> Bool {
        let codec = entryCodecUnderTest
        require((try? codec.decode(bytes)) == nil, "unauthenticated bytes decoded")
        guard let entry = EntryCodec.parse(payload: bytes) else { return false }
        let encoded = codec.encode(entry)
        require(Array(encoded.dropLast(32)) == bytes, "an accepted payload encodes to other bytes")
        require((try? codec.decode(encoded)) == entry, "an encoded entry does not decode to itself")
        require((try? codec.decode(entryCodecOfAnotherInstance.encode(entry))) == nil, "a value sealed with another secret decoded")
        // One changed bit, at a place the input chooses, in the payload and in the tag.
        let spread = bytes.reduce(0) { ($0 &* 31 &+ Int($1)) & 0xFFFF }
        for position in [spread % bytes.count, bytes.count + spread % 32] {
            var tampered = encoded
            tampered[position] ^= UInt8(1 << (spread % 8))
            require((try? codec.decode(tampered)) == nil, "a value with bit \(spread % 8) of byte \(position) changed decoded")
        }
        require((try? codec.decode(Array(encoded.dropLast()))) == nil, "a value cut by one byte decoded")
        let freshness = entry.freshness
        for now in [freshness.storedAt, freshness.storedAt + 1e9, 0] {
            for ttl in [nil, 60.0] {
                let report = CacheReport(
                    outcome: .hit, key: entry.key, age: freshness.age(now: now, ttl: ttl),
                    ttl: freshness.remaining(now: now, ttl: ttl), version: freshness.version, stored: true)
                let rendered = Envelope.render(
                    status: entry.status, headersJSON: entry.headersJSON, body: entry.body,
                    kind: entry.bodyKind, cache: report, totalMs: 1, upstreamMs: nil)
                require(JSONParser.isValid(rendered, maxDepth: 1024), "the envelope of an accepted entry is not JSON")
                _ = WholeSeconds.of(report.age, rounding: .down)
            }
        }
        return true
    }

    // MARK: configuration

    /// The config file (YAML or JSON): any text either applies or is refused with a message.
    static func config(_ bytes: [UInt8]) -> Bool {
        var configuration = LarderConfiguration()
        do {
            try ConfigFile.apply(text: text(bytes), source: "fuzz.yaml", to: &configuration)
            try configuration.validate()
            return true
        } catch {
            require(!error.description.isEmpty, "an error without a message")
            return false
        }
    }
}
