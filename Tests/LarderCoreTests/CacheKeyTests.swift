import Crypto
import Foundation
import XCTest

@testable import LarderCore

final class CacheKeyTests: XCTestCase {
    private let builder = CacheKeyBuilder(secret: Array(repeating: 7, count: 32))

    private func request(
        _ url: String, method: HTTPMethod = .get, headers: [HeaderField] = [], body: [UInt8]? = nil,
        query: [String: String] = [:], _ configure: (inout CacheOptions) -> Void = { _ in }
    ) throws -> FetchRequest {
        var options = CacheOptions()
        configure(&options)
        return FetchRequest(
            method: method, url: try UpstreamURL(parsing: url, mergingQuery: query), headers: headers,
            body: body, cache: options)
    }

    private func key(_ request: FetchRequest) -> String { builder.derive(for: request).key.hex }

    func testKeysSharingTheirHashedPrefixStayDistinct() {
        // Hashed by their first 16 hex digits; equal only when the whole key is.
        let prefix = String(repeating: "ab", count: 8)
        let one = CacheKey(hex: prefix + String(repeating: "0", count: 48))
        let other = CacheKey(hex: prefix + String(repeating: "1", count: 48))
        XCTAssertNotEqual(one, other)
        XCTAssertEqual(one.hashValue, other.hashValue)
        XCTAssertEqual(Set([one, other, CacheKey(hex: one.hex)]).count, 2)
        XCTAssertEqual([one: 1, other: 2][CacheKey(hex: other.hex)], 2)
        XCTAssertNotEqual(CacheKey(hex: "k1"), CacheKey(hex: "k2"))
        // Row keys extend their primary key: told apart by what follows its 64 digits.
        let primary = CacheKey(hex: String(repeating: "c", count: 64))
        let rows = [primary] + (0..<8).map { CacheKey(hex: primary.hex + ".v\($0)") } + [CacheKey(hex: primary.hex + ".part")]
        XCTAssertEqual(Set(rows).count, 10)
        XCTAssertGreaterThan(Set(rows.map(\.hashValue)).count, 8, "variants of one key hash alike")
        // Bytes, not canonical equivalence: "é" as one scalar and as "e" and an accent, after the
        // same leading digits (String's == calls them equal; their hashes differ).
        let leading = String(repeating: "a", count: 15)
        XCTAssertEqual(leading + "\u{E9}", leading + "e\u{301}")
        XCTAssertNotEqual(CacheKey(hex: leading + "\u{E9}"), CacheKey(hex: leading + "e\u{301}"))
        XCTAssertEqual(CacheKey(hex: leading + "\u{E9}"), CacheKey(hex: leading + "\u{E9}"))
    }

