// The JSON envelope /fetch answers with, written straight into bytes. The stored headers
// are kept pre-rendered and JSON bodies are embedded as they are (they were validated when
// stored), so a hit costs a few appends rather than a parse and an encode.

import Foundation

/// How a body is carried in the envelope.
public enum BodyKind: Int, Sendable {
    case json = 0 // "body": the upstream JSON, verbatim
    case text = 1 // "bodyText": UTF-8 text
    case binary = 2 // "bodyBase64"

    /// Largest body embedded as JSON; larger JSON travels as `bodyText`. Embedding needs a
    /// validating scan, done where the response arrives (the upstream's thread), so it is
    /// bounded; a caller that wants a huge document parses the text itself.
    public static let maxEmbeddedJSONBytes = 1 << 20

    /// JSON when the content type says JSON and the body is well-formed UTF-8 JSON of at most
    /// `maxEmbeddedJSONBytes`; text when it is valid UTF-8; base64 otherwise. The JSON check
    /// builds nothing: one linear scan (JSONSerialization takes seconds and gigabytes over a 14 MB
    /// body, and every other upstream response waits meanwhile).
    public static func classify(contentType: String?, body: [UInt8]) -> BodyKind {
        guard !body.isEmpty else { return .text }
        guard String(validating: body, as: UTF8.self) != nil else { return .binary }
        let type = (contentType ?? "").lowercasedASCII
        let mediaType = type.split(separator: ";").first.map { $0.trimmingSpaces } ?? ""
        if mediaType == "application/json" || mediaType.hasSuffix("+json") || mediaType == "text/json",
            body.count <= maxEmbeddedJSONBytes,
            body.first != 0xEF, // no byte-order mark
            JSONParser.isValid(body)
        {
            return .json
        }
        return .text
    }
}

public enum CacheOutcome: String, Sendable, CaseIterable {
    /// `revalidated`: a stale entry confirmed by the upstream with 304 Not Modified and served.
    case hit, miss, stale, bypass, revalidated

    /// The `X-Cache` header value.
    public var headerValue: String {
        switch self {
        case .hit: "HIT"
        case .miss: "MISS"
        case .stale: "STALE"
        case .bypass: "BYPASS"
        case .revalidated: "REVALIDATED"
        }
    }

    /// The raw value as a literal, for writers of bytes.
    public var literal: StaticString {
        switch self {
        case .hit: "hit"
        case .miss: "miss"
        case .stale: "stale"
        case .bypass: "bypass"
        case .revalidated: "revalidated"
        }
    }
}

/// Why a request went to the upstream (RFC 9211 §2.2, the Cache-Status `fwd` parameter).
public enum ForwardReason: String, Sendable, CaseIterable {
    /// Not cached by the caller's choice (policy `no-store`).
    case bypass
    /// The method is not cacheable (PUT, DELETE, a POST without ttl).
    case method
    /// Nothing is stored for the URL (the key).
    case uriMiss = "uri-miss"
    /// Responses are stored for the key, but none whose Vary matches the request.
    case varyMiss = "vary-miss"
    /// What is stored is under another version.
    case miss
    /// A fresh entry is stored, but the request did not allow its use (no-cache, max-age,
    /// min-fresh, policy `reload`).
    case request
    /// The stored entry is stale.
    case stale
    /// Only part of the response is stored (RFC 9111 §3.4).
    case partial

    /// Why a request the lookup could not answer goes upstream (RFC 9211 §2.2). `entryFresh`:
    /// whether the entry of its version is fresh, nil when there is none.
    public static func of(
        cacheable: Bool, policy: CachePolicy, partOnly: Bool, entryFresh: Bool?, foundOtherVersion: Bool, otherVariants: Bool
    ) -> ForwardReason {
        if !cacheable { return .method }
        switch policy {
        case .noStore: return .bypass
        case .reload: return .request
        case .useProtocol, .cacheElseLoad, .cacheOnly: break
        }
        if partOnly { return .partial }
        if let entryFresh { return entryFresh ? .request : .stale }
        if foundOtherVersion { return .miss }
        return otherVariants ? .varyMiss : .uriMiss
    }

