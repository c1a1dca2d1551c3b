import Foundation
import LarderCore
import XCTest

final class FetchRequestParsingTests: XCTestCase {
    private func parse(_ json: String) throws -> FetchRequest {
        try FetchRequest.parse(json: Array(json.utf8))
    }

    private func field(_ json: String) -> String? {
        do {
            _ = try parse(json)
            return nil
        } catch {
            return (error as? LarderError)?.field
        }
    }

    func testDefaults() throws {
        let request = try parse(#"{"url":"http://a.test/x"}"#)
        XCTAssertEqual(request.method, .get)
        XCTAssertEqual(request.timeoutMs, 30_000)
        XCTAssertEqual(request.cache, CacheOptions())
        XCTAssertNil(request.body)
    }

    func testFullRequest() throws {
        let request = try parse(
            #"""
            {"url":"http://a.test/x?b=1","method":"post","query":{"c":"2"},"headers":{"X-A":"1"},"body":{"k":[1,2.5,null,true]},
             "timeoutMs":500,
             "cache":{"policy":"cache-else-load","ttl":1.5,"version":7,"sensitive":{"u":1},"ignoreQuery":["ts"],"namespace":"n"}}
            """#)
        XCTAssertEqual(request.method, .post)
        XCTAssertEqual(request.url.absoluteString, "http://a.test/x?b=1&c=2")
        XCTAssertEqual(request.body.map { String(decoding: $0, as: UTF8.self) }, #"{"k":[1,2.5,null,true]}"#)
        XCTAssertEqual(request.headers.values("content-type"), ["application/json"])
        XCTAssertEqual(request.timeoutMs, 500)
        XCTAssertEqual(request.cache.policy, .cacheElseLoad)
        XCTAssertEqual(request.cache.ttl, 1.5)
        XCTAssertEqual(request.cache.version, 7)
        XCTAssertEqual(request.cache.sensitive, .object(["u": .number(1)]))
        XCTAssertEqual(request.cache.ignoreQuery, ["ts"])
        XCTAssertEqual(request.cache.namespace, "n")
    }

    func testErrorsNameTheField() {
        XCTAssertEqual(field("{"), "body")
        XCTAssertEqual(field("42"), "body")
        XCTAssertEqual(field("{}"), "url")
        XCTAssertEqual(field(#"{"url":"ftp://a.test/"}"#), "url")
        XCTAssertEqual(field(#"{"url":"http://a.test/","method":"TRACE"}"#), "method")
        XCTAssertEqual(field(#"{"url":"http://a.test/","cache":{"policy":"x"}}"#), "cache.policy")
        XCTAssertEqual(field(#"{"url":"http://a.test/","cache":{"version":"1"}}"#), "cache.version")
        XCTAssertEqual(field(#"{"url":"http://a.test/","cache":{"version":1.5}}"#), "cache.version")
        XCTAssertEqual(field(#"{"url":"http://a.test/","cache":{"ignoreQuery":"ts"}}"#), "cache.ignoreQuery")
        XCTAssertEqual(field(#"{"url":"http://a.test/","timeoutMs":700000}"#), "timeoutMs")
        XCTAssertEqual(field(#"{"url":"http://a.test/","headers":{"Connection":"close"}}"#), "headers.Connection")
        XCTAssertEqual(field(#"{"url":"http://a.test/","headers":{"Proxy-Foo":"1"}}"#), "headers.Proxy-Foo")
        XCTAssertEqual(field(#"{"url":"http://a.test/","method":"HEAD","body":1}"#), "body")
        XCTAssertEqual(field(#"{"url":"http://a.test/","cache":{"version":9007199254740992}}"#), "cache.version")
        XCTAssertEqual(field(#"{"url":"http://a.test/","cache":{"ttl":4e16}}"#), "cache.ttl")
        XCTAssertEqual(field(#"{"url":"http://a.test/","validate":{"status":[[300,600]]}}"#), "validate.status[0][1]")
    }

    /// A member of one type given as null is refused (the spec does not allow it); members that
    /// take any JSON value (`body`, `sensitive`) read null as absent.
    func testNullIsRefusedForTypedMembersAndAbsentForAnyValueMembers() throws {
        XCTAssertEqual(field(#"{"url":"http://a.test/","timeoutMs":null}"#), "timeoutMs")
        XCTAssertEqual(field(#"{"url":"http://a.test/","cache":{"tags":null}}"#), "cache.tags")
        XCTAssertEqual(field(#"{"url":"http://a.test/","validate":null}"#), "validate")
        XCTAssertEqual(field(#"{"url":"http://a.test/","validate":{"json":null}}"#), "validate.json")
        let request = try parse(#"{"url":"http://a.test/","body":null,"cache":{"sensitive":null}}"#)
        XCTAssertNil(request.body)
        XCTAssertNil(request.cache.sensitive)
        // The largest version every JSON reader holds exactly, written as an integer or a double.
        XCTAssertEqual(try parse(#"{"url":"http://a.test/","cache":{"version":9007199254740991}}"#).cache.version, 9_007_199_254_740_991)
        XCTAssertEqual(try parse(#"{"url":"http://a.test/","cache":{"version":9007199254740990.0}}"#).cache.version, 9_007_199_254_740_990)
    }
}

final class EnvelopeTests: XCTestCase {
    private func report(_ outcome: CacheOutcome = .hit, ttl: Double? = 288) -> CacheReport {
        CacheReport(outcome: outcome, key: CacheKey(hex: "ab"), age: 12.7, ttl: ttl, version: 2, stored: true)
    }

    private func decode(_ bytes: [UInt8]) throws -> [String: Any] {
        try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any])
    }

    func testJSONBodiesAreEmbedded() throws {
        let headers = ResponseHeaders.renderJSON(
            [
                HeaderField("Content-Type", "application/json"), HeaderField("X-Multi", "a"),
                HeaderField("x-multi", "b"), HeaderField("Connection", "close, X-Hop"),
                HeaderField("X-Hop", "1"), HeaderField("Set-Cookie", "s=1")
            ], dropCookies: true)
        let body = Array(#"{"n":[1,2],"s":"é"}"#.utf8)
        let document = try decode(
            Envelope.render(
                status: 200, headersJSON: headers, body: body, kind: .json, cache: report(),
                totalMs: 0.4567, upstreamMs: nil))
        XCTAssertEqual(document["status"] as? Int, 200)
        XCTAssertEqual(document["headers"] as? [String: String], ["content-type": "application/json", "x-multi": "a, b"])
        XCTAssertEqual((document["body"] as? [String: Any])?["s"] as? String, "é")
        let cache = try XCTUnwrap(document["cache"] as? [String: Any])
        XCTAssertEqual(cache["outcome"] as? String, "hit")
        XCTAssertEqual(cache["age"] as? Int, 12)
        XCTAssertEqual(cache["ttl"] as? Int, 288)
        XCTAssertEqual((document["timing"] as? [String: Any])?["totalMs"] as? Double, 0.457)
        XCTAssertTrue((document["timing"] as? [String: Any])?["upstreamMs"] is NSNull)
    }

    func testStoredHeadersRenderedAndParsedInOnePassMatchTheRoundTrip() {
        // An entry keeps its headers as JSON (for the store) and as fields (for the proxy);
        // a new entry gets both from one pass, an entry read back parses the JSON.
        let headers = [
            HeaderField("Content-Type", "application/json"), HeaderField("X-Multi", "a"), HeaderField("x-multi", "b"),
            HeaderField("Connection", "close, X-Hop"), HeaderField("X-Hop", "1"), HeaderField("Set-Cookie", "s=1"),
            HeaderField("ETag", "\"q\\\"uoted\""), HeaderField("X-Text", "é, ☃, tab\there"), HeaderField("Age", "3")
        ]
        for dropCookies in [true, false] {
            let json = ResponseHeaders.renderJSON(headers, dropCookies: dropCookies)
            let rendered = ResponseHeaders.rendered(headers, dropCookies: dropCookies)
            XCTAssertEqual(rendered.json, json)
            XCTAssertEqual(rendered.fields.map(\.name), rendered.fields.map(\.name).sorted())
            XCTAssertEqual(rendered.fields, ResponseHeaders.parseJSON(json))
            XCTAssertEqual(rendered.fields.first { $0.name == "x-multi" }?.value, "a, b")
            XCTAssertEqual(rendered.fields.contains { $0.name == "set-cookie" }, !dropCookies)
            XCTAssertFalse(rendered.fields.contains { $0.name == "x-hop" || $0.name == "connection" })
        }
        // Past 32 fields the repeats are found through an index: the same result as the scan.
        let many = (0..<40).map { HeaderField("X-F\($0 % 20)", "v\($0)") } + [HeaderField("Connection", "x-f3")]
        let combined = ResponseHeaders.rendered(many, dropCookies: true).fields
        XCTAssertEqual(combined.count, 19, "20 names, one nominated by Connection")
        XCTAssertEqual(combined.first { $0.name == "x-f7" }?.value, "v7, v27")
        // Anything but an object of strings reads as no fields.
        for bad in [
            "", "[]", "{\"a\":1}", "{\"a\":{\"b\":\"c\"}}", "{\"a\":\"b\"", "null", "{\"a\":\"b\",\"a\":\"c\"}", "{\"a\":\"b\"} x",
            "{\"a\":\"b\",}", "{\"a\":\"\u{01}\"}", "{\"a\" \"b\"}", "{\"a\":\"\\ud800\"}"
        ] {
            XCTAssertEqual(ResponseHeaders.parseJSON(Array(bad.utf8)), [], bad)
        }
        XCTAssertEqual(ResponseHeaders.parseJSON(Array(#"{"b":"2","a":"1\u00e9"}"#.utf8)), [HeaderField("a", "1é"), HeaderField("b", "2")])
        XCTAssertEqual(
            ResponseHeaders.parseJSON(Array(" { \"b\" : \"\\\"x\\n\" , \"a\":\"\"} ".utf8)),
            [HeaderField("a", ""), HeaderField("b", "\"x\n")])
        XCTAssertEqual(ResponseHeaders.parseJSON(Array("{}".utf8)), [])
        XCTAssertEqual(
            JSONParser.stringMembers(Array(#"{"z":"1","y":"2","z":"3"}"#.utf8))?.map(\.name), ["z", "y", "z"], "in document order")
    }

    func testAnArrayOfStringsIsReadWithoutBuildingValues() {
        func strings(_ text: String) -> [String]? { Array(text.utf8).withUnsafeBufferPointer { JSONParser.strings($0) } }
        XCTAssertEqual(strings(#"["t4"]"#), ["t4"])
        XCTAssertEqual(strings(#" [ "b" , "a\u00e9", "a" ] "#), ["b", "aé", "a"], "in document order, escapes read")
        XCTAssertEqual(strings("[]"), [])
        for bad in ["", "{}", "[1]", #"["a",]"#, #"["a""#, #"["a"] x"#, #"[["a"]]"#, #"["a" "b"]"#, "null"] {
            XCTAssertNil(strings(bad), bad)
        }
    }

    func testTextAndBinaryBodiesAreEscaped() throws {
        let text = try decode(
            Envelope.render(
                status: 200, headersJSON: Array("{}".utf8), body: Array("a\"b\\c\n\u{1}".utf8), kind: .text,
                cache: report(ttl: nil), totalMs: 1, upstreamMs: 2))
        XCTAssertEqual(text["bodyText"] as? String, "a\"b\\c\n\u{1}")
        XCTAssertTrue((text["cache"] as? [String: Any])?["ttl"] is NSNull)
        let binary = try decode(
            Envelope.render(
                status: 200, headersJSON: Array("{}".utf8), body: [0, 255], kind: .binary,
                cache: report(), totalMs: 1, upstreamMs: 2))
        XCTAssertEqual(binary["bodyBase64"] as? String, "AP8=")
    }

    func testBodyClassification() {
        XCTAssertEqual(BodyKind.classify(contentType: "application/json; charset=utf-8", body: Array("[1]".utf8)), .json)
        XCTAssertEqual(BodyKind.classify(contentType: "application/problem+json", body: Array("{}".utf8)), .json)
        XCTAssertEqual(BodyKind.classify(contentType: "application/json", body: Array("{oops".utf8)), .text)
        XCTAssertEqual(BodyKind.classify(contentType: "text/plain", body: Array("[1]".utf8)), .text)
        XCTAssertEqual(BodyKind.classify(contentType: nil, body: [0xFF, 0xFE]), .binary)
        XCTAssertEqual(BodyKind.classify(contentType: "application/json", body: []), .text)
    }

    func testErrorBody() throws {
        let document = try decode(LarderError.invalid("cache.ttl", "must be \"positive\"").jsonBody)
        let error = try XCTUnwrap(document["error"] as? [String: Any])
        XCTAssertEqual(error["code"] as? String, "invalid_request")
        XCTAssertEqual(error["field"] as? String, "cache.ttl")
        XCTAssertEqual(error["message"] as? String, "cache.ttl: must be \"positive\"")
        XCTAssertEqual(LarderError(.upstreamTimeout, "").status, 504)
        XCTAssertEqual(LarderError(.upstreamForbidden, "").status, 403)
    }
}

final class DocumentationTests: XCTestCase {
    /// Every error code Larder can send is documented in the OpenAPI spec and docs/api.md.
    func testEveryErrorCodeIsDocumented() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let spec = try String(contentsOf: root.appendingPathComponent("openapi/larder.yaml"), encoding: .utf8)
        let readme = try String(contentsOf: root.appendingPathComponent("docs/api.md"), encoding: .utf8)
        for code in LarderError.Code.allCases {
            XCTAssertTrue(spec.contains(code.rawValue), "\(code.rawValue) missing from openapi/larder.yaml")
            XCTAssertTrue(readme.contains("`\(code.rawValue)`"), "\(code.rawValue) missing from docs/api.md")
        }
    }

    func testFieldBytesRoundTripExactly() {
        for bytes: [UInt8] in [Array("plain".utf8), Array("caf\u{E9}".utf8), [0x61, 0xFC, 0x62], [0xC3], [0xEF, 0x9F, 0xBC]] {
            XCTAssertEqual(FieldBytes.bytes(FieldBytes.string(bytes)), bytes, "\(bytes)")
        }
        XCTAssertEqual(FieldBytes.string(Array("caf\u{E9}".utf8)), "caf\u{E9}", "valid UTF-8 stays text")
        XCTAssertFalse(FieldBytes.hasRawBytes("caf\u{E9}"))
        XCTAssertTrue(FieldBytes.hasRawBytes(FieldBytes.string([0x61, 0xFC])))
    }
}

/// The byte-level helpers every request and response passes through: each fast path (contiguous
/// bytes) must agree with the plain definition.
final class TextHelperTests: XCTestCase {
    func testJSONStringsEscapeExactlyWhatRFC8259Requires() {
        func rendered(_ text: String) -> String {
            var out: [UInt8] = []
            JSONWriter.appendString(text, to: &out)
            return String(decoding: out, as: UTF8.self)
        }
        XCTAssertEqual(rendered(""), #""""#)
        XCTAssertEqual(rendered("plain"), #""plain""#)
        XCTAssertEqual(rendered("a\"b\\c\nd\re\tf\u{1}g\u{7F}"), #""a\"b\\c\nd\re\tf\u0001g\u007f""#)
        XCTAssertEqual(rendered("\"caf\u{E9} \u{1F600}\""), #""\"caf\#u{E9} \#u{1F600}\"""#)
        let long = String(repeating: "x\"", count: 40) + "\n"
        XCTAssertEqual(rendered(long), "\"" + String(repeating: "x\\\"", count: 40) + "\\n\"")
        // Contiguous bytes and any other sequence of bytes escape alike.
        let bytes: [UInt8] = (0...255).map(UInt8.init) + Array("tail".utf8)
        var fast: [UInt8] = []
        var slow: [UInt8] = []
        bytes.withUnsafeBufferPointer { JSONWriter.appendEscaped($0, to: &fast) }
        JSONWriter.appendEscaped(bytes.lazy.map { $0 }, to: &slow)
        XCTAssertEqual(fast, slow)
        // 260 bytes; 29 control bytes and DEL grow by 5 (\u00XX), \n \r \t " and \ by 1.
        XCTAssertEqual(fast.count, 260 + 30 * 5 + 5 * 1)
    }

    func testTrimmingSpacesRemovesOnlySpacesAndTabsAtTheEnds() {
        XCTAssertEqual(" \t a b \t ".trimmingSpaces, "a b")
        XCTAssertEqual("plain".trimmingSpaces, "plain")
        XCTAssertEqual("   ".trimmingSpaces, "")
        XCTAssertEqual("".trimmingSpaces, "")
        XCTAssertEqual("\n x \r".trimmingSpaces, "\n x \r", "only OWS, not other whitespace")
        XCTAssertEqual(" caf\u{E9} \u{1F600} ".trimmingSpaces, "caf\u{E9} \u{1F600}")
        XCTAssertEqual("\u{A0}x\u{A0}".trimmingSpaces, "\u{A0}x\u{A0}", "a no-break space is not OWS")
        // A substring trims within its own bounds, not its base string's.
        let line = "a:  v w\t;b"
        let value = line[line.index(line.startIndex, offsetBy: 2)..<line.index(line.endIndex, offsetBy: -2)]
        XCTAssertEqual(value.trimmingSpaces, "v w")
        XCTAssertEqual(line[line.startIndex..<line.index(line.startIndex, offsetBy: 1)].trimmingSpaces, "a")
    }

    func testHTTPDateNamesIgnoreASCIICaseOnly() {
        let expected = 784_111_777.0
        XCTAssertEqual(HTTPDate.parse("\tSun, 06 Nov 1994 08:49:37 GMT\t"), expected, "tabs are OWS too")
        XCTAssertEqual(HTTPDate.parse("sUNDAY, 06-nOV-94 08:49:37 Gmt"), expected)
        XCTAssertEqual(HTTPDate.parse("SUN NOV  6 08:49:37 1994"), expected)
        for month in ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"].enumerated() {
            let parsed = HTTPDate.parse("Mon, 01 \(month.element) 2029 00:00:00 GMT")
            XCTAssertEqual(parsed.map(HTTPDate.format).map { String($0.dropFirst(8).prefix(3)) }, month.element)
        }
        for invalid in [
            "Sun, 06 N\u{D6}v 1994 08:49:37 GMT", "Sux, 06 Nov 1994 08:49:37 GMT", "Sun, 06 Nov 1994 08:49:37 GMX",
            "Sundax, 06-Nov-94 08:49:37 GMT", "Sun, 0x Nov 1994 08:49:37 GMT", "Sun, 06 Nov 1994 08:49:3 GMT ",
            "Sun, 06 Nov 1994 08-49:37 GMT", "Sun Nov 6 08:49:37 1994", "Sun Nov  6 08:49:37 199", ",", "Sun,"
        ] {
            XCTAssertNil(HTTPDate.parse(invalid), invalid)
        }
    }

    func testASCIICaseHelpersLeaveOtherBytesAlone() {
        XCTAssertEqual("Content-Type".lowercasedASCII, "content-type")
        XCTAssertEqual("already-lower".lowercasedASCII, "already-lower")
        XCTAssertEqual("X-\u{C4}RGER-\u{212A}".lowercasedASCII, "x-\u{C4}rger-\u{212A}", "only A–Z change")
        XCTAssertEqual(String(repeating: "ABC", count: 30).lowercasedASCII, String(repeating: "abc", count: 30))
        XCTAssertTrue("Cache-Control".caseInsensitiveEquals("cache-CONTROL"))
        XCTAssertFalse("Cache-Control".caseInsensitiveEquals("cache-controls"))
        XCTAssertFalse("a[".caseInsensitiveEquals("a{"), "[ and { differ by the case bit but are not letters")
        XCTAssertFalse("\u{C4}".caseInsensitiveEquals("\u{E4}"), "non-ASCII is compared exactly")
        XCTAssertTrue(String(repeating: "Ab", count: 20).caseInsensitiveEquals(String(repeating: "aB", count: 20)))
    }

    func testASCIIFieldBytesAreReadAsText() {
        XCTAssertEqual(FieldBytes.string(Array("text/html; charset=utf-8".utf8)), "text/html; charset=utf-8")
        XCTAssertEqual(FieldBytes.string([]), "")
        XCTAssertFalse(FieldBytes.hasRawBytes(String(repeating: "a", count: 100)))
        XCTAssertTrue(FieldBytes.hasRawBytes(String(repeating: "a", count: 100) + FieldBytes.string([0xFF])))
    }
}
