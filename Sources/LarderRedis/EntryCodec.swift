// A stored entry as one Redis value: "LRD2", every field length-prefixed, then an HMAC-SHA-256
// of all that came before, under a key derived from the instance secret. The caller's ttl an
// entry was stored under, when it has one, is one more field after the tags: values without it
// are byte for byte what earlier versions wrote, and those versions' values still read. A soft
// purge's time comes after it (then the ttl field is written, -1 for none): only soft-purged
// values carry it, and a Larder that predates soft purges refuses them as malformed (a miss,
// and the value is removed). A body compressed at rest (BodyCoding) is marked in the body kind's
// field (the kind plus 16 times the coding): values of uncompressed bodies are unchanged, and a
// Larder that predates compression refuses the others as malformed.
//
// Anyone who can write to Redis can write any bytes there, and a plain checksum they simply
// compute again. Without the secret they cannot make a value that authenticates, and a value
// that does not is refused: a miss, never served. The fields are read as untrusted all the
// same (a reader must never trap, whoever wrote the value): every length is bounded by the
// bytes that remain, every number is finite and in its range, every field is checked.

import Crypto
import Foundation
public import LarderCore
public import LarderEngine

public struct EntryCodec: Sendable {
    static let magic: [UInt8] = Array("LRD2".utf8)
    /// The body kind's field holds kind + codingFactor × coding.
    static let codingFactor = 16
    static let tagBytes = 32
    /// Seconds any duration or time in an entry may reach (some 31,000 years): far past any
    /// real lifetime, and small enough that every sum and conversion of them stays exact.
    static let maxSeconds: Double = 1e12
    /// Bytes a text field (URL, validators, fingerprints) may have.
    static let maxTextBytes = 64 << 10

    /// Why a value was refused.
    public enum Rejection: String, Error, Sendable {
        case notAuthentic = "fails authentication (written without this instance's secret, or damaged)"
        case malformed = "is malformed"
        /// Authentic, but found under another key than the one it was written under.
        case misplaced = "is stored under another key than its own"
    }

    /// An HMAC already keyed (its pads hashed), copied for each value. @unchecked Sendable: it
    /// is never mutated; each use mutates its own copy (swift-crypto's state is copy-on-write).
    struct KeyedHMAC: @unchecked Sendable {
        let hmac: HMAC<SHA256>
    }

    private let keyed: KeyedHMAC

    /// Entries authenticated under a key derived (HKDF) from the instance secret, so that key
    /// serves this one purpose.
    public init(secret: [UInt8]) {
        let key = HKDF<SHA256>.deriveKey(
            inputKeyMaterial: SymmetricKey(data: secret), info: Array("larder-redis-entries/1".utf8),
            outputByteCount: 32)
        keyed = KeyedHMAC(hmac: HMAC<SHA256>(key: key))
    }

    public func encode(_ entry: StoredEntry) -> [UInt8] { sealed(Self.payload(entry)) }

    /// `payload` with its tag appended (a value as `encode` makes one; tests build their own
    /// payloads with it).
    public func sealed(_ payload: [UInt8]) -> [UInt8] {
        var out = payload
        out.append(contentsOf: tag(payload[...]))
        return out
    }

    private func tag(_ bytes: ArraySlice<UInt8>) -> HashedAuthenticationCode<SHA256> {
        var hmac = keyed.hmac
        hmac.update(data: bytes)
        return hmac.finalize()
    }

    /// The entry, once the value authenticates and every field is valid.
    public func decode(_ value: [UInt8]) throws(Rejection) -> StoredEntry {
        guard value.count > Self.magic.count + Self.tagBytes else { throw .malformed }
        let end = value.count - Self.tagBytes
        // `==` on an authentication code compares in constant time.
        guard tag(value[..<end]) == value[end...] else { throw .notAuthentic }
        guard let entry = Self.parse(value, end: end) else { throw .malformed }
        return entry
    }

    /// What an authentic value holds, from `payload`'s bytes (magic included, tag excluded); nil
    /// when anything is out of place. Not authenticated: for `decode`, and for the fuzzer.
    public static func parse(payload: [UInt8]) -> StoredEntry? { parse(payload, end: payload.count) }

    // MARK: - Writing