    /// The raw value as a literal, for writers of bytes.
    public var literal: StaticString {
        switch self {
        case .bypass: "bypass"
        case .method: "method"
        case .uriMiss: "uri-miss"
        case .varyMiss: "vary-miss"
        case .miss: "miss"
        case .request: "request"
        case .stale: "stale"
        case .partial: "partial"
        }
    }
}

public struct CacheReport: Sendable, Equatable {
    public var outcome: CacheOutcome
    public var key: CacheKey
    public var age: Double
    public var ttl: Double?
    public var version: Int64
    public var stored: Bool
    /// Why the response was not stored, when a rule refused it.
    public var notStoredBecause: StoreRefusal?
    /// The request waited for another request's upstream fetch of the same key and shared it.
    public var coalesced: Bool
    /// When a stale entry answered because the upstream failed: what failed (an error code,
    /// or `upstream_status_NNN`).
    public var upstreamError: String?
    /// The stale answer to an upstream failure came from the deployment's `--stale-on-error`
    /// allowance rather than the response's stale-if-error.
    public var staleOnErrorPolicy = false
    /// Why the request went upstream; nil when it did not.
    public var forward: ForwardReason?
    /// The upstream's status, when the request went upstream and got an answer (a 304 for a
    /// revalidation).
    public var upstreamStatus: Int?

    public init(
        outcome: CacheOutcome, key: CacheKey, age: Double, ttl: Double?, version: Int64, stored: Bool,
        notStoredBecause: StoreRefusal? = nil, coalesced: Bool = false, upstreamError: String? = nil,
        forward: ForwardReason? = nil, upstreamStatus: Int? = nil
    ) {
        self.forward = forward
        self.upstreamStatus = upstreamStatus
        self.outcome = outcome
        self.key = key
        self.age = age
        self.ttl = ttl
        self.version = version
        self.stored = stored
        self.notStoredBecause = notStoredBecause
        self.coalesced = coalesced
        self.upstreamError = upstreamError
    }
}

public enum ResponseHeaders {
    /// Parses headers rendered by `renderJSON` back into fields, sorted by name; none unless
    /// the bytes are a JSON object of strings. (Every entry read from a store goes through
    /// here, so it uses the byte-level parser rather than Foundation's.)
    public static func parseJSON(_ bytes: [UInt8]) -> [HeaderField] {
        guard let members = JSONParser.stringMembers(bytes) else { return [] }
        var fields = members.map { HeaderField($0.name, $0.value) }
        fields.sort { $0.name < $1.name }
        // A repeated name is refused, as JSONParser.parse refuses it.
        for index in fields.indices.dropFirst() where fields[index].name == fields[index - 1].name { return [] }
        return fields
    }

    /// RFC 9111 §3.2: a 304 (or a HEAD) updates the stored header fields: each field it carries
    /// replaces the stored one of the same name, except Content-Length and connection-level
    /// fields; fields it does not carry are kept.
    public static func updated(_ stored: [HeaderField], with newer: [HeaderField]) -> [HeaderField] {
        let nominated = HopByHop.nominated(in: newer)
        let replacing = newer.filter { field in
            let name = field.name.lowercasedASCII
            return name != "content-length" && !HopByHop.contains(name, nominatedBy: nominated)
        }
        let replacedNames = Set(replacing.map { $0.name.lowercasedASCII })
        return stored.filter { !replacedNames.contains($0.name.lowercasedASCII) } + replacing
    }

