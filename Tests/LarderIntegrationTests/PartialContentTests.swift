// Partial content through the proxy (RFC 9111 §3.4): a cold range request fetches only its
// range, parts are stored and reused, and a range past the part asks only for the missing bytes
// and completes the stored response.

import Foundation
import LarderCore
import LarderServiceTesting
import XCTest

final class PartialContentTests: IntegrationTestCase {
    /// An origin serving `body` with a strong ETag, honouring single byte ranges; it records
    /// each request's Range and If-Range.
    private func rangeOrigin(_ body: [UInt8], etag: String = "\"v1\"") throws -> RawOrigin {
        try RawOrigin { _, request in
            let text = String(decoding: request, as: UTF8.self)
            let field = { (name: String) -> String? in
                text.components(separatedBy: "\r\n").first { $0.lowercased().hasPrefix(name + ":") }
                    .map { String($0.dropFirst(name.count + 1)).trimmingCharacters(in: .whitespaces) }
            }
            var head = "Cache-Control: max-age=600\r\nETag: \(etag)\r\nAccept-Ranges: bytes\r\nContent-Type: application/octet-stream\r\n"
            if let range = field("range"), field("if-range").map({ $0 == etag }) ?? true,
                case .partial(let bytes) = ByteRange.answer(range: range, ifRange: nil, length: body.count, etag: nil, lastModified: nil)
            {
                head += "Content-Range: bytes \(bytes.lowerBound)-\(bytes.upperBound)/\(body.count)\r\nContent-Length: \(bytes.count)\r\n"
                return Array("HTTP/1.1 206 Partial Content\r\n\(head)\r\n".utf8) + body[bytes]
            }
            return Array("HTTP/1.1 200 OK\r\n\(head)Content-Length: \(body.count)\r\n\r\n".utf8) + body
        }
    }

    private func requests(_ origin: RawOrigin) -> [(range: String?, ifRange: String?)] {
        origin.requests.map { bytes in
            let lines = String(decoding: bytes, as: UTF8.self).components(separatedBy: "\r\n")
            let value = { (name: String) in
                lines.first { $0.lowercased().hasPrefix(name + ":") }.map {
                    String($0.dropFirst(name.count + 1)).trimmingCharacters(in: .whitespaces)
                }
            }
            return (value("range"), value("if-range"))
        }
    }