    /// Keys are HMAC-SHA256 under the secret, whatever computes them: a stored entry's key
    /// must be found again.
    func testKeysAreHMACSHA256OfTheSecret() {
        for secretLength in [0, 1, 32, 63, 64, 65, 100] {
            let secret = (0..<secretLength).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }
            let builder = CacheKeyBuilder(secret: secret)
            for messageLength in [0, 1, 55, 56, 63, 64, 65, 200, 1000] {
                let message = (0..<messageLength).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ 5) }
                let expected = HMAC<SHA256>.authenticationCode(for: message, using: SymmetricKey(data: secret))
                XCTAssertEqual(
                    builder.authenticationCode(message), expected.map { String(format: "%02x", $0) }.joined(),
                    "secret \(secretLength) bytes, message \(messageLength) bytes")
            }
        }
    }

    func testKeyIsHexSHA256Sized() throws {
        let derived = builder.derive(for: try request("http://a.test/x"))
        XCTAssertEqual(derived.key.hex.count, 64)
        XCTAssertTrue(derived.key.hex.allSatisfy { $0.isHexDigit && !$0.isUppercase })
        XCTAssertNil(derived.sensitiveFingerprint)
        XCTAssertFalse(derived.partitioned)
    }

    func testEquivalentURLsShareAKey() throws {
        let reference = key(try request("http://api.example.test/v1/cities?a=1&b=2"))
        XCTAssertEqual(key(try request("HTTP://API.Example.TEST:80/v1/cities?b=2&a=1")), reference)
        XCTAssertEqual(key(try request("http://api.example.test/v1/./x/../cities?a=1&b=2#fragment")), reference)
        XCTAssertEqual(key(try request("http://api.example.test/v1/%63ities?a=1&b=2")), reference)
        XCTAssertEqual(key(try request("http://api.example.test/v1/cities?a=1", query: ["b": "2"])), reference)
        XCTAssertNotEqual(key(try request("https://api.example.test/v1/cities?a=1&b=2")), reference)
        XCTAssertNotEqual(key(try request("http://api.example.test:8080/v1/cities?a=1&b=2")), reference)
        XCTAssertNotEqual(key(try request("http://api.example.test/v1/Cities?a=1&b=2")), reference, "paths are case-sensitive")
        XCTAssertNotEqual(key(try request("http://api.example.test/v1/cities?a=1&b=3")), reference)
    }

    func testIgnoredQueryParametersAreLeftOutOfTheKey() throws {
        let withIgnore: (inout CacheOptions) -> Void = { $0.ignoreQuery = ["ts"] }
        XCTAssertEqual(
            key(try request("http://a.test/x?q=1&ts=100", withIgnore)), key(try request("http://a.test/x?ts=999&q=1", withIgnore)))
        XCTAssertNotEqual(
            key(try request("http://a.test/x?q=1&ts=100", withIgnore)), key(try request("http://a.test/x?q=1")),
            "the ignored names are in the key: an ignored parameter cannot answer for the URL without it")
        XCTAssertNotEqual(key(try request("http://a.test/x?q=1&ts=100")), key(try request("http://a.test/x?q=1&ts=999")))
        XCTAssertNotEqual(
            key(try request("http://a.test/x?q=1", withIgnore)), key(try request("http://a.test/x?q=1") { $0.ignoreQuery = ["q2"] }))
    }

    func testRepeatedQueryParametersKeepTheirOrderInTheKey() throws {
        XCTAssertNotEqual(key(try request("http://a.test/x?a=evil&a=good")), key(try request("http://a.test/x?a=good&a=evil")))
        XCTAssertEqual(
            key(try request("http://a.test/x?b=1&a=evil&a=good")), key(try request("http://a.test/x?a=evil&b=1&a=good")),
            "names are still sorted; only values of one name keep their order")
    }

    func testMethodNamespaceAndBodyAreInTheKey() throws {
        let get = key(try request("http://a.test/x"))
        XCTAssertNotEqual(key(try request("http://a.test/x", method: .head)), get)
        XCTAssertNotEqual(key(try request("http://a.test/x") { $0.namespace = "other" }), get)
        let postA = key(try request("http://a.test/x", method: .post, body: Array(#"{"q":"a"}"#.utf8)))
        let postB = key(try request("http://a.test/x", method: .post, body: Array(#"{"q":"b"}"#.utf8)))
        let postNone = key(try request("http://a.test/x", method: .post))
        XCTAssertNotEqual(postA, postB)
        XCTAssertNotEqual(postA, postNone)
        XCTAssertEqual(postA, key(try request("http://a.test/x", method: .post, body: Array(#"{"q":"a"}"#.utf8))))
    }

    func testVersionIsNotInTheKey() throws {
        XCTAssertEqual(key(try request("http://a.test/x") { $0.version = 1 }), key(try request("http://a.test/x") { $0.version = 2 }))
    }

    func testSensitiveValuesPartitionAndAreOnlyFingerprinted() throws {
        let one = builder.derive(for: try request("http://a.test/x") { $0.sensitive = .object(["user": .number(1)]) })
        let two = builder.derive(for: try request("http://a.test/x") { $0.sensitive = .object(["user": .number(2)]) })
        XCTAssertNotEqual(one.key, two.key)
        XCTAssertTrue(one.partitioned)
        let fingerprint = try XCTUnwrap(one.sensitiveFingerprint)
        XCTAssertEqual(fingerprint.count, 64)
        XCTAssertFalse(fingerprint.contains("user"))
        // Canonical JSON: key order does not matter; a number's text does (1 and 1.0 may differ
        // to whoever reads them).
        let a = builder.derive(for: try request("http://a.test/x") { $0.sensitive = .object(["a": .number(1), "b": .string("x")]) })
        let b = builder.derive(for: try request("http://a.test/x") { $0.sensitive = .object(["b": .string("x"), "a": .number(1)]) })
        let oneWithAFraction = try XCTUnwrap(JSONNumber("1.0"))
        let c = builder.derive(
            for: try request("http://a.test/x") { $0.sensitive = .object(["b": .string("x"), "a": .number(oneWithAFraction)]) })
        XCTAssertEqual(a.key, b.key)
        XCTAssertNotEqual(a.key, c.key)
    }

    func testCredentialsPartitionTheKey() throws {
        let anonymous = builder.derive(for: try request("http://a.test/x"))
        let alice = builder.derive(for: try request("http://a.test/x", headers: [HeaderField("Authorization", "Bearer alice")]))
        let aliceLower = builder.derive(for: try request("http://a.test/x", headers: [HeaderField("authorization", "Bearer alice")]))
        let bob = builder.derive(for: try request("http://a.test/x", headers: [HeaderField("Authorization", "Bearer bob")]))
        let cookie = builder.derive(for: try request("http://a.test/x", headers: [HeaderField("Cookie", "s=1")]))
        let other = builder.derive(for: try request("http://a.test/x", headers: [HeaderField("X-Trace", "1")]))
        XCTAssertEqual(alice.key, aliceLower.key, "header names are case-insensitive")
        XCTAssertTrue(alice.partitioned)
        XCTAssertEqual(Set([anonymous.key, alice.key, bob.key, cookie.key]).count, 4)
        XCTAssertEqual(other.key, anonymous.key, "other headers are not in the key")
    }

    func testTheInstanceSecretKeysTheHash() throws {
        let other = CacheKeyBuilder(secret: Array(repeating: 8, count: 32))
        let fetch = try request("http://a.test/x")
        XCTAssertNotEqual(builder.derive(for: fetch).key, other.derive(for: fetch).key)
    }

    // MARK: - Known answers (issue 35): versions share one store

    // Keys and fingerprints are what a stored entry is found by, in SQLite and in Redis, and
    // instances of different releases share one store (a rolling upgrade, --redis). These values
    // are frozen: they were computed once, from the encoding documented at the top of
    // Sources/LarderCore/CacheKey.swift, both by this code and independently (Python's hmac and
    // hashlib over that text). A change that makes any of them fail changes every key, and
    // with it orphans every stored entry: it needs a new `larder-key/N` and a note in the
    // release, never an update of these constants.

    /// A fixed instance secret: bytes 0, 1, …, 31.
    private let knownSecret = CacheKeyBuilder(secret: Array(0..<32))

    func testKnownKeyOfAPlainGet() throws {
        XCTAssertEqual(
            knownSecret.derive(for: try request("http://a.test/x")).key.hex,
            "3038d8f91ae89e5c3cb4f0d1d485a3594b9cb0d8c2177bd6e6f5f8758cc8d532")
        // Equivalent spellings normalise to the same key.
        XCTAssertEqual(
            knownSecret.derive(for: try request("HTTP://A.TEST:80/./x#f")).key.hex,
            "3038d8f91ae89e5c3cb4f0d1d485a3594b9cb0d8c2177bd6e6f5f8758cc8d532")
        // On the shared /proxy route credentials are not part of the key (RFC 9111 §3.5).
        var shared = try request("http://a.test/x", headers: [HeaderField("Authorization", "Bearer t")])
        shared.shared = true
        XCTAssertEqual(knownSecret.derive(for: shared).key.hex, "3038d8f91ae89e5c3cb4f0d1d485a3594b9cb0d8c2177bd6e6f5f8758cc8d532")
    }

    func testKnownKeyAndFingerprintOfARequestWithEveryPart() throws {
        // Namespace, method, a URL with ignored parameters, a body, a sensitive value and
        // credentials: every line of the encoding, the optional `ignored` one included.
        let derived = knownSecret.derive(
            for: try request(
                "http://api.example.test/v1/search?ts=5&q=x&a=2", method: .post,
                headers: [HeaderField("Authorization", "Bearer t"), HeaderField("X-Other", "y"), HeaderField("Cookie", "s=1")],
                body: Array(#"{"q":"a"}"#.utf8)
            ) {
                $0.namespace = "orders"
                $0.ignoreQuery = ["zz", "ts"]
                $0.sensitive = .object(["user": .number(42), "org": .string("acme")])
            })
        XCTAssertEqual(derived.key.hex, "2ac92b6a65536919f25e0ccf248f05aaa77b09788e7f98e6b06eff8238f04122")
        XCTAssertEqual(derived.sensitiveFingerprint, "58338193f9198c233d601721ca05defbc020ec9931609515e95371a9ef341372")
        XCTAssertTrue(derived.partitioned)
    }

    func testKnownVariantFingerprint() {
        // Vary (RFC 9111 §4.1): a field present, one absent, and values normalised (list
        // whitespace; Accept-Language's tokens lower-cased and sorted).
        let fingerprint = knownSecret.variantFingerprint(
            names: ["accept-language", "x-absent", "x-tenant"],
            request: [HeaderField("Accept-Language", "EN, De"), HeaderField("X-Tenant", "a  b, c"), HeaderField("X-Other", "1")])
        XCTAssertEqual(fingerprint, "6ea768f19688c1947bd7baefe08a40fc6b44a2616435336eb6f124704df53cea")
    }
}

final class UpstreamURLTests: XCTestCase {
    func testNormalisation() throws {
        let url = try UpstreamURL(parsing: "HTTPS://Example.TEST:443/a/%7euser/./b/../c?z=1&a=%2f&flag#top")
        XCTAssertEqual(url.scheme, "https")
        XCTAssertEqual(url.host, "example.test")
        XCTAssertNil(url.port)
        XCTAssertEqual(url.path, "/a/~user/c")
        XCTAssertEqual(url.keyString(), "https://example.test/a/~user/c?a=%2F&flag&z=1")
        XCTAssertEqual(url.absoluteString, "https://example.test/a/~user/c?z=1&a=%2F&flag")
        XCTAssertEqual(try UpstreamURL(parsing: "http://x.test").path, "/")
        XCTAssertEqual(try UpstreamURL(parsing: "http://[::1]:8080/p").authority, "[::1]:8080")
    }

    func testKeyStringSortsByNameKeepingTheOrderWithinAName() throws {
        // Already sorted (taken without sorting), unsorted, and repeated names.
        XCTAssertEqual(try UpstreamURL(parsing: "http://h.test/p?a=1&b=2").keyString(), "http://h.test/p?a=1&b=2")
        XCTAssertEqual(try UpstreamURL(parsing: "http://h.test/p?b=2&a=1").keyString(), "http://h.test/p?a=1&b=2")
        XCTAssertEqual(try UpstreamURL(parsing: "http://h.test/p?a=2&a=1&A=0").keyString(), "http://h.test/p?A=0&a=2&a=1")
        XCTAssertEqual(try UpstreamURL(parsing: "http://h.test:8080/p?x").keyString(), "http://h.test:8080/p?x")
        XCTAssertEqual(try UpstreamURL(parsing: "http://h.test/p?a=&b").absoluteString, "http://h.test/p?a=&b")
        XCTAssertEqual(try UpstreamURL(parsing: "http://h.test/p?a=1&b=2").keyString(ignoring: ["a"]), "http://h.test/p?b=2")
        XCTAssertEqual(try UpstreamURL(parsing: "http://h.test/p?a=1").keyString(ignoring: ["a"]), "http://h.test/p")
        XCTAssertTrue(try UpstreamURL(parsing: "http://h.test/p?a=2&a=1&b").isInKeyOrder)
        XCTAssertFalse(try UpstreamURL(parsing: "http://h.test/p?b&a").isInKeyOrder)
    }

    func testQueryMergeReplacesNamedParameters() throws {
        let url = try UpstreamURL(parsing: "http://x.test/p?a=1&b=2&a=3", mergingQuery: ["a": "new value", "c": "&"])
        XCTAssertEqual(url.absoluteString, "http://x.test/p?b=2&a=new%20value&c=%26")
    }

    func testRejections() {
        for bad in [
            "", "relative/path", "/abs/path", "file:///etc/passwd", "ftp://x.test/", "gopher://x.test/",
            "http://user:pw@x.test/", "http://x.test:0/", "http://x.test:65536/", "http:///nohost"
        ] {
            XCTAssertThrowsError(try UpstreamURL(parsing: bad), bad) { error in
                XCTAssertEqual((error as? LarderError)?.code, .invalidRequest)
                XCTAssertEqual((error as? LarderError)?.field, "url")
            }
        }
    }
}

/// The one-pass URL reader must read every URL it accepts exactly as Foundation does.
final class PlainURLPartsTests: XCTestCase {
    private let urls = [
        "http://example.com", "http://example.com/", "https://EXAMPLE.com:8443/a/b?x=1&y=2",
        "http://a.test:80/x", "https://a.test:443/", "http://a.test:8080", "http://127.0.0.1:9000/p?q",
        "http://a.test/a/./b/../c", "http://a.test/%7euser/%2fslash?%41=%42", "http://a.test/p?a=1&a=2&b",
        "http://a.test/p?a=&b==c&c=1?2", "http://a.test?x=1", "http://a.test/p;x=1/q:z?s=(1)*!$'+,;",
        "http://a-b.c-d.test./x", "HTTP://Host.Test/Path", "http://a.test/~user/_x-y.z",
        "http://a.test/p?q=a/b:c", "http://x/set/1.json", "http://127.0.0.1:18080/64k/set/42.json"
    ]
    // Each is either read the same way or left to Foundation.
    private let leftToFoundation = [
        "http://user:pw@a.test/", "http://[::1]:8080/", "http://a.test/p#frag", "http://a.test/p?", "http://a.test/p?a&&b",
        "http://a.test/p?=x", "http://a.test/%zz", "http://a.test/a b", "ftp+x://a.test/", "http://a.test:0/",
        "http://a.test:99999/", "http://a.test:/", "http://ä.test/", "http://a.test/ä", "http://a_b.test/",
        "mailto:x@a.test", "http:/a.test", "http://a.test/p?a&", "http://a.test/p\\q"
    ]

    func testPlainURLsAreReadAsFoundationReadsThem() {
        for url in urls {
            let plain = UpstreamURL.plainParts(url)
            XCTAssertNotNil(plain, url)
            XCTAssertEqual(plain, UpstreamURL.foundationParts(url), url)
        }
    }

    func testEverythingElseIsLeftToFoundation() {
        for url in leftToFoundation {
            XCTAssertNil(UpstreamURL.plainParts(url), url)
        }
        // And the result is unchanged by which reader ran: same errors, same values.
        XCTAssertThrowsError(try UpstreamURL(parsing: "http://a.test:0/")) { error in
            XCTAssertEqual((error as? LarderError)?.message, "url: port 0 is out of range")
        }
        XCTAssertEqual(try UpstreamURL(parsing: "HTTP://Host.Test:80/a/./b/../c?%61=%41&b").keyString(), "http://host.test/a/c?a=A&b")
    }
}