    static func payload(_ entry: StoredEntry) -> [UInt8] {
        var out = magic
        out.reserveCapacity(entry.body.count + entry.headersJSON.count + entry.url.utf8.count * 2 + 256 + tagBytes)
        func bytes(_ value: [UInt8]) {
            integer(Int64(value.count))
            out.append(contentsOf: value)
        }
        func string(_ value: String?) {
            guard let value else { return integer(-1) }
            bytes(Array(value.utf8))
        }
        func integer(_ value: Int64) { withUnsafeBytes(of: value.littleEndian) { out.append(contentsOf: $0) } }
        func double(_ value: Double) { integer(Int64(bitPattern: value.bitPattern)) }
        string(entry.key.hex)
        string(entry.primaryKey.hex)
        string(entry.varyNames.joined(separator: ","))
        string(entry.variantFingerprint)
        string(entry.namespace)
        string(entry.method.rawValue)
        string(entry.url)
        string(entry.urlKey)
        integer(Int64(entry.status))
        bytes(entry.headersJSON)
        bytes(entry.body)
        integer(Int64(entry.bodyKind.rawValue + Self.codingFactor * entry.bodyCoding.rawValue))
        double(entry.freshness.storedAt)
        double(entry.freshness.freshnessLifetime)
        integer(entry.freshness.version)
        double(entry.freshness.staleWhileRevalidate)
        double(entry.freshness.staleIfError)
        integer(entry.freshness.mustRevalidate ? 1 : 0)
        double(entry.freshness.initialAge)
        string(entry.sensitiveFingerprint)
        string(entry.etag)
        string(entry.lastModified)
        integer(Int64(entry.tags.count))
        for tag in entry.tags { string(tag) }
        if let invalidatedAt = entry.freshness.invalidatedAt {
            double(entry.freshness.storedTTL ?? -1)
            double(invalidatedAt)
        } else if let ttl = entry.freshness.storedTTL {
            double(ttl)
        }
        return out
    }

    // MARK: - Reading

    private static func parse(_ value: [UInt8], end: Int) -> StoredEntry? {
        guard end >= magic.count, end <= value.count, value[0..<magic.count].elementsEqual(magic) else { return nil }
        var reader = Reader(data: value, offset: magic.count, end: end)
        do throws(Reader.Failure) {
            return try read(&reader)
        } catch {
            return nil
        }
    }

    private static func read(_ reader: inout Reader) throws(Reader.Failure) -> StoredEntry {
        let key = try reader.string(maxBytes: 256)
        let primaryKey = try reader.string(maxBytes: 128)
        try reader.check(isHex(primaryKey) && (key == primaryKey || key.hasPrefix(primaryKey + ".")) && isKeyText(key))
        let vary = try reader.string(maxBytes: maxTextBytes)
        let varyNames = vary.isEmpty ? [] : vary.split(separator: ",", omittingEmptySubsequences: false).map(String.init)
        try reader.check(varyNames.allSatisfy { HTTPToken.isValidName($0) })
        let fingerprint = try reader.optionalString(maxBytes: 256)
        let namespace = try reader.string(maxBytes: 256)
        try reader.check(!namespace.isEmpty)
        guard let method = HTTPMethod(rawValue: try reader.string(maxBytes: 64)) else { throw .invalid }
        let url = try reader.string(maxBytes: maxTextBytes)
        let urlKey = try reader.string(maxBytes: maxTextBytes)
        let status = try reader.integer()
        try reader.check((100...599).contains(status))
        let headers = try reader.bytes()
        // Embedded as they are in every answer: they must be the JSON object they were.
        let fields = ResponseHeaders.parseJSON(headers)
        try reader.check(!fields.isEmpty || headers == Array("{}".utf8))
        let body = try reader.bytes()
        let kindValue = try reader.integer()
        guard (0..<Int64(codingFactor * 2)).contains(kindValue), let kind = BodyKind(rawValue: Int(kindValue) % codingFactor),
            let coding = BodyCoding(rawValue: Int(kindValue) / codingFactor)
        else { throw .invalid }
        // What BodyKind.classify would have said: a JSON body is embedded as it is, a text one
        // escaped as UTF-8. A compressed body is checked by its codec when it is read back (its
        // frame's size, its integrity); its kind was judged on the whole body when it came.
        switch (kind, coding) {
        case (.json, .identity): try reader.check(body.count <= BodyKind.maxEmbeddedJSONBytes && JSONParser.isValid(body))
        case (.text, .identity): try reader.check(String(validating: body, as: UTF8.self) != nil)
        default: break
        }
        let storedAt = try reader.seconds()
        let lifetime = try reader.seconds()
        let version = try reader.integer()
        try reader.check(CacheOptions.versions.contains(version))
        let whileRevalidate = try reader.seconds()
        let ifError = try reader.seconds()
        let mustRevalidate = try reader.integer()
        try reader.check(mustRevalidate == 0 || mustRevalidate == 1)
        let initialAge = try reader.seconds()
        let sensitive = try reader.optionalString(maxBytes: 256)
        let etag = try reader.optionalString(maxBytes: maxTextBytes)
        let lastModified = try reader.optionalString(maxBytes: maxTextBytes)
        let tagCount = try reader.integer()
        try reader.check((0...Int64(CacheTags.maxPerEntry)).contains(tagCount))
        var tags: [String] = []
        for _ in 0..<tagCount {
            let tag = try reader.string(maxBytes: CacheTags.maxBytes)
            try reader.check(CacheTags.isValid(tag))
            tags.append(tag)
        }
        var storedTTL: Double?
        var invalidatedAt: Double?
        if reader.remaining > 0 {
            storedTTL = try reader.secondsOrNone()
            // "None" (-1) is written only before a soft purge's time.
            if reader.remaining > 0 { invalidatedAt = try reader.seconds() } else { try reader.check(storedTTL != nil) }
        }
        try reader.check(reader.remaining == 0)
        var entry = StoredEntry(
            key: CacheKey(hex: key), primaryKey: CacheKey(hex: primaryKey), varyNames: varyNames, variantFingerprint: fingerprint,
            namespace: namespace, method: method, url: url, urlKey: urlKey, status: Int(status), headersJSON: headers, body: body,
            bodyKind: kind,
            freshness: EntryFreshness(
                storedAt: storedAt, freshnessLifetime: lifetime, version: version,
                staleWhileRevalidate: whileRevalidate, staleIfError: ifError,
                mustRevalidate: mustRevalidate == 1, initialAge: initialAge, storedTTL: storedTTL, invalidatedAt: invalidatedAt),
            sensitiveFingerprint: sensitive, etag: etag, lastModified: lastModified, headerFields: fields)
        entry.tags = tags
        entry.bodyCoding = coding
        return entry
    }

