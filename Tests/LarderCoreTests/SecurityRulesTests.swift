// Pure rules behind issue 13's fixes: request framing, JSON parsing limits, strict fields,
// the base-path guard and IPv6 forms of refused addresses.

import XCTest

@testable import LarderCore

#if canImport(Glibc)
    import Glibc
#endif

final class RequestFramingTests: XCTestCase {
    private func check(_ fields: [(String, String)]) -> RequestFraming.Rejection? {
        RequestFraming.check(fields.map { (name: $0.0, value: $0.1) })
    }

    func testOrdinaryFieldsPass() {
        XCTAssertNil(check([("Host", "x"), ("Accept", "*/*"), ("X-Tab", "a\tb"), ("Content-Length", "5")]))
        XCTAssertNil(check([("Transfer-Encoding", "chunked")]))
        XCTAssertNil(check([("Content-Length", "5"), ("content-length", "5")]), "repeated identical lengths are one length")
    }

    func testNamesMustBeTokens() {
        XCTAssertEqual(check([("Transfer-Encoding ", "chunked")])?.status, 400)
        XCTAssertEqual(check([("X-A\t", "1")])?.status, 400)
        XCTAssertEqual(check([("X-ATransfer-Encoding: chunked", "a")])?.status, 400)
    }

    func testValuesMustHoldNoControls() {
        XCTAssertEqual(check([("X-A", "a\rb")])?.status, 400)
        XCTAssertEqual(check([("X-A", "a\u{0}b")])?.status, 400)
        XCTAssertEqual(check([("X-A", "a\u{1}b")])?.status, 400)
        XCTAssertEqual(check([("X-A", "a\u{7F}")])?.status, 400)
    }

    func testAmbiguousFramingIsRefused() {
        XCTAssertEqual(check([("Content-Length", "3"), ("Content-Length", "5")])?.status, 400)
        XCTAssertEqual(check([("Content-Length", "3, 5")])?.status, 400)
        XCTAssertEqual(check([("Content-Length", "-1")])?.status, 400)
        XCTAssertEqual(check([("Content-Length", "3"), ("Transfer-Encoding", "chunked")])?.status, 400)
        XCTAssertEqual(check([("Transfer-Encoding", "identity")])?.status, 400)
        XCTAssertEqual(check([("Transfer-Encoding", "chunked, gzip")])?.status, 400)
        XCTAssertEqual(check([("Transfer-Encoding", "gzip, chunked")])?.status, 501)
    }

