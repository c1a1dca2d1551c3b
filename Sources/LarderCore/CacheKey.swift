// The cache key (docs/api.md, "The cache key").
//
// key = hex(HMAC-SHA-256(instanceSecret, encoding)), where `encoding` is the UTF-8 text
//
//   larder-key/1\n
//   namespace=<n>:<namespace>\n
//   method=<n>:<METHOD>\n
//   url=<n>:<normalised URL, ignoreQuery removed>\n
//   body=<n>:<hex SHA-256 of the request body, or empty when there is none>\n
//   sensitive=<n>:<canonical JSON of `sensitive`, or empty>\n
//   credentials=<n>:<Authorization and Cookie values, each "name:value\n", or empty>\n
//                   (always empty on the shared /proxy route)
//   ignored=<n>:<the ignoreQuery names, sorted, each followed by "\n">\n   (only when there are any)
//
// and <n> is the byte length of the value that follows, so no two different inputs encode
// alike. The ignored names are part of the key: otherwise `?a=EVIL` with `a` ignored would
// share the entry of the URL without `a`, and answer everyone who asks for that one. The
// instance secret makes keys and fingerprints useless to anyone holding only the database: a
// user id or a token cannot be recovered by hashing guesses.
//
// `version` is deliberately not in the key: an entry stored under another version occupies
// the same slot, is never served, and is replaced by the next fetch (YTKNetwork's cacheVersion).

import Crypto
import Foundation

public struct CacheKey: Sendable, Hashable, CustomStringConvertible {
    public let hex: String
    /// The first 15 hex digits of `hex` as a number, and in the lowest bit whether the key is
    /// ASCII: what a primary key is hashed by. A hit looks its key up in several tables (the
    /// memory tier's, the writes not yet committed), and hashing all 64 characters for each cost
    /// more than the lookups. Primary keys are HMACs under the instance secret, so no caller can
    /// choose keys whose digits collide. Row keys of variants and stored parts extend their
    /// primary key (`<key>.<fingerprint>`, `<key>.part`): what follows the 64 digits is hashed
    /// too. (A key that is not hex, as some tests use, still gets a number from its bytes.)
    private let leadingDigits: UInt64

    public init(hex: String) {
        self.hex = hex
        var text = hex
        leadingDigits = text.withUTF8 { bytes in
            var word: UInt64 = 0
            var any: UInt8 = 0
            for (index, byte) in bytes.enumerated() {
                any |= byte
                guard index < 15 else { continue }
                let nibble = byte <= UInt8(ascii: "9") ? byte &- UInt8(ascii: "0") : (byte | 0x20) &- UInt8(ascii: "a") &+ 10
                word = word << 4 | UInt64(nibble & 0x0F)
            }
            return word << 1 | (any < 0x80 ? 1 : 0)
        }
    }

    public var description: String { hex }

    /// The keys' bytes are the same, as SQLite compares keys. For ASCII keys (every real one)
    /// String's `==` is that comparison; for others it would also equate canonically equivalent
    /// Unicode, which the hash, taken from the bytes, does not tell apart, so those are compared
    /// as bytes.
    public static func == (lhs: CacheKey, rhs: CacheKey) -> Bool {
        guard lhs.leadingDigits == rhs.leadingDigits else { return false }
        if lhs.leadingDigits & 1 == 1 { return lhs.hex == rhs.hex }
        return lhs.hex.utf8.elementsEqual(rhs.hex.utf8)
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(leadingDigits)
        let count = hex.utf8.count
        hasher.combine(count)
        guard count > 64 else { return }
        for byte in hex.utf8.dropFirst(64) { hasher.combine(byte) }
    }

    /// 0–15, spread evenly, for sharding tables by key: the value of the last hex digit (keys
    /// are HMACs). Taking the digit's byte modulo 16 would leave six of sixteen shards unused.
    public var shardIndex: Int {
        let last = hex.utf8.last ?? 0
        switch last {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return Int(last - UInt8(ascii: "0"))
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return Int(last - UInt8(ascii: "a")) + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return Int(last - UInt8(ascii: "A")) + 10
        default: return Int(last & 15)
        }
    }
}

public struct CacheKeyBuilder: Sendable {
    private let keyed: KeyedHMAC

    /// HMAC-SHA256 (RFC 2104) with the instance secret, its inner and outer pads hashed once:
    /// each key copies the two SHA-256 states and hashes the message through the hash's
    /// buffer-pointer API. (swift-crypto's `HMAC` takes the message through its generic
    /// `DataProtocol` path and its key through `SymmetricKey`, about a third of a key's cost.)
    /// The same codes as `HMAC<SHA256>` (CacheKeyTests compares them). @unchecked Sendable: never
    /// mutated; each use mutates its own copy (swift-crypto's hash state is copy-on-write).
    private struct KeyedHMAC: @unchecked Sendable {
        let inner: SHA256
        let outer: SHA256

        init(secret: [UInt8]) {
            // §2: a key longer than the hash's block is hashed first; the key is padded with zeros.
            var key = secret.count > 64 ? Array(SHA256.hash(data: secret)) : secret
            key += [UInt8](repeating: 0, count: 64 - key.count)
            var inner = SHA256()
            var outer = SHA256()
            inner.update(data: key.map { $0 ^ 0x36 })
            outer.update(data: key.map { $0 ^ 0x5C })
            self.inner = inner
            self.outer = outer
        }

        func code(_ message: UnsafeRawBufferPointer) -> SHA256.Digest {
            var inner = self.inner
            inner.update(bufferPointer: message)
            var outer = self.outer
            inner.finalize().withUnsafeBytes { outer.update(bufferPointer: $0) }
            return outer.finalize()
        }
    }