    /// Renders response headers as a JSON object: names lower-cased, repeated fields combined
    /// with ", " (RFC 9110 §5.3), hop-by-hop fields left out. `dropCookies` leaves Set-Cookie
    /// out, as for stored entries: cookies are secrets and never land in the database.
    public static func renderJSON(_ headers: [HeaderField], dropCookies: Bool) -> [UInt8] {
        render(combined(headers, dropCookies: dropCookies))
    }

    /// `renderJSON` and, in the same pass, the fields `parseJSON` would read back from it (an
    /// entry keeps both: the JSON for the store, the fields for the proxy).
    public static func rendered(_ headers: [HeaderField], dropCookies: Bool) -> (json: [UInt8], fields: [HeaderField]) {
        let fields = combined(headers, dropCookies: dropCookies)
        return (render(fields), fields.sorted { $0.name < $1.name })
    }

    /// The fields as renderJSON keeps them, in order of first appearance.
    private static func combined(_ headers: [HeaderField], dropCookies: Bool) -> [HeaderField] {
        let nominated = HopByHop.nominated(in: headers)
        var fields: [HeaderField] = []
        fields.reserveCapacity(headers.count)
        // A response has a few fields and seldom repeats one: a scan of those kept so far costs
        // less than hashing every name. Past 32 fields, an index keeps it linear.
        let indexed = headers.count > 32
        var positions: [String: Int] = [:]
        for field in headers {
            let name = field.name.lowercasedASCII
            if HopByHop.contains(name, nominatedBy: nominated) { continue }
            if dropCookies, name == "set-cookie" || name == "set-cookie2" { continue }
            let seen = indexed ? positions[name] : fields.firstIndex { $0.name == name }
            if let seen {
                fields[seen].value += ", " + field.value
            } else {
                if indexed { positions[name] = fields.count }
                fields.append(HeaderField(name, field.value))
            }
        }
        return fields
    }

    private static func render(_ fields: [HeaderField]) -> [UInt8] {
        var out: [UInt8] = []
        // Room for the usual case, no escapes: quotes, colon and comma are six bytes a field.
        out.reserveCapacity(fields.reduce(2) { $0 + $1.name.utf8.count + $1.value.utf8.count + 6 })
        out.append(UInt8(ascii: "{"))
        for (index, field) in fields.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            JSONWriter.appendString(field.name, to: &out)
            out.append(UInt8(ascii: ":"))
            JSONWriter.appendString(field.value, to: &out)
        }
        out.append(UInt8(ascii: "}"))
        return out
    }
}

/// Seconds as whole numbers for headers and JSON (Age, ttl). An entry's times come from a store,
/// and a store's values are not always Larder's own (a planted Redis value, an edited database):
/// infinite, NaN or huge values must still render, never trap in the conversion to Int.
public enum WholeSeconds {
    /// Past this (some 31 million years) a value is shown as this.
    public static let limit: Double = 1e15

    /// `seconds` rounded by `rule`, clamped to ±`limit`; NaN is 0.
    public static func of(_ seconds: Double, rounding rule: FloatingPointRoundingRule) -> Int {
        guard !seconds.isNaN else { return 0 }
        return Int(min(limit, max(-limit, seconds.rounded(rule))))
    }
}

public enum Envelope {
    /// `{"status":…,"headers":{…},"body"|"bodyText"|"bodyBase64":…,"cache":{…},"timing":{…}}`
    /// plus, when an upstream failure was tolerated, nothing else: errors use LarderError.jsonBody.
    public static func render(
        status: Int, headersJSON: [UInt8], body: [UInt8], kind: BodyKind,
        cache: CacheReport, totalMs: Double, upstreamMs: Double?
    ) -> [UInt8] {
        var out: [UInt8] = []
        // The fixed members, the key and the timing take under 256 bytes; a text body grows by
        // its escapes, a binary one by a third.
        out.reserveCapacity(body.count * (kind == .json ? 1 : 2) + headersJSON.count + (cache.upstreamError?.utf8.count ?? 0) + 256)
        out.append(UInt8(ascii: "{"))
        appendMembers(
            status: status, headersJSON: headersJSON, body: body, kind: kind, cache: cache, totalMs: totalMs,
            upstreamMs: upstreamMs, to: &out)
        out.append(UInt8(ascii: "}"))
        return out
    }

