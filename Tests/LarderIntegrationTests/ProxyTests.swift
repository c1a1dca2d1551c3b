// The reverse-proxy route as a shared cache (RFC 9111), end to end.

import Foundation
import LarderCore
import LarderService
import LarderServiceTesting
import LarderSync
import XCTest

final class ProxyTests: IntegrationTestCase {
    private func startProxy(_ configure: (inout LarderConfiguration) -> Void = { _ in }) throws -> RunningLarder {
        try startLarder { configuration in
            configuration.upstreams = [NamedUpstream(name: "origin", baseURL: origin.base + "/base")]
            configure(&configuration)
        }
    }

    func testResponsesPassAsTheyAreAndHitsNeverReachTheOrigin() throws {
        let larder = try startProxy()
        let client = try larder.connection()
        let path = uniquePath()
        let first = try client.request("GET", "/proxy/origin\(path)?q=1&cc=max-age%3D60&h=X-Origin:yes")
        XCTAssertEqual(first.status, 200)
        XCTAssertEqual(first.headers["content-type"], "application/json")
        XCTAssertEqual(first.headers["x-origin"], "yes")
        XCTAssertEqual(first.headers["cache-control"], "max-age=60")
        XCTAssertEqual(first.headers["age"], "0")
        XCTAssertEqual(first.headers["cache-status"], "larder; fwd=uri-miss; fwd-status=200; stored; ttl=60")
        let document = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(first.body)) as? [String: Any])
        XCTAssertEqual(document["path"] as? String, "/base\(path)", "no envelope: the origin's own body")
        XCTAssertEqual(origin.requests("/base\(path)").first?.target, "/base\(path)?q=1&cc=max-age%3D60&h=X-Origin:yes")

        clock.advance(by: 10)
        let hit = try client.request("GET", "/proxy/origin\(path)?q=1&cc=max-age%3D60&h=X-Origin:yes")
        XCTAssertEqual(hit.status, 200)
        XCTAssertEqual(hit.body, first.body)
        XCTAssertEqual(hit.headers["age"], "10")
        XCTAssertEqual(hit.headers["cache-status"], "larder; hit; ttl=50")
        XCTAssertEqual(hit.headers["x-origin"], "yes")
        XCTAssertEqual(hit.headers["date"], first.headers["date"], "the stored Date is never rewritten")
        XCTAssertEqual(origin.count("/base\(path)"), 1)
    }

    func testUnknownUpstream() throws {
        let larder = try startProxy()
        let unknown = try larder.connection().request("GET", "/proxy/nobody/x")
        XCTAssertEqual(unknown.status, 404)
        XCTAssertEqual(unknown.errorCode, "unknown_upstream")
    }

    func testHopByHopFieldsAreNeitherForwardedNorPassedOn() throws {
        let larder = try startProxy()
        let client = try larder.connection()
        let path = uniquePath()
        let response = try client.request(
            "GET", "/proxy/origin\(path)?cc=max-age%3D60&h=Connection:X-Hop&h=X-Hop:1&h=Keep-Alive:timeout%3D5&h=X-End:2",
            headers: [
                "Connection": "X-Private", "X-Private": "secret", "Keep-Alive": "timeout=5",
                "TE": "trailers", "Proxy-Authorization": "Basic eA==", "X-Kept": "1"
            ])
        let received = try XCTUnwrap(origin.requests("/base\(path)").first)
        for name in ["x-private", "keep-alive", "te", "proxy-authorization"] {
            XCTAssertNil(received.headers[name], name)
        }
        XCTAssertEqual(received.headers["x-kept"], "1")
        XCTAssertNil(response.headers["x-hop"])
        XCTAssertNil(response.headers["keep-alive"])
        XCTAssertEqual(response.headers["x-end"], "2")
        let hit = try client.request(
            "GET", "/proxy/origin\(path)?cc=max-age%3D60&h=Connection:X-Hop&h=X-Hop:1&h=Keep-Alive:timeout%3D5&h=X-End:2")
        XCTAssertTrue(hit.headers["cache-status"]?.contains("hit") ?? false)
        XCTAssertNil(hit.headers["x-hop"], "not stored either")
        XCTAssertEqual(hit.headers["x-end"], "2")
    }

    func testHeadIsAnsweredFromAStoredGet() throws {
        let larder = try startProxy()
        let client = try larder.connection()
        let path = uniquePath()
        let target = "/proxy/origin\(path)?cc=max-age%3D60"
        let get = try client.request("GET", target)
        let head = try client.request("HEAD", target)
        XCTAssertEqual(head.status, 200)
        XCTAssertTrue(head.body.isEmpty)
        XCTAssertTrue(head.headers["cache-status"]?.hasPrefix("larder; hit") ?? false)
        XCTAssertEqual(head.headers["content-type"], get.headers["content-type"])
        XCTAssertEqual(head.headers["content-length"], String(get.body.count), "RFC 9110 §8.6: the length a GET gets")
        XCTAssertEqual(origin.requests("/base\(path)").map(\.method), ["GET"])

        let cold = uniquePath("cold")
        let coldHead = try client.request("HEAD", "/proxy/origin\(cold)?fill=777")
        XCTAssertEqual(coldHead.status, 200)
        XCTAssertEqual(coldHead.headers["content-length"], "777", "the upstream's, not 0")
        XCTAssertEqual(try client.request("GET", "/proxy/origin\(path)?cc=max-age%3D60").status, 200, "the connection goes on")
        XCTAssertEqual(origin.requests("/base\(cold)").map(\.method), ["HEAD"])
    }

    func testConditionalRequestsAreAnsweredWith304() throws {
        let larder = try startProxy()
        let client = try larder.connection()
        let path = uniquePath()
        let target = "/proxy/origin\(path)?cc=max-age%3D60&etag=%22v1%22"
        // A cold conditional request: the origin is asked unconditionally (so the response
        // can be stored), and Larder answers the condition itself.
        let cold = try client.request("GET", target, headers: ["If-None-Match": "\"v1\""])
        XCTAssertEqual(cold.status, 304)
        XCTAssertTrue(cold.body.isEmpty)
        XCTAssertEqual(cold.headers["etag"], "\"v1\"")
        XCTAssertNil(origin.requests("/base\(path)").first?.headers["if-none-match"])
        let warm = try client.request("GET", target, headers: ["If-None-Match": "W/\"v0\", W/\"v1\""])
        XCTAssertEqual(warm.status, 304)
        let changed = try client.request("GET", target, headers: ["If-None-Match": "\"v2\""])
        XCTAssertEqual(changed.status, 200)
        XCTAssertFalse(changed.body.isEmpty)
        XCTAssertEqual(origin.count("/base\(path)"), 1)
    }

    func testIfModifiedSinceFallsBackToDateWithoutLastModified() throws {
        // RFC 9111 §4.3.2: without Last-Modified, the stored Date is the modification time.
        let larder = try startProxy()
        let client = try larder.connection()
        let path = uniquePath()
        let target = "/proxy/origin\(path)?cc=max-age%3D60"
        let first = try client.request("GET", target)
        let date = try XCTUnwrap(first.headers["date"])
        XCTAssertEqual(try client.request("GET", target, headers: ["If-Modified-Since": date]).status, 304)
        // The same instant in the obsolete RFC 850 form (RFC 9110 §5.6.7).
        let stamp = try XCTUnwrap(HTTPDate.parse(date))
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEEE, dd-MMM-yy HH:mm:ss 'GMT'"
        let rfc850 = formatter.string(from: Date(timeIntervalSince1970: stamp))
        XCTAssertEqual(try client.request("GET", target, headers: ["If-Modified-Since": rfc850]).status, 304, rfc850)
        XCTAssertEqual(try client.request("GET", target, headers: ["If-Modified-Since": HTTPDate.format(stamp - 60)]).status, 200)
        XCTAssertEqual(origin.count("/base\(path)"), 1)
    }

    func testRangesAreCutFromTheStoredFullResponse() throws {
        let larder = try startProxy()
        let client = try larder.connection()
        let path = uniquePath()
        let target = "/proxy/origin\(path)?cc=max-age%3D60&size=100&etag=%22r1%22"
        let first = try client.request("GET", target, headers: ["Range": "bytes=10-19"])
        XCTAssertEqual(first.status, 206)
        XCTAssertEqual(first.headers["content-range"], "bytes 10-19/100")
        XCTAssertEqual(first.body.count, 10)
        XCTAssertEqual(
            origin.requests("/base\(path)").first?.headers["range"], "bytes=10-19",
            "only the range is asked for; this origin answers whole, and the whole is stored")
        let suffix = try client.request("GET", target, headers: ["Range": "bytes=-5"])
        XCTAssertEqual(suffix.status, 206)
        XCTAssertEqual(suffix.headers["content-range"], "bytes 95-99/100")
        XCTAssertTrue(suffix.headers["cache-status"]?.hasPrefix("larder; hit") ?? false)
        let outside = try client.request("GET", target, headers: ["Range": "bytes=200-"])
        XCTAssertEqual(outside.status, 416)
        XCTAssertEqual(outside.headers["content-range"], "bytes */100")
        let changed = try client.request("GET", target, headers: ["Range": "bytes=0-9", "If-Range": "\"r0\""])
        XCTAssertEqual(changed.status, 200, "If-Range did not match: the whole response")
        XCTAssertEqual(changed.body.count, 100)
        let whole = try client.request("GET", target)
        XCTAssertEqual(whole.status, 200)
        XCTAssertEqual(whole.body.count, 100, "a later plain request gets the full body, not a part")
        XCTAssertEqual(origin.count("/base\(path)"), 1)
    }

    func testCoalescingThroughTheProxy() throws {
        let larder = try startProxy()
        let path = uniquePath()
        let port = larder.port
        let statuses = Locked<[String]>([])
        // The origin answers once the 49 others joined the first request's fetch: all 50 overlap.
        let released = release(["/base\(path)"], whenCoalesced: 49, on: larder.service)
        XCTAssertTrue(
            concurrently(50) { _ in
                let response = try? TestConnection(port: port).request("GET", "/proxy/origin\(path)?cc=max-age%3D60&hold=gate")
                statuses.withLock { $0.append(response?.headers["cache-status"] ?? "error") }
            })
        XCTAssertTrue(released.waitForRelease(), "the requests overlapped")
        XCTAssertEqual(origin.count("/base\(path)"), 1)
        XCTAssertEqual(statuses.withLock { $0.filter { $0.contains("fwd=uri-miss") }.count }, 1)
        XCTAssertEqual(statuses.withLock { $0.filter { $0.contains("collapsed") }.count }, 49, "every other request joined the fetch")
    }

    func testFieldValuesThatAreNotUTF8PassByteForByte() throws {
        // RFC 9110 §5.5 obs-text: a Latin-1 ETag ("abcü" with ü as the single byte 0xFC).
        let larder = try startProxy()
        let client = try larder.connection()
        let path = uniquePath()
        // The test origin writes U+F7FC as the raw byte 0xFC (FieldBytes).
        let target = "/proxy/origin\(path)?cc=max-age%3D60&h=ETag:%22abc%EF%9F%BC%22"
        let wire: [UInt8] = Array(": \"abc".utf8) + [0xFC, UInt8(ascii: "\"")] // the ETag value as sent
        func containsWire(_ response: TestResponse) -> Bool {
            response.rawHead.indices.contains { Array(response.rawHead[$0...].prefix(wire.count)) == wire }
        }
        XCTAssertTrue(containsWire(try client.request("GET", target)), "miss")
        XCTAssertTrue(containsWire(try client.request("GET", target)), "hit, from the store")
        let conditional = try client.request(
            "GET", target, rawHeaderLines: Array("If-None-Match: \"abc".utf8) + [0xFC] + Array("\"\r\n".utf8))
        XCTAssertEqual(conditional.status, 304)
        XCTAssertTrue(containsWire(conditional))
        XCTAssertEqual(origin.count("/base\(path)"), 1)
    }

    func testRedirectsArePassedOnNotFollowed() throws {
        let larder = try startProxy()
        let client = try larder.connection()
        let path = uniquePath()
        let response = try client.request("GET", "/proxy/origin\(path)?status=302&location=/elsewhere")
        XCTAssertEqual(response.status, 302)
        XCTAssertEqual(response.headers["location"], "/elsewhere")
        XCTAssertEqual(origin.count("/elsewhere"), 0)
    }

    func testUnsafeMethodsPassThrough() throws {
        let larder = try startProxy()
        let client = try larder.connection()
        let path = uniquePath()
        let post = try client.request("POST", "/proxy/origin\(path)", headers: ["Content-Type": "text/plain"], body: Array("hello".utf8))
        XCTAssertEqual(post.status, 200)
        XCTAssertEqual(post.headers["cache-status"], "larder; fwd=method; fwd-status=200")
        let received = try XCTUnwrap(origin.requests("/base\(path)").first)
        XCTAssertEqual(received.method, "POST")
        XCTAssertEqual(String(decoding: received.body, as: UTF8.self), "hello")
    }

    func testAnOversizedBodyIsRefusedNotTruncated() throws {
        let larder = try startProxy()
        let path = uniquePath()
        let response = try larder.connection().request("POST", "/proxy/origin\(path)", body: [UInt8](repeating: 1, count: (1 << 20) + 1))
        XCTAssertEqual(response.status, 400)
        XCTAssertEqual(response.errorCode, "invalid_request")
        XCTAssertEqual(origin.count("/base\(path)"), 0)
    }

    func testCDNCacheControlWinsAndIsPassedOnForTheNextCache() throws {
        let larder = try startProxy()
        let client = try larder.connection()
        let path = uniquePath()
        let target = "/proxy/origin\(path)?cc=no-store&h=CDN-Cache-Control:max-age%3D100"
        let first = try client.request("GET", target)
        XCTAssertEqual(first.headers["cache-control"], "no-store", "Cache-Control is for downstream caches")
        XCTAssertEqual(first.headers["cdn-cache-control"], "max-age=100", "RFC 9213: for every CDN cache in the chain")
        let hit = try client.request("GET", target)
        XCTAssertEqual(hit.headers["cache-status"], "larder; hit; ttl=100")
        XCTAssertEqual(hit.headers["cdn-cache-control"], "max-age=100")
        XCTAssertEqual(origin.count("/base\(path)"), 1)
    }

    func testCDNCacheControlIsRemovedWhenLarderIsTheLastCache() throws {
        let larder = try startProxy { $0.stripTargetedCacheControl = true }
        let client = try larder.connection()
        let path = uniquePath()
        let target = "/proxy/origin\(path)?h=CDN-Cache-Control:max-age%3D100"
        XCTAssertNil(try client.request("GET", target).headers["cdn-cache-control"])
        let hit = try client.request("GET", target)
        XCTAssertEqual(hit.headers["cache-status"], "larder; hit; ttl=100", "still used")
        XCTAssertNil(hit.headers["cdn-cache-control"])
    }

    func testUpstreamFailureIsAJSONError() throws {
        let larder = try startLarder { $0.upstreams = [NamedUpstream(name: "down", baseURL: "http://127.0.0.1:1")] }
        let response = try larder.connection().request("GET", "/proxy/down/x")
        XCTAssertEqual(response.status, 502)
        XCTAssertEqual(response.errorCode, "upstream_unreachable")
    }

    func testProxyRootListenerProxiesEveryPath() throws {
        let larder = try startProxy { configuration in
            configuration.proxyRoot = "origin"
            configuration.proxyPort = 0
        }
        let port = try XCTUnwrap(larder.service.proxyPort)
        let client = try TestConnection(port: port)
        let path = uniquePath()
        let first = try client.request("GET", "\(path)?cc=max-age%3D60")
        XCTAssertEqual(first.status, 200)
        XCTAssertEqual(origin.requests("/base\(path)").first?.target, "/base\(path)?cc=max-age%3D60")
        XCTAssertTrue(try client.request("GET", "\(path)?cc=max-age%3D60").headers["cache-status"]?.hasPrefix("larder; hit") ?? false)
        // The proxy route on the main port shares the same cache.
        XCTAssertTrue(
            try larder.connection().request("GET", "/proxy/origin\(path)?cc=max-age%3D60").headers["cache-status"]?
                .hasPrefix("larder; hit") ?? false)
        XCTAssertEqual(origin.count("/base\(path)"), 1)
    }
}