    func testALargeObjectIsFetchedByTheRangeAskedForAndCompletedFromTheMissingBytes() throws {
        let body = (0..<1000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        let raw = try rangeOrigin(body)
        let larder = try startLarder { configuration in
            configuration.upstreams = [NamedUpstream(name: "files", baseURL: "http://127.0.0.1:\(raw.port)")]
            configuration.rangeFetchOverBytes = 100
        }
        let client = try larder.connection()
        let first = try client.request("GET", "/proxy/files/big.bin", headers: ["Range": "bytes=0-99"])
        XCTAssertEqual(first.status, 206)
        XCTAssertEqual(first.headers["content-range"], "bytes 0-99/1000")
        XCTAssertEqual(first.body, Array(body[0...99]))
        XCTAssertEqual(requests(raw).map(\.range), ["bytes=0-99"], "only the range went upstream")

        let inside = try client.request("GET", "/proxy/files/big.bin", headers: ["Range": "bytes=10-19"])
        XCTAssertEqual(inside.status, 206)
        XCTAssertEqual(inside.body, Array(body[10...19]))
        XCTAssertEqual(inside.headers["content-range"], "bytes 10-19/1000")
        XCTAssertTrue(inside.headers["cache-status"]?.hasPrefix("larder; hit") == true, inside.headers["cache-status"] ?? "")
        XCTAssertEqual(raw.requests.count, 1, "answered from the stored part")

        let beyond = try client.request("GET", "/proxy/files/big.bin", headers: ["Range": "bytes=50-199"])
        XCTAssertEqual(beyond.status, 206)
        XCTAssertEqual(beyond.body, Array(body[50...199]))
        XCTAssertEqual(requests(raw).last?.range, "bytes=100-", "only the missing bytes")
        XCTAssertEqual(requests(raw).last?.ifRange, "\"v1\"")

        // Combined into the whole representation: stored whole, served whole and cut.
        let whole = try client.request("GET", "/proxy/files/big.bin")
        XCTAssertEqual(whole.status, 200)
        XCTAssertEqual(whole.body, body)
        XCTAssertTrue(whole.headers["cache-status"]?.hasPrefix("larder; hit") == true)
        XCTAssertEqual(try client.request("GET", "/proxy/files/big.bin", headers: ["Range": "bytes=-3"]).body, Array(body[997...]))
        XCTAssertEqual(raw.requests.count, 2)
    }

    func testASmallObjectAskedForByRangeEndsUpStoredWhole() throws {
        let body = Array("0123456789abcdefghij".utf8)
        let raw = try rangeOrigin(body)
        let larder = try startLarder { configuration in
            configuration.upstreams = [NamedUpstream(name: "files", baseURL: "http://127.0.0.1:\(raw.port)")]
            configuration.rangeFetchOverBytes = 1 << 20
        }
        let client = try larder.connection()
        let part = try client.request("GET", "/proxy/files/small.txt", headers: ["Range": "bytes=-5"])
        XCTAssertEqual(part.status, 206)
        XCTAssertEqual(part.body, Array("fghij".utf8))
        // The whole is fetched in the background (it is small); await its arrival at the origin.
        eventually { requests(raw).count >= 2 } // the raw origin marks no arrival
        XCTAssertEqual(requests(raw).map(\.range), ["bytes=-5", nil])
        let cached = { try client.request("GET", "/proxy/files/small.txt", headers: ["Cache-Control": "only-if-cached"]) }
        let whole = try eventually(cached, until: { $0.status == 200 })
        XCTAssertEqual(whole.status, 200)
        XCTAssertEqual(whole.body, body)
        XCTAssertEqual(raw.requests.count, 2)
    }

    func testAPlainRequestCompletesAStoredPartWithTheMissingBytesOnly() throws {
        let body = (0..<500).map { UInt8(truncatingIfNeeded: $0 &* 3) }
        let raw = try rangeOrigin(body)
        let larder = try startLarder { $0.upstreams = [NamedUpstream(name: "files", baseURL: "http://127.0.0.1:\(raw.port)")] }
        let client = try larder.connection()
        XCTAssertEqual(try client.request("GET", "/proxy/files/f", headers: ["Range": "bytes=0-199"]).status, 206)
        let whole = try client.request("GET", "/proxy/files/f")
        XCTAssertEqual(whole.status, 200, "the client asked for the whole")
        XCTAssertEqual(whole.body, body)
        XCTAssertEqual(requests(raw).map(\.range), ["bytes=0-199", "bytes=200-"])
        XCTAssertTrue(try client.request("GET", "/proxy/files/f").headers["cache-status"]?.hasPrefix("larder; hit") == true)
        XCTAssertEqual(raw.requests.count, 2)
    }

    func testWithoutAStrongValidatorAPartIsNotCompletedButTheWholeIsFetched() throws {
        let body = Array("abcdefghijklmnopqrstuvwxyz".utf8)
        let raw = try RawOrigin { _, request in
            let text = String(decoding: request, as: UTF8.self)
            if let line = text.components(separatedBy: "\r\n").first(where: { $0.hasPrefix("Range: bytes=") }) {
                let first = Int(line.dropFirst("Range: bytes=".count).prefix { $0.isNumber }) ?? 0
                let last = line.hasSuffix("-") ? body.count - 1 : min(body.count - 1, first + 9)
                return Array(
                    ("HTTP/1.1 206 Partial Content\r\nCache-Control: max-age=600\r\n"
                        + "Content-Range: bytes \(first)-\(last)/\(body.count)\r\nContent-Length: \(last - first + 1)\r\n\r\n")
                        .utf8)
                    + body[first...last]
            }
            return Array("HTTP/1.1 200 OK\r\nCache-Control: max-age=600\r\nContent-Length: \(body.count)\r\n\r\n".utf8) + body
        }
        let larder = try startLarder { $0.upstreams = [NamedUpstream(name: "files", baseURL: "http://127.0.0.1:\(raw.port)")] }
        let client = try larder.connection()
        XCTAssertEqual(try client.request("GET", "/proxy/files/g", headers: ["Range": "bytes=0-9"]).status, 206)
        let whole = try client.request("GET", "/proxy/files/g")
        XCTAssertEqual(whole.status, 200)
        XCTAssertEqual(whole.body, body, "never glued together without a strong validator")
    }

    func testPartsWithDifferentValidatorsAreNotCombined() throws {
        let body = (0..<300).map { UInt8(truncatingIfNeeded: $0) }
        let raw = try RawOrigin { number, request in
            let text = String(decoding: request, as: UTF8.self)
            let etag = number == 0 ? "\"v1\"" : "\"v2\"" // the representation changed in between
            if text.contains("If-Range: \"v1\"") {
                // If-Range no longer matches: the whole new representation.
                return Array("HTTP/1.1 200 OK\r\nCache-Control: max-age=600\r\nETag: \(etag)\r\nContent-Length: \(body.count)\r\n\r\n".utf8)
                    + body
            }
            return Array(
                ("HTTP/1.1 206 Partial Content\r\nCache-Control: max-age=600\r\nETag: \(etag)\r\n"
                    + "Content-Range: bytes 0-99/300\r\nContent-Length: 100\r\n\r\n")
                    .utf8)
                + body[0..<100]
        }
        let larder = try startLarder { configuration in
            configuration.upstreams = [NamedUpstream(name: "files", baseURL: "http://127.0.0.1:\(raw.port)")]
            configuration.rangeFetchOverBytes = 10
        }
        let client = try larder.connection()
        XCTAssertEqual(try client.request("GET", "/proxy/files/f", headers: ["Range": "bytes=0-99"]).status, 206)
        let later = try client.request("GET", "/proxy/files/f", headers: ["Range": "bytes=100-149"])
        XCTAssertEqual(later.status, 206, "cut from the new whole representation")
        XCTAssertEqual(later.body, Array(body[100...149]))
        XCTAssertEqual(later.headers["etag"], "\"v2\"")
    }
}
