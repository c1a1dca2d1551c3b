// A stored entry as one Redis value: every field length-prefixed, then an XXH3-64 of all that
// came before. A value that is damaged, cut short or written by another format decodes to nil,
// and is then a miss, never served.

import CXXHash
import LarderCore
import LarderEngine

enum EntryCodec {
    static let magic: [UInt8] = Array("LRD1".utf8)

    static func encode(_ entry: StoredEntry) -> [UInt8] {
        var out = magic
        out.reserveCapacity(entry.body.count + entry.headersJSON.count + entry.url.utf8.count * 2 + 256)
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
        integer(Int64(entry.bodyKind.rawValue))
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
        let checksum = out.withUnsafeBytes { XXH3_64bits($0.baseAddress, $0.count) }
        withUnsafeBytes(of: checksum.littleEndian) { out.append(contentsOf: $0) }
        return out
    }

    static func decode(_ value: [UInt8]) -> StoredEntry? {
        guard value.count > magic.count + 8, Array(value.prefix(4)) == magic else { return nil }
        let payload = value.count - 8
        let stored = value.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: payload, as: UInt64.self) }
        let computed = value.withUnsafeBytes { XXH3_64bits($0.baseAddress, payload) }
        guard UInt64(littleEndian: stored) == computed else { return nil }
        var reader = Reader(data: value, offset: magic.count, end: payload)
        guard let key = reader.string(), let primaryKey = reader.string(), let vary = reader.string() else { return nil }
        let fingerprint = reader.optionalString()
        guard let namespace = reader.string(), let methodName = reader.string(), let method = HTTPMethod(rawValue: methodName),
              let url = reader.string(), let urlKey = reader.string(), let status = reader.integer(),
              let headers = reader.bytes(), let body = reader.bytes(), let kindValue = reader.integer(),
              let kind = BodyKind(rawValue: Int(kindValue)),
              let storedAt = reader.double(), let lifetime = reader.double(), let version = reader.integer(),
              let whileRevalidate = reader.double(), let ifError = reader.double(), let mustRevalidate = reader.integer(),
              let initialAge = reader.double() else { return nil }
        let sensitive = reader.optionalString(), etag = reader.optionalString(), lastModified = reader.optionalString()
        guard let tagCount = reader.integer(), (0...Int64(CacheTags.maxPerEntry)).contains(tagCount) else { return nil }
        var tags: [String] = []
        for _ in 0..<tagCount {
            guard let tag = reader.string() else { return nil }
            tags.append(tag)
        }
        guard reader.offset == payload, !reader.failed else { return nil }
        var entry = StoredEntry(
            key: CacheKey(hex: key), primaryKey: CacheKey(hex: primaryKey),
            varyNames: vary.isEmpty ? [] : vary.split(separator: ",").map(String.init), variantFingerprint: fingerprint,
            namespace: namespace, method: method, url: url, urlKey: urlKey, status: Int(status), headersJSON: headers, body: body,
            bodyKind: kind,
            freshness: EntryFreshness(storedAt: storedAt, freshnessLifetime: lifetime, version: version,
                                      staleWhileRevalidate: whileRevalidate, staleIfError: ifError,
                                      mustRevalidate: mustRevalidate != 0, initialAge: initialAge),
            sensitiveFingerprint: sensitive, etag: etag, lastModified: lastModified)
        entry.tags = tags
        return entry
    }

    private struct Reader {
        let data: [UInt8]
        var offset: Int
        let end: Int
        var failed = false

        mutating func integer() -> Int64? {
            guard offset + 8 <= end else { failed = true; return nil }
            defer { offset += 8 }
            return Int64(littleEndian: data.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: offset, as: Int64.self) })
        }

        mutating func double() -> Double? { integer().map { Double(bitPattern: UInt64(bitPattern: $0)) } }

        mutating func bytes() -> [UInt8]? {
            guard let count = integer(), count >= 0, offset + Int(count) <= end else { failed = true; return nil }
            defer { offset += Int(count) }
            return Array(data[offset..<offset + Int(count)])
        }

        /// A string that must be there.
        mutating func string() -> String? {
            guard let value = optionalString() else { failed = true; return nil }
            return value
        }

        /// A string, or nil where none was written (length -1).
        mutating func optionalString() -> String? {
            guard offset + 8 <= end else { failed = true; return nil }
            let count = data.withUnsafeBytes { Int64(littleEndian: $0.loadUnaligned(fromByteOffset: offset, as: Int64.self)) }
            if count == -1 { offset += 8; return nil }
            return bytes().map { String(decoding: $0, as: UTF8.self) }
        }
    }
}