    func testPrintableEscapesControls() {
        XCTAssertEqual(RequestFraming.printable("/nope\nFORGED"), "/nope\\x0aFORGED")
        XCTAssertEqual(RequestFraming.printable("a\\b"), "a\\\\b")
        XCTAssertEqual(RequestFraming.printable("/plain"), "/plain")
        // Issue 56 item 7: what other readers take for a line end, C1 and bidirectional controls.
        XCTAssertEqual(
            RequestFraming.printable("a\u{85}b\u{2028}c\u{2029}d\u{9B}e\u{202E}f\u{61C}g"), #"a\x85b\u2028c\u2029d\x9be\u202ef\u061cg"#)
        XCTAssertEqual(RequestFraming.printable("© é ‘x’ ←"), "© é ‘x’ ←", "other characters of the same lead bytes stay")
    }
}

final class JSONParserTests: XCTestCase {
    func testParsesEveryKind() throws {
        let value = try JSONParser.parse(Array(#" {"a":[1,-2.5,1e3,true,false,null,"x\u00e9\n\ud83d\ude00"],"b":{}} "#.utf8))
        XCTAssertEqual(
            value,
            .object([
                "a": .array([
                    .number(1), .number(try XCTUnwrap(JSONNumber("-2.5"))), .number(try XCTUnwrap(JSONNumber("1e3"))),
                    .bool(true), .bool(false), .null, .string("x\u{E9}\n\u{1F600}")
                ]), "b": .object([:])
            ]))
        guard case .number(let beyondInt64) = try JSONParser.parse(Array("9223372036854775808".utf8)) else {
            return XCTFail("not a number")
        }
        XCTAssertNil(beyondInt64.int64)
        XCTAssertEqual(beyondInt64.double, 9_223_372_036_854_775_808)
    }

    /// Issue 32 item 8: numbers keep their text in the canonical rendering, so neither the body
    /// sent upstream nor the cache key changes a number a caller wrote.
    func testCanonicalRenderingKeepsEachNumbersText() throws {
        let written =
            #"{ "z" : [12345678901234567890, 0.1000000000000000055511151231257827, 1.0, 1e3, -0, 2E-7],"a":-9223372036854775809 }"#
        XCTAssertEqual(
            String(decoding: try JSONParser.parse(Array(written.utf8)).canonicalBytes, as: UTF8.self),
            #"{"a":-9223372036854775809,"z":[12345678901234567890,0.1000000000000000055511151231257827,1.0,1e3,-0,2E-7]}"#)
        XCTAssertNotEqual(try JSONParser.parse(Array("0.1".utf8)), try JSONParser.parse(Array("0.1000000000000000055511151231257827".utf8)))
        XCTAssertEqual(JSONNumber("1.0")?.int64, nil)
        XCTAssertEqual(JSONNumber("-12")?.int64, -12)
        XCTAssertNil(JSONNumber("1e400"), "beyond Double's range is still refused")
        XCTAssertNil(JSONNumber(" 1"))
    }

    func testRejectsMalformedDocuments() {
        for text in [
            "", "{", "[1,]", "{\"a\":1,}", "01", "1.", "-", "\"\\x\"", "\"\u{1}\"", "[1] 2", "{\"a\" 1}", "tru",
            "\"\\ud800\"", "{\"a\":1,\"a\":2}", "nul", "1e", "[\"a\"", "\"abc"
        ] {
            XCTAssertThrowsError(try JSONParser.parse(Array(text.utf8)), text)
            // The validator (for embedding upstream JSON) accepts duplicate names and lone
            // surrogate escapes, as JSON parsers at large do; the builder refuses them.
            if !["{\"a\":1,\"a\":2}", "\"\\ud800\""].contains(text) { XCTAssertFalse(JSONParser.isValid(Array(text.utf8)), text) }
        }
    }

    func testDepthIsCapped() throws {
        let deep = String(repeating: "[{\"a\":", count: 40) + "1" + String(repeating: "}]", count: 40)
        XCTAssertThrowsError(try JSONParser.parse(Array(deep.utf8)))
        let shallow = String(repeating: "[", count: 64) + String(repeating: "]", count: 64)
        XCTAssertNoThrow(try JSONParser.parse(Array(shallow.utf8)))
        XCTAssertTrue(JSONParser.isValid(Array(deep.utf8)))
        let tooDeep = String(repeating: "[", count: 600) + String(repeating: "]", count: 600)
        XCTAssertFalse(JSONParser.isValid(Array(tooDeep.utf8)))
    }

    func testValidatorAcceptsWhatJSONAccepts() {
        for text in ["{}", "[]", "0", "-0.5e-3", "\"\"", " {\"a\" : [ {\"b\":null} , 2 ] } ", "[[],[{}]]", "\"\\u00e9\\\"\""] {
            XCTAssertTrue(JSONParser.isValid(Array(text.utf8)), text)
        }
    }

    func testLargeJSONBodiesAreNotEmbedded() {
        let big = "[" + Array(repeating: "1", count: 600_000).joined(separator: ",") + "]"
        XCTAssertEqual(BodyKind.classify(contentType: "application/json", body: Array(big.utf8)), .text)
        XCTAssertEqual(BodyKind.classify(contentType: "application/json", body: Array("[1,2]".utf8)), .json)
    }
}

final class StrictFieldsTests: XCTestCase {
    private func error(_ json: String) -> LarderError? {
        do {
            _ = try FetchRequest.parse(json: Array(json.utf8))
            return nil
        } catch {
            return error as? LarderError
        }
    }

    func testUnknownFieldsAreNamedWithASuggestion() {
        let typo = error(#"{"url":"http://a.test/","cache":{"tll":60}}"#)
        XCTAssertEqual(typo?.field, "cache.tll")
        XCTAssertTrue(typo?.message.contains(#"did you mean "ttl"?"#) == true, typo?.message ?? "")
        let misspelt = error(#"{"url":"http://a.test/","cahce":{}}"#)
        XCTAssertEqual(misspelt?.field, "cahce")
        XCTAssertTrue(misspelt?.message.contains(#""cache""#) == true, misspelt?.message ?? "")
        let unrelated = error(#"{"url":"http://a.test/","zzzzzz":1}"#)
        XCTAssertEqual(unrelated?.field, "zzzzzz")
        XCTAssertFalse(unrelated?.message.contains("did you mean") == true)
    }

    func testProxyNamespacesAreReserved() {
        XCTAssertEqual(error(#"{"url":"http://a.test/","cache":{"namespace":"proxy:o"}}"#)?.field, "cache.namespace")
        XCTAssertNil(error(#"{"url":"http://a.test/","cache":{"namespace":"proxies"}}"#))
        // Shown by the CLI and /metrics, and named in a path: no control characters, no dot segments.
        XCTAssertEqual(error(#"{"url":"http://a.test/","cache":{"namespace":"evil\u001b]0;x\u0007"}}"#)?.field, "cache.namespace")
        XCTAssertEqual(error(#"{"url":"http://a.test/","cache":{"namespace":".."}}"#)?.field, "cache.namespace")
        XCTAssertEqual(error(#"{"url":"http://a.test/","cache":{"namespace":"."}}"#)?.field, "cache.namespace")
        XCTAssertNil(error(#"{"url":"http://a.test/","cache":{"namespace":"a..b"}}"#))
    }

    func testDeepBodiesAreRefused() {
        let deep = String(repeating: "[", count: 100) + String(repeating: "]", count: 100)
        XCTAssertEqual(error(#"{"url":"http://a.test/","method":"POST","body":\#(deep)}"#)?.field, "body")
    }
}

final class BasePathGuardTests: XCTestCase {
    private let upstream = NamedUpstream(name: "api", baseURL: "http://a.test/v1")

    private func refusal(_ path: String) throws -> String? {
        upstream.refusal(for: try UpstreamURL(parsing: upstream.url(for: path, cdn: false)!), cdn: false)
    }

    func testPathsThatAnOriginCouldReadAsClimbingOutAreRefused() throws {
        for path in [
            "/../admin", "/..;/admin", "/.%2e;/admin", "/..%2Fadmin", "/..%2fadmin", "/..%5Cadmin", "/x/.;/y", "/%2e%2e/admin", "/a/..;p=1",
            "/a/.;"
        ] {
            XCTAssertNotNil(try refusal(path), path)
        }
        for path in ["/cities", "/a..b/c", "/...", "/x;y=1/z", "/.well-known/x", "/%41", "/x;../y", "/;./y", "/.a;b/c"] {
            XCTAssertNil(try refusal(path), path)
        }
    }
}

final class EmbeddedAddressTests: XCTestCase {
    private func address(_ text: String) -> IPAddress {
        var bytes = [UInt8](repeating: 0, count: 16)
        XCTAssertEqual(inet_pton(AF_INET6, text, &bytes), 1, text)
        return IPAddress(bytes: bytes)!
    }

    func testTranslationFormsOfRefusedAddressesAreRefused() {
        let policy = UpstreamAccessPolicy()
        for text in ["64:ff9b::a9fe:a9fe", "::ffff:0:a9fe:a9fe", "2002:a9fe:a9fe::", "::a9fe:a9fe", "::ffff:169.254.169.254"] {
            XCTAssertNotNil(policy.refusal(forAddress: address(text)), text)
        }
        XCTAssertNil(policy.refusal(forAddress: address("64:ff9b::808:808")), "NAT64 to a public address is fine")
        XCTAssertNil(policy.refusal(forAddress: address("::1")), "loopback only with --deny-private")
        let strict = UpstreamAccessPolicy(denyPrivate: true)
        for text in ["::127.0.0.1", "::1", "64:ff9b::7f00:1", "2002:7f00:1::", "::ffff:0:a00:1", "2001:0:4136:e378::1"] {
            XCTAssertNotNil(strict.refusal(forAddress: address(text)), text)
        }
        XCTAssertNil(strict.refusal(forAddress: address("2606:4700::1111")))
    }
}

final class ResponseValidationTests: XCTestCase {
    private func validation(_ json: String) throws -> ResponseValidation {
        try ResponseValidation.parse(try JSONParser.parse(Array(json.utf8)), path: "validate")
    }

    func testStatusesAndRanges() throws {
        let rule = try validation(#"{"status":[200,[300,399]]}"#)
        XCTAssertNil(rule.failure(status: 200, body: []))
        XCTAssertNil(rule.failure(status: 304, body: []))
        XCTAssertNotNil(rule.failure(status: 201, body: []))
        XCTAssertNotNil(try validation("{}").failure(status: 404, body: []), "200–299 by default")
    }

    func testTemplatesReportTheFirstMismatchAsAPath() throws {
        let rule = try validation(#"{"json":{"data":{"id":"number","items":[{"id":"integer"}]},"ok":"boolean","note":"?string"}}"#)
        XCTAssertNil(rule.failure(status: 200, body: Array(#"{"data":{"id":1.5,"items":[{"id":1},{"id":2}]},"ok":true}"#.utf8)))
        XCTAssertEqual(
            rule.failure(status: 200, body: Array(#"{"data":{"id":1,"items":[{"id":1},{"id":"x"}]},"ok":true}"#.utf8)),
            "$.data.items[1].id: expected integer, got string")
        XCTAssertEqual(rule.failure(status: 200, body: Array(#"{"data":{"id":1,"items":[]}}"#.utf8)), "$.ok: missing")
        XCTAssertEqual(
            rule.failure(status: 200, body: Array(#"{"data":{"id":1,"items":[]},"ok":true,"note":5}"#.utf8)),
            "$.note: expected string, got integer")
        XCTAssertNotNil(rule.failure(status: 200, body: Array("not json".utf8)))
    }

    func testAStatusRangeMayBeGivenHighEndFirst() throws {
        let rule = try validation(#"{"status":[[300,200]]}"#)
        XCTAssertNil(rule.failure(status: 250, body: []))
        XCTAssertNil(rule.failure(status: 300, body: []))
        XCTAssertNotNil(rule.failure(status: 301, body: []))
        XCTAssertNotNil(rule.failure(status: 199, body: []))
    }

    func testInvalidTemplatesNameTheField() {
        for (json, field) in [
            (#"{"status":[99]}"#, "validate.status[0]"), (#"{"status":[[300,600]]}"#, "validate.status[0][1]"),
            (#"{"json":{"a":"float"}}"#, "validate.json.a"), (#"{"json":{"a":["x","y"]}}"#, "validate.json.a"),
            (#"{"jsn":{}}"#, "validate.jsn"), (#"{"status":[]}"#, "validate.status")
        ] {
            XCTAssertThrowsError(try validation(json), json) { XCTAssertEqual(($0 as? LarderError)?.field, field, json) }
        }
    }
}

final class QueryRedactionTests: XCTestCase {
    func testNameSpellingsAServerReadsAsTheNamedOneAreRedactedToo() {
        let redaction = QueryRedaction()
        for (given, expected) in [
            ("https://a.test/p?a=1;token=S", "https://a.test/p?a=1;token=REDACTED"),
            ("https://a.test/p?token[]=S&q=1", "https://a.test/p?token[]=REDACTED&q=1"),
            ("https://a.test/p?+token=S", "https://a.test/p?+token=REDACTED"),
            ("https://a.test/p?token+=S", "https://a.test/p?token+=REDACTED"),
            ("https://a.test/p?token%20=S", "https://a.test/p?token%20=REDACTED"),
            ("https://a.test/p?token%00=S", "https://a.test/p?token%00=REDACTED"),
            ("https://a.test/p?tokens=S&q=a;b", "https://a.test/p?tokens=S&q=a;b")
        ] {
            XCTAssertEqual(redaction.apply(given), expected, given)
        }
    }

    func testNamedQueryValuesAreRedactedAndNothingElse() {
        let redaction = QueryRedaction()
        XCTAssertEqual(redaction.apply("https://a.test/p?api_key=s3cret&q=1"), "https://a.test/p?api_key=REDACTED&q=1")
        XCTAssertEqual(redaction.apply("https://a.test/p?q=1&Token=x&sig=y#frag"), "https://a.test/p?q=1&Token=REDACTED&sig=REDACTED#frag")
        XCTAssertEqual(redaction.apply("https://a.test/p?api%5Fkey=s"), "https://a.test/p?api%5Fkey=REDACTED", "names are percent-decoded")
        XCTAssertEqual(redaction.apply("https://a.test/p?keys=1&monkey=2"), "https://a.test/p?keys=1&monkey=2")
        XCTAssertEqual(redaction.apply("https://a.test/key?x=1"), "https://a.test/key?x=1")
        XCTAssertEqual(QueryRedaction(names: []).apply("https://a.test/p?token=t"), "https://a.test/p?token=t")
        XCTAssertEqual(
            redaction.apply("https://a.test/p?&token==x=y&&key&sig=REDACTED&q=%C3%A9#a?key=1"),
            "https://a.test/p?&token=REDACTED&&key&sig=REDACTED&q=%C3%A9#a?key=1",
            "empty pairs, a value holding '=', a name without a value and the fragment are kept")
        XCTAssertEqual(redaction.apply("https://a.test/p?"), "https://a.test/p?")
        XCTAssertEqual(redaction.apply("https://a.test/p?KEY="), "https://a.test/p?KEY=REDACTED")
    }
}

/// BrowserRequestRules: which Host a server answers to, which Origin is its own, which body
/// type a browser may send.
final class BrowserRequestRulesTests: XCTestCase {
    private let loopback = BrowserRequestRules(serverNames: ["Larder.Internal", "*.cache.example"], boundToLoopback: true)

    private func refusal(_ headers: [(String, String)], method: String = "POST", body: Bool = true) -> String? {
        loopback.refusal(method: method, headers: headers.map { (name: $0.0, value: $0.1) }, hasBody: body, scheme: "http")?.code.rawValue
    }

    func testHostNamesThisServerOrALoopbackLiteral() {
        for host in [
            "127.0.0.1", "127.9.9.9:80", "[::1]:8080", "[::1]", "127.0.0.1.", "localhost", "LOCALHOST:1", "larder.internal.",
            "a.b.cache.example", "Larder.Internal:8080"
        ] {
            XCTAssertTrue(loopback.accepts(host: host), host)
        }
        for host in [
            "10.0.0.1", "cache.example", "evil.example", "larder.internal.evil", "[::1", "127.0.0.1:x", "", "a@127.0.0.1", "².0.0.1",
            "１２７.0.0.1", "2130706433", "localhost:+80", "localhost:-1", "127.0.0.1:65536", "127.0.0", "127.0.0.256",
            "127.0.0.1.1", "1270.0.0.1", "127..0.1", "[::1]x", "[::1]:", "127.0.0.1:", ".", ":80"
        ] {
            XCTAssertFalse(loopback.accepts(host: host), host)
        }
        let wide = BrowserRequestRules(serverNames: [], boundToLoopback: false)
        XCTAssertTrue(wide.acceptsAnyName)
        XCTAssertTrue(wide.accepts(host: "10.0.0.1:8080"))
        XCTAssertTrue(wide.accepts(host: "larder.svc"), "nothing configured beyond loopback: any name")
        let named = BrowserRequestRules(serverNames: ["larder.svc"], boundToLoopback: false)
        XCTAssertFalse(named.accepts(host: "evil.example"))
        // Only a valid IPv6 address is a literal: a name with colons is matched as names are.
        for host in ["a:b:80", "[a:x]", "[evil.example]", "[::1::2]"] { XCTAssertFalse(named.accepts(host: host), host) }
        XCTAssertTrue(named.accepts(host: "[2001:db8::1]:8080"), "an address, not bound to loopback")
        XCTAssertTrue(loopback.accepts(host: "[0:0::1]"), "::1 written another way")
        XCTAssertFalse(loopback.accepts(host: "[::2]"))
    }

    func testAnOriginIsTheRequestsOwnByItsHostAndPort() {
        func same(_ origin: String, _ host: String?, _ scheme: String = "http") -> Bool {
            BrowserRequestRules.isSameOrigin(origin, host: host, scheme: scheme)
        }
        XCTAssertTrue(same("http://127.0.0.1:8080", "127.0.0.1:8080"))
        XCTAssertTrue(same("http://LOCALHOST", "localhost:80"), "the scheme's default port")
        XCTAssertTrue(same("https://larder.internal", "larder.internal:443", "https"))
        XCTAssertFalse(same("https://larder.internal", "larder.internal:443"), "another scheme than the listener's")
        XCTAssertFalse(same("http://127.0.0.1:8443", "127.0.0.1:8443", "https"))
        XCTAssertFalse(same("http://127.0.0.1:8081", "127.0.0.1:8080"))
        XCTAssertFalse(same("http://127.0.0.1:8080.evil.example", "127.0.0.1:8080"))
        XCTAssertFalse(same("null", "127.0.0.1"))
        XCTAssertFalse(same("file://127.0.0.1", "127.0.0.1"))
        XCTAssertFalse(same("http://127.0.0.1", nil))
    }

    func testABrowsersBodyMustBeJSONAndOtherClientsAreNotAsked() {
        let page = [("Host", "127.0.0.1"), ("Origin", "http://127.0.0.1")]
        XCTAssertEqual(refusal(page + [("Content-Type", "text/plain")]), "unsupported_media_type")
        XCTAssertEqual(refusal(page + [("Content-Type", "application/jsonx")]), "unsupported_media_type")
        XCTAssertEqual(refusal(page), "unsupported_media_type", "no type at all")
        XCTAssertNil(refusal(page + [("content-type", "Application/JSON; charset=utf-8")]))
        XCTAssertNil(refusal(page + [("Content-Type", "application/merge-patch+json")]))
        XCTAssertNil(refusal(page, body: false))
        XCTAssertEqual(
            refusal([("Host", "127.0.0.1"), ("SEC-FETCH-MODE", "no-cors"), ("Content-Type", "text/plain")]), "unsupported_media_type")
        XCTAssertNil(refusal([("Host", "127.0.0.1"), ("Content-Type", "application/x-www-form-urlencoded")]), "curl -d")
        XCTAssertEqual(refusal([("Host", "127.0.0.1"), ("Sec-Fetch-Site", "Cross-Site")], method: "GET", body: false), "cross_site_refused")
        XCTAssertNil(refusal([("Host", "127.0.0.1"), ("Sec-Fetch-Site", "none")], method: "GET", body: false))
        XCTAssertEqual(
            refusal([("Host", "127.0.0.1"), ("Sec-Fetch-Site", "cross-site, same-origin")], method: "GET", body: false),
            "cross_site_refused",
            "a field is one token, not a list")
        XCTAssertEqual(refusal([("Host", "evil.example"), ("Host", "localhost")], method: "GET", body: false), "host_not_allowed")
        XCTAssertEqual(
            refusal([("Host", "127.0.0.1"), ("Origin", "http://evil.example"), ("Origin", "http://127.0.0.1")]), "cross_site_refused")
        let proxied = loopback.refusal(
            method: "POST", headers: [("Host", "127.0.0.1"), ("Origin", "https://shop.example")].map { (name: $0.0, value: $0.1) },
            hasBody: true, scheme: "http", checks: .host)
        XCTAssertNil(proxied, "the proxy checks the Host alone")
    }
}

/// An upstream URL's host is the ASCII one libcurl connects to: what URL parsing maps by IDNA
/// (fullwidth and superscript digits, compatibility letters) is checked and keyed as mapped, and
/// what stays non-ASCII or percent-encoded is refused, so no rule sees a host other than curl's.
final class UpstreamHostTests: XCTestCase {
    func testAHostIsCheckedAsTheASCIIHostItReachesOrRefused() throws {
        let mapped = ["http://１２７.0.0.1:9000/x": "127.0.0.1", "http://²7.0.0.1/": "27.0.0.1", "http://ⅼocalhost/": "localhost"]
        for (url, host) in mapped {
            XCTAssertEqual(try UpstreamURL(parsing: url).host, host, url)
        }
        for url in ["http://bücher.example/", "http://%31%32%37.0.0.1/"] {
            XCTAssertThrowsError(try UpstreamURL(parsing: url), url) { error in
                XCTAssertEqual((error as? LarderError)?.field, "url", url)
            }
        }
        XCTAssertEqual(try? UpstreamURL(parsing: "http://xn--bcher-kva.example/").host, "xn--bcher-kva.example", "punycode passes")
    }
}