    /// The envelope's members without its braces, appended to `out`: /batch and /chain write
    /// their items' own members around them in one buffer (a large body is copied once).
    public static func appendMembers(
        status: Int, headersJSON: [UInt8], body: [UInt8], kind: BodyKind,
        cache: CacheReport, totalMs: Double, upstreamMs: Double?, to out: inout [UInt8]
    ) {
        appendResponse(status: status, headersJSON: headersJSON, body: body, kind: kind, to: &out)
        out.appendLiteral(#","cache":{"outcome":""#)
        out.appendLiteral(cache.outcome.literal)
        out.appendLiteral(#"","key":""#)
        out.appendUTF8(cache.key.hex)
        out.appendLiteral(#"","age":"#)
        DecimalDigits.append(WholeSeconds.of(cache.age, rounding: .down), to: &out)
        out.appendLiteral(#","ttl":"#)
        if let ttl = cache.ttl {
            // Rounded up, as age is rounded down: the two add up to the lifetime.
            DecimalDigits.append(WholeSeconds.of(ttl, rounding: .up), to: &out)
        } else {
            out.appendLiteral("null")
        }
        out.appendLiteral(#","version":"#)
        DecimalDigits.append(Int(cache.version), to: &out)
        out.appendLiteral(cache.stored ? #","stored":true"# : #","stored":false"#)
        if let reason = cache.notStoredBecause {
            out.appendLiteral(#","notStoredBecause":""#)
            out.appendUTF8(reason.rawValue)
            out.append(UInt8(ascii: "\""))
        }
        if cache.coalesced {
            out.appendLiteral(#","coalesced":true"#)
        }
        if let upstreamError = cache.upstreamError {
            out.appendLiteral(#","upstreamError":"#)
            JSONWriter.appendString(upstreamError, to: &out)
        }
        if let forward = cache.forward {
            out.appendLiteral(#","forward":""#)
            out.appendLiteral(forward.literal)
            out.append(UInt8(ascii: "\""))
        }
        if let upstreamStatus = cache.upstreamStatus {
            out.appendLiteral(#","upstreamStatus":"#)
            DecimalDigits.append(upstreamStatus, to: &out)
        }
        out.appendLiteral(#"},"timing":{"totalMs":"#)
        JSONWriter.appendMilliseconds(totalMs, to: &out)
        out.appendLiteral(#","upstreamMs":"#)
        if let upstreamMs {
            JSONWriter.appendMilliseconds(upstreamMs, to: &out)
        } else {
            out.appendLiteral("null")
        }
        out.append(UInt8(ascii: "}"))
    }

    /// `"status":…,"headers":{…},"body"|"bodyText"|"bodyBase64":…` (no braces): the response as
    /// /fetch and the admin API show it.
    public static func appendResponse(status: Int, headersJSON: [UInt8], body: [UInt8], kind: BodyKind, to out: inout [UInt8]) {
        out.appendLiteral(#""status":"#)
        DecimalDigits.append(status, to: &out)
        out.appendLiteral(#","headers":"#)
        out.append(contentsOf: headersJSON)
        switch kind {
        case .json:
            out.appendLiteral(#","body":"#)
            out.append(contentsOf: body)
        case .text:
            out.appendLiteral(#","bodyText":""#)
            body.withUnsafeBufferPointer { JSONWriter.appendEscaped($0, to: &out) }
            out.append(UInt8(ascii: "\""))
        case .binary:
            out.appendLiteral(#","bodyBase64":""#)
            out.append(contentsOf: Data(body).base64EncodedString().utf8)
            out.append(UInt8(ascii: "\""))
        }
    }
}