    private static func isHex(_ text: String) -> Bool {
        !text.isEmpty && text.utf8.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }
    }

    /// Letters, digits, '.', '-' and '_' (a key is hex, a variant's adds a dot and more hex): it
    /// goes into Redis key names and, unescaped, into answers.
    private static func isKeyText(_ text: String) -> Bool {
        text.utf8.allSatisfy { byte in
            (0x30...0x39).contains(byte) || (0x41...0x5A).contains(byte) || (0x61...0x7A).contains(byte)
                || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "-") || byte == UInt8(ascii: "_")
        }
    }

    /// Reads fields from `data[offset..<end]`; every read checks what remains before it moves.
    private struct Reader {
        enum Failure: Error { case invalid }

        let data: [UInt8]
        var offset: Int
        let end: Int

        var remaining: Int { end - offset }

        func check(_ condition: Bool) throws(Failure) {
            if !condition { throw .invalid }
        }

        mutating func integer() throws(Failure) -> Int64 {
            guard remaining >= 8 else { throw .invalid }
            let value = data.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: offset, as: Int64.self) }
            offset += 8
            return Int64(littleEndian: value)
        }

        /// A time or a duration in seconds: finite, 0 or more, at most `maxSeconds`.
        mutating func seconds() throws(Failure) -> Double {
            let value = Double(bitPattern: UInt64(bitPattern: try integer()))
            guard value.isFinite, value >= 0, value <= EntryCodec.maxSeconds else { throw .invalid }
            return value
        }

        /// As `seconds`, or -1 for none.
        mutating func secondsOrNone() throws(Failure) -> Double? {
            let value = Double(bitPattern: UInt64(bitPattern: try integer()))
            if value == -1 { return nil }
            guard value.isFinite, value >= 0, value <= EntryCodec.maxSeconds else { throw .invalid }
            return value
        }

        mutating func bytes() throws(Failure) -> [UInt8] {
            let count = try integer()
            // Compared with what remains, so no sum can overflow.
            guard count >= 0, count <= Int64(remaining) else { throw .invalid }
            let start = offset
            offset += Int(count)
            return Array(data[start..<offset])
        }

        /// A string that must be there: valid UTF-8 of at most `maxBytes`.
        mutating func string(maxBytes: Int) throws(Failure) -> String {
            guard let value = try optionalString(maxBytes: maxBytes) else { throw .invalid }
            return value
        }

        /// A string, or nil where none was written (length -1).
        mutating func optionalString(maxBytes: Int) throws(Failure) -> String? {
            guard remaining >= 8 else { throw .invalid }
            let count = data.withUnsafeBytes { Int64(littleEndian: $0.loadUnaligned(fromByteOffset: offset, as: Int64.self)) }
            if count == -1 {
                offset += 8
                return nil
            }
            guard count <= Int64(maxBytes) else { throw .invalid }
            guard let text = UTF8Text.validated(try bytes()) else { throw .invalid }
            return text
        }
    }
}