    /// `secret` is the instance secret (32 random bytes kept beside the database).
    public init(secret: [UInt8]) {
        self.keyed = KeyedHMAC(secret: secret)
    }

    /// The secret's HMAC of `bytes`, as hex.
    func authenticationCode(_ bytes: [UInt8]) -> String {
        Self.hex(bytes.withUnsafeBytes { keyed.code($0) })
    }

    public struct Derived: Sendable {
        public let key: CacheKey
        /// HMAC of the `sensitive` value, stored beside the entry; nil when there is none.
        public let sensitiveFingerprint: String?
        /// The key has a per-caller part (`sensitive` or credentials): the entry is private to it.
        public let partitioned: Bool
    }

    public func derive(for request: FetchRequest) -> Derived {
        derive(for: request, url: request.url.keyString(ignoring: request.cache.ignoreQuery))
    }

    /// The key of `request` with the query parameters `drops` names (decoded) left out of its
    /// URL, as if it had been asked for without them: a stored response's No-Vary-Search. The
    /// key is the one such a request would get, so the key scheme is the same.
    public func derive(for request: FetchRequest, dropping drops: (String) -> Bool) -> Derived {
        derive(for: request, url: request.url.keyString(ignoring: request.cache.ignoreQuery, dropping: drops))
    }

    private func derive(for request: FetchRequest, url: String) -> Derived {
        let sensitive = request.cache.sensitive.map(\.canonicalBytes)
        var credentials: [UInt8] = []
        // A shared cache (the proxy route) does not partition by credentials; RFC 9111 §3.5
        // decides instead what may be stored for a request with Authorization.
        for field in request.headers
        where !request.shared
            && (field.name.caseInsensitiveEquals("authorization") || field.name.caseInsensitiveEquals("cookie"))
        {
            credentials.append(contentsOf: field.name.lowercasedASCII.utf8)
            credentials.append(UInt8(ascii: ":"))
            credentials.append(contentsOf: field.value.utf8)
            credentials.append(UInt8(ascii: "\n"))
        }
        let bodyHash = request.body.map { Self.hex(SHA256.hash(data: $0)) } ?? ""

        // Written straight into one buffer, with no array per part and no `String(Int)` per
        // length: every request not seen before derives its key (docs/performance.md, "A hit
        // read from SQLite"). Reserved for the labels, the lengths and the body hash besides the
        // variable parts.
        var encoding: [UInt8] = []
        encoding.reserveCapacity(
            192 + request.cache.namespace.utf8.count + url.utf8.count + credentials.count + (sensitive?.count ?? 0))
        encoding.append(contentsOf: "larder-key/1\n".utf8)
        Self.append("namespace", request.cache.namespace, to: &encoding)
        Self.append("method", request.method.rawValue, to: &encoding)
        Self.append("url", url, to: &encoding)
        Self.append("body", bodyHash, to: &encoding)
        Self.append("sensitive", sensitive ?? [], to: &encoding)
        Self.append("credentials", credentials, to: &encoding)
        if !request.cache.ignoreQuery.isEmpty {
            // Appended only when present, so keys without ignoreQuery are unchanged.
            var ignored: [UInt8] = []
            for name in request.cache.ignoreQuery.sorted(by: { $0.utf8.lexicographicallyPrecedes($1.utf8) }) {
                ignored.append(contentsOf: name.utf8)
                ignored.append(UInt8(ascii: "\n"))
            }
            Self.append("ignored", ignored, to: &encoding)
        }

        let key = CacheKey(hex: authenticationCode(encoding))
        let fingerprint = sensitive.map { value -> String in authenticationCode(Array("sensitive\n".utf8) + value) }
        return Derived(key: key, sensitiveFingerprint: fingerprint, partitioned: sensitive != nil || !credentials.isEmpty)
    }

    /// HMAC of `bytes` under the instance secret, labelled so different uses never collide.
    func fingerprint(label: String, _ bytes: [UInt8]) -> String {
        authenticationCode(Array("\(label)\n".utf8) + bytes)
    }

    private static func append(_ name: StaticString, _ value: [UInt8], to out: inout [UInt8]) {
        value.withUnsafeBufferPointer { appendField(name, $0, to: &out) }
    }

    private static func append(_ name: StaticString, _ value: String, to out: inout [UInt8]) {
        var value = value
        value.withUTF8 { appendField(name, $0, to: &out) }
    }

    /// `name=<n>:value\n`, the length in decimal.
    private static func appendField(_ name: StaticString, _ value: UnsafeBufferPointer<UInt8>, to out: inout [UInt8]) {
        out.appendLiteral(name)
        out.append(UInt8(ascii: "="))
        DecimalDigits.append(value.count, to: &out)
        out.append(UInt8(ascii: ":"))
        out.append(contentsOf: value)
        out.append(UInt8(ascii: "\n"))
    }

    static func hex<Digest: ContiguousBytes>(_ digest: Digest) -> String {
        // Straight into the string's storage, each byte's two digits computed (no table to look
        // up through a global's accessor, no iterator per byte).
        digest.withUnsafeBytes { bytes in
            String(unsafeUninitializedCapacity: bytes.count * 2) { out in
                var index = 0
                for byte in bytes {
                    out[index] = digit(byte >> 4)
                    out[index + 1] = digit(byte & 0x0F)
                    index += 2
                }
                return index
            }
        }
    }

    @inline(__always) private static func digit(_ nibble: UInt8) -> UInt8 {
        nibble < 10 ? UInt8(ascii: "0") + nibble : UInt8(ascii: "a") - 10 + nibble
    }
}
