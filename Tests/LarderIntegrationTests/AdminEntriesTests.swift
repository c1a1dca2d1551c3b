// The admin routes that list, show and write entries, tags and purge by tag, versioned
// namespaces and the admin listener, through the real server and origin.

import Foundation
import LarderCore
import LarderService
import LarderServiceTesting
import XCTest

final class AdminEntriesTests: IntegrationTestCase {
    private func json(_ object: [String: Any]) throws -> [UInt8] { Array(try JSONSerialization.data(withJSONObject: object)) }

    private func list(_ client: TestConnection, _ query: String) throws -> (entries: [[String: Any]], next: String?) {
        let response = try client.request("GET", "/cache/entries" + (query.isEmpty ? "" : "?" + query))
        XCTAssertEqual(response.status, 200, response.text)
        return (response.json["entries"] as? [[String: Any]] ?? [], response.json["nextCursor"] as? String)
    }

    func testListingShowsEachEntrysMetadataAndFilters() throws {
        let client = try startLarder().connection()
        let base = uniquePath()
        let first = try client.fetch([
            "url": url("\(base)/a", "etag=%22v1%22&cc=max-age%3D60,%20stale-while-revalidate%3D30"),
            "cache": ["namespace": "alpha", "tags": ["product-1", "catalog"]]
        ])
        XCTAssertEqual(first.outcome, "miss")
        _ = try client.fetch([
            "url": url("\(base)/a", "etag=%22v1%22&cc=max-age%3D60,%20stale-while-revalidate%3D30"),
            "cache": ["namespace": "alpha", "tags": ["product-1", "catalog"]]
        ])
        _ = try client.fetch(["url": url("\(base)/b", "status=404&cc=max-age%3D60"), "cache": ["namespace": "beta"]])
        _ = try client.fetch(["url": url("\(base)/c", "cc=max-age%3D5"), "cache": ["namespace": "beta"]])

        let all = try list(client, "")
        XCTAssertEqual(all.entries.count, 3)
        XCTAssertNil(all.next)
        let alpha = try list(client, "namespace=alpha").entries
        XCTAssertEqual(alpha.count, 1)
        let item = try XCTUnwrap(alpha.first)
        XCTAssertEqual(item["key"] as? String, first.cache["key"] as? String)
        XCTAssertEqual(item["method"] as? String, "GET")
        XCTAssertEqual(item["status"] as? Int, 200)
        XCTAssertEqual(item["tags"] as? [String], ["product-1", "catalog"])
        XCTAssertEqual(item["hits"] as? Int, 1, "hit counts are flushed before listing")
        XCTAssertEqual(item["etag"] as? String, "\"v1\"")
        let storedAt = try XCTUnwrap(adminTime(item["storedAt"]), "\(item)")
        let expiresAt = try XCTUnwrap(adminTime(item["expiresAt"]), "\(item)")
        let staleUntil = try XCTUnwrap(adminTime(item["staleUntil"]), "\(item)")
        XCTAssertEqual(storedAt, clock.now, accuracy: 1)
        XCTAssertNotNil(adminTime(item["lastAccessAt"]), "\(item)")
        XCTAssertEqual(expiresAt - storedAt, 60, accuracy: 1, "less the age the response arrived with")
        XCTAssertEqual(staleUntil - expiresAt, 30, accuracy: 0.01)
        XCTAssertGreaterThan(item["bytes"] as? Int ?? 0, 0)
        XCTAssertEqual(item["varies"] as? [String], [])

        XCTAssertEqual(try list(client, "tag=catalog").entries.count, 1)
        XCTAssertEqual(try list(client, "status=404").entries.first?["status"] as? Int, 404)
        clock.advance(by: 10)
        XCTAssertEqual(try list(client, "expired=true").entries.count, 1, "only the 5 s one is past every window")
        XCTAssertEqual(try list(client, "expired=false").entries.count, 2)
        XCTAssertEqual(
            try list(client, "urlPrefix=" + url("\(base)/b").addingPercentEncoding(withAllowedCharacters: .alphanumerics)!).entries.count, 1
        )

        for (query, field) in [("limit=0", "limit"), ("colour=red", "colour"), ("status=7", "status"), ("cursor=a/b", "cursor")] {
            let refused = try client.request("GET", "/cache/entries?\(query)")
            XCTAssertEqual(refused.status, 400, query)
            XCTAssertEqual(refused.errorField, field, query)
        }
    }

    /// Operators issue: an entry fetched with a caller's `ttl` is listed as expiring when that ttl
    /// ends, and neither the `expired` filter nor a purge by it removes it while callers still
    /// get hits on it, however long past the origin's max-age.
    func testAnEntryFetchedWithATTLExpiresWhenTheTTLEndsNotAtTheOriginsMaxAge() throws {
        let client = try startLarder().connection()
        let base = uniquePath()
        let withTTL: [String: Any] = ["url": url("\(base)/ttl", "cc=max-age%3D60"), "cache": ["ttl": 3600]]
        let withoutTTL: [String: Any] = ["url": url("\(base)/http", "cc=max-age%3D60")]
        XCTAssertEqual(try client.fetch(withTTL).outcome, "miss")
        XCTAssertEqual(try client.fetch(withoutTTL).outcome, "miss")
        let storedAt = clock.now
        func listed(_ name: String) throws -> [String: Any] {
            let prefix = url("\(base)/\(name)").addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
            return try XCTUnwrap(try list(client, "urlPrefix=\(prefix)").entries.first, name)
        }
        let item = try listed("ttl")
        XCTAssertEqual(try XCTUnwrap(adminTime(item["expiresAt"]), "\(item)"), storedAt + 3600, accuracy: 1)
        XCTAssertEqual(try XCTUnwrap(adminTime(item["staleUntil"]), "\(item)"), storedAt + 3600, accuracy: 1)
        let http = try listed("http")
        XCTAssertEqual(try XCTUnwrap(adminTime(http["expiresAt"]), "\(http)"), storedAt + 60, accuracy: 1)

        // Past the origin's 60 s: the ttl caller still gets hits, and only the other entry is expired.
        clock.advance(by: 120)
        XCTAssertEqual(try client.fetch(withTTL).outcome, "hit")
        XCTAssertEqual(try list(client, "expired=true").entries.map { $0["url"] as? String }, [url("\(base)/http", "cc=max-age%3D60")])
        XCTAssertEqual(try list(client, "expired=false").entries.map { $0["url"] as? String }, [url("\(base)/ttl", "cc=max-age%3D60")])
        let purged = try client.request("DELETE", "/cache?expired=true")
        XCTAssertEqual(purged.status, 200, purged.text)
        XCTAssertEqual(purged.json["removed"] as? Int, 1)
        let hit = try client.fetch(withTTL)
        XCTAssertEqual(hit.outcome, "hit", "not removed by the purge")
        XCTAssertEqual(hit.originCount, 1)

        // Past the ttl: expired, and purged.
        clock.advance(by: 3600)
        let expired = try client.request("DELETE", "/cache?expired=true")
        XCTAssertEqual(expired.json["removed"] as? Int, 1, expired.text)
        XCTAssertEqual(try list(client, "").entries.count, 0)
        let refetched = try client.fetch(withTTL)
        XCTAssertEqual(refetched.outcome, "miss")
        XCTAssertEqual(refetched.originCount, 2)
    }

    func testPaginationVisitsEveryEntryExactlyOnceWhileEntriesComeAndGo() throws {
        let client = try startLarder().connection()
        let base = uniquePath()
        var keys: [String] = []
        for index in 0..<25 {
            let response = try client.fetch(["url": url("\(base)/\(index)"), "cache": ["ttl": 600]])
            keys.append(try XCTUnwrap(response.cache["key"] as? String))
        }
        var seen: [String] = []
        var cursor: String?
        var deleted: Set<String> = []
        var page = 0
        repeat {
            let result = try list(client, "limit=4" + (cursor.map { "&cursor=\($0)" } ?? ""))
            seen += result.entries.compactMap { $0["key"] as? String }
            cursor = result.next
            // Meanwhile: new entries arrive, an entry not yet visited is deleted, a visited one is replaced.
            _ = try client.fetch(["url": url("\(base)/new\(page)"), "cache": ["ttl": 600]])
            if let victim = keys.first(where: { !seen.contains($0) && !deleted.contains($0) }), page % 2 == 0 {
                XCTAssertEqual(try client.request("DELETE", "/cache/entries/\(victim)").status, 204)
                deleted.insert(victim)
            }
            if let visited = seen.first {
                _ = try client.fetch(["url": url("\(base)/\(keys.firstIndex(of: visited) ?? 0)"), "cache": ["ttl": 600, "policy": "reload"]]
                )
            }
            page += 1
        } while cursor != nil && page < 100
        XCTAssertEqual(Set(seen).count, seen.count, "no entry twice")
        let survivors = Set(keys).subtracting(deleted)
        XCTAssertTrue(survivors.isSubset(of: Set(seen)), "every entry there all along was visited")
        XCTAssertTrue(Set(seen).isDisjoint(with: deleted), "no entry deleted before its page")
    }

    func testShowingOneKeyListsEveryVariantAndItsBody() throws {
        let client = try startLarder().connection()
        let path = uniquePath()
        let query = "h=Vary:Accept-Language&cc=max-age%3D60"
        let english = try client.fetch(["url": url(path, query), "headers": ["Accept-Language": "en"]])
        _ = try client.fetch(["url": url(path, query), "headers": ["Accept-Language": "fr"]])
        let key = try XCTUnwrap(english.cache["key"] as? String)

        let shown = try client.request("GET", "/cache/entries/\(key)")
        XCTAssertEqual(shown.status, 200, shown.text)
        let variants = try XCTUnwrap(shown.json["variants"] as? [[String: Any]])
        XCTAssertEqual(variants.count, 2)
        XCTAssertEqual(variants.first?["varies"] as? [String], ["accept-language"])
        XCTAssertNotNil(variants.first?["variantKey"])
        XCTAssertNil(variants.first?["response"])

        let withBody = try client.request("GET", "/cache/entries/\(key)?body=true")
        let responses = (withBody.json["variants"] as? [[String: Any]] ?? []).compactMap { $0["response"] as? [String: Any] }
        XCTAssertEqual(responses.count, 2)
        XCTAssertEqual(responses.first?["status"] as? Int, 200)
        let body = try XCTUnwrap(responses.first?["body"] as? [String: Any], withBody.text)
        XCTAssertEqual(body["path"] as? String, path)

        let missing = try client.request("GET", "/cache/entries/0123abcd")
        XCTAssertEqual(missing.status, 404)
        XCTAssertEqual(missing.errorCode, "not_found")
    }

    func testAResponseWrittenByHandIsAHitForTheSameSpec() throws {
        let larder = try startLarder()
        let client = try larder.connection()
        let path = uniquePath()
        let spec: [String: Any] = ["url": url(path), "cache": ["ttl": 600, "namespace": "seeded"]]
        let written = try client.request(
            "PUT", "/cache/entries", headers: ["Content-Type": "application/json"],
            body: try json([
                "request": ["url": url(path)], "cache": ["ttl": 600, "namespace": "seeded", "tags": ["seed"]],
                "response": ["status": 200, "headers": ["X-Seeded": "yes"], "body": ["hello": "world"]]
            ]))
        XCTAssertEqual(written.status, 201, written.text)
        let key = try XCTUnwrap(written.json["key"] as? String)

        let hit = try client.fetch(spec)
        XCTAssertEqual(hit.outcome, "hit", hit.text)
        XCTAssertEqual(hit.cache["key"] as? String, key)
        XCTAssertEqual((hit.json["body"] as? [String: Any])?["hello"] as? String, "world")
        XCTAssertEqual((hit.json["headers"] as? [String: Any])?["x-seeded"] as? String, "yes")
        XCTAssertEqual(origin.count(path), 0, "the origin was never asked")
        XCTAssertEqual(try list(client, "tag=seed").entries.count, 1)

        // Writing again replaces the entry, the memory tier's copy too.
        _ = try client.request(
            "PUT", "/cache/entries", headers: ["Content-Type": "application/json"],
            body: try json([
                "request": spec, "response": ["bodyText": "second"]
            ]))
        XCTAssertEqual(try client.fetch(spec).json["bodyText"] as? String, "second")

        for (body, field) in [
            (["response": ["status": 200]], "request"), (["request": ["url": url(path)]], "response"),
            (["request": spec, "cache": ["ttl": 1], "response": [:]], "cache"),
            (["request": ["url": url(path), "cache": ["ttl": 60]], "response": ["status": 99]], "response.status"),
            (["request": ["url": url(path), "cache": ["ttl": 60]], "response": ["bodyBase64": "%%"]], "response.bodyBase64"),
            (["request": ["url": url(path)], "response": ["body": 1, "bodyText": "x"]], "response")
        ] as [([String: Any], String)] {
            let refused = try client.request("PUT", "/cache/entries", headers: ["Content-Type": "application/json"], body: try json(body))
            XCTAssertEqual(refused.status, 400, "\(body)")
            XCTAssertEqual(refused.errorField, field, refused.text)
        }
    }

    func testTagsFromTheSpecAndTheResponseHeadersPurgeExactlyTheirEntries() throws {
        let larder = try startLarder { $0.upstreams = [NamedUpstream(name: "origin", baseURL: self.origin.base)] }
        let client = try larder.connection()
        let base = uniquePath()
        _ = try client.fetch(["url": url("\(base)/1", "h=Surrogate-Key:product-7%20list"), "cache": ["ttl": 600]])
        _ = try client.fetch(["url": url("\(base)/2", "h=Cache-Tag:product-7,promo"), "cache": ["ttl": 600]])
        _ = try client.fetch(["url": url("\(base)/3"), "cache": ["ttl": 600, "tags": ["product-7"]]])
        _ = try client.fetch(["url": url("\(base)/4", "h=Surrogate-Key:product-8"), "cache": ["ttl": 600]])
        // Through the proxy: the tag fields are Larder's, not the client's.
        let proxied = try client.request("GET", "/proxy/origin\(base)/5?cc=max-age%3D600&h=Surrogate-Key:product-7")
        XCTAssertEqual(proxied.status, 200)
        XCTAssertNil(proxied.headers["surrogate-key"])
        XCTAssertNil(
            try client.request("GET", "/proxy/origin\(base)/5?cc=max-age%3D600&h=Surrogate-Key:product-7").headers["surrogate-key"])

        XCTAssertEqual(try list(client, "tag=product-7").entries.count, 4)
        let purged = try client.request("DELETE", "/cache?tag=product-7")
        XCTAssertEqual(purged.json["removed"] as? Int, 4, purged.text)
        for index in 1...3 { XCTAssertEqual(try client.fetch(["url": url("\(base)/\(index)"), "cache": ["ttl": 600]]).outcome, "miss") }
        XCTAssertEqual(try client.fetch(["url": url("\(base)/4", "h=Surrogate-Key:product-8"), "cache": ["ttl": 600]]).outcome, "hit")

        // POST /cache/purge with tags (and URLs): the sum of both.
        let both = try client.request(
            "POST", "/cache/purge", headers: ["Content-Type": "application/json"],
            body: try json(["tags": ["product-8", "nothing"], "urls": [url("\(base)/1")]]))
        XCTAssertEqual(both.json["removed"] as? Int, 2, both.text)
        XCTAssertEqual(try client.fetch(["url": url("\(base)/4", "h=Surrogate-Key:product-8"), "cache": ["ttl": 600]]).outcome, "miss")

        let bad = try client.fetch(["url": url("\(base)/x"), "cache": ["tags": ["has space"]]])
        XCTAssertEqual(bad.errorField, "cache.tags[0]")
    }

    func testTagHeadersCanBeTurnedOff() throws {
        let larder = try startLarder { $0.tagHeaders = [] }
        let client = try larder.connection()
        let path = uniquePath()
        let spec: [String: Any] = ["url": url(path, "h=Surrogate-Key:k1"), "cache": ["ttl": 600, "tags": ["from-spec"]]]
        XCTAssertEqual(try client.fetch(spec).outcome, "miss")
        XCTAssertEqual(try client.fetch(spec).outcome, "hit", "the response is stored")
        XCTAssertEqual(try list(client, "tag=from-spec").entries.first?["tags"] as? [String], ["from-spec"], "only the spec's tag")
        XCTAssertEqual(try client.request("DELETE", "/cache?tag=k1").json["removed"] as? Int, 0)
        XCTAssertEqual(try client.fetch(spec).outcome, "hit", "the purge by the header's tag left it")
        // The controls (issue 35): in the same instance a purge by tag does remove the entry, and
        // with the default tag headers the same response is tagged by its Surrogate-Key.
        XCTAssertEqual(try client.request("DELETE", "/cache?tag=from-spec").json["removed"] as? Int, 1)
        stopLarder(larder)
        let tagging = try startLarder().connection()
        let other = uniquePath()
        XCTAssertEqual(try tagging.fetch(["url": url(other, "h=Surrogate-Key:k1"), "cache": ["ttl": 600]]).outcome, "miss")
        XCTAssertEqual(try tagging.request("DELETE", "/cache?tag=k1").json["removed"] as? Int, 1)
    }

    func testBumpingANamespaceRetiresItsEntriesAtOnceAndForGood() throws {
        let larder = try startLarder()
        let client = try larder.connection()
        let base = uniquePath()
        let spec = { (name: String, namespace: String) -> [String: Any] in
            ["url": self.url("\(base)/\(name)"), "cache": ["ttl": 600, "namespace": namespace]]
        }
        for name in ["a", "b"] { XCTAssertEqual(try client.fetch(spec(name, "pages")).outcome, "miss") }
        _ = try client.fetch(spec("a", "other"))
        let pinned: [String: Any] = ["url": url("\(base)/pinned"), "cache": ["ttl": 600, "namespace": "pages", "version": 0]]
        _ = try client.fetch(pinned)
        XCTAssertEqual(try client.fetch(spec("a", "pages")).outcome, "hit")

        let bumped = try client.request(
            "POST", "/cache/namespaces/pages/version", headers: ["Content-Type": "application/json"],
            body: Array(#"{"bump":true}"#.utf8))
        XCTAssertEqual(bumped.status, 200, bumped.text)
        XCTAssertEqual(bumped.json["version"] as? Int, 1)
        XCTAssertEqual(bumped.json["previous"] as? Int, 0)
        let after = try client.fetch(spec("a", "pages"))
        XCTAssertEqual(after.outcome, "miss", "retired at once")
        XCTAssertEqual(after.cache["version"] as? Int, 1)
        XCTAssertEqual(try client.fetch(spec("a", "pages")).outcome, "hit", "stored again under the new version")
        XCTAssertEqual(try client.fetch(spec("a", "other")).outcome, "hit", "other namespaces untouched")
        XCTAssertEqual(origin.count("\(base)/a"), 3)

        // The retired entries are collected in the background (the pinned one too: it is under another version).
        try eventually(every: 0.02) { try list(client, "namespace=pages").entries.count == 1 }
        XCTAssertEqual(try list(client, "namespace=pages").entries.first?["version"] as? Int, 1)

        let namespaces = try client.request("GET", "/cache/namespaces")
        let pages = (namespaces.json["namespaces"] as? [[String: Any]])?.first { $0["name"] as? String == "pages" }
        XCTAssertEqual(pages?["version"] as? Int, 1)
        XCTAssertEqual(pages?["entries"] as? Int, 1)

        // Set explicitly, and kept across a restart.
        XCTAssertEqual(
            try client.request(
                "POST", "/cache/namespaces/pages/version", headers: ["Content-Type": "application/json"],
                body: Array(#"{"version":7}"#.utf8)
            ).json["version"] as? Int, 7)
        stopLarder(larder)
        let restarted = try startLarder().connection()
        let later = try restarted.fetch(spec("b", "pages"))
        XCTAssertEqual(later.cache["version"] as? Int, 7)
        XCTAssertEqual(later.outcome, "miss")
        for body in [#"{}"#, #"{"bump":true,"version":2}"#, #"{"version":"x"}"#, #"{"version":9007199254740992}"#, #"{"bump":null}"#] {
            let refused = try restarted.request(
                "POST", "/cache/namespaces/pages/version", headers: ["Content-Type": "application/json"],
                body: Array(body.utf8))
            XCTAssertEqual(refused.status, 400, body)
        }
        // The path is decoded once: `%25` names a namespace with a `%` in it, not an encoding to undo again.
        let percent = try restarted.request(
            "POST", "/cache/namespaces/%60%25n%271/version", headers: ["Content-Type": "application/json"],
            body: Array(#"{"bump":true}"#.utf8))
        XCTAssertEqual(percent.status, 200, percent.text)
        XCTAssertEqual(percent.json["namespace"] as? String, "`%n'1")
        // At the highest version, a bump conflicts with the namespace's state.
        XCTAssertEqual(
            try restarted.request(
                "POST", "/cache/namespaces/top/version", headers: ["Content-Type": "application/json"],
                body: Array(#"{"version":9007199254740991}"#.utf8)
            ).status, 200)
        let exhausted = try restarted.request(
            "POST", "/cache/namespaces/top/version", headers: ["Content-Type": "application/json"],
            body: Array(#"{"bump":true}"#.utf8))
        XCTAssertEqual(exhausted.status, 409, exhausted.text)
        XCTAssertEqual((exhausted.json["error"] as? [String: Any])?["code"] as? String, "version_exhausted")
        // Filters are checked the same way for listing and purging: no empty values, tags as tags.
        for target in ["/cache/entries?urlPrefix=", "/cache/entries?tag=a%20b", "/cache?tag=", "/cache?tag=a,b"] {
            let method = target.hasPrefix("/cache/entries") ? "GET" : "DELETE"
            XCTAssertEqual(try restarted.request(method, target).status, 400, target)
        }
        let badTag = try restarted.request(
            "POST", "/cache/purge", headers: ["Content-Type": "application/json"],
            body: Array(#"{"tags":["ok","not ok"]}"#.utf8))
        XCTAssertEqual(badTag.status, 400)
        XCTAssertEqual((badTag.json["error"] as? [String: Any])?["field"] as? String, "tags[1]")
    }

    func testTheAdminPortServesOnlyTheAdminRoutesAndMetrics() throws {
        let larder = try startLarder { $0.adminPort = 0 }
        let main = try larder.connection()
        let admin = try TestConnection(port: try XCTUnwrap(larder.adminPort))
        XCTAssertEqual(try main.fetch(["url": url(uniquePath())]).status, 200)
        XCTAssertEqual(try main.request("GET", "/cache/stats").status, 404)
        XCTAssertEqual(try main.request("GET", "/metrics").status, 404)
        XCTAssertEqual(try admin.request("GET", "/cache/stats").status, 200)
        XCTAssertEqual(try admin.request("GET", "/metrics").status, 200)
        XCTAssertEqual(try admin.request("GET", "/healthz").status, 200)
        XCTAssertEqual(try main.request("GET", "/healthz").status, 200)
        XCTAssertEqual(try admin.fetch(["url": url(uniquePath())]).status, 404)
    }
}

/// `--redact-query`: secret query values stay out of the database and the admin listing, yet
/// still tell entries apart.
final class QueryRedactionIntegrationTests: IntegrationTestCase {
    func testSecretQueryValuesNeverReachTheDatabase() throws {
        let larder = try startLarder()
        let client = try larder.connection()
        let path = uniquePath()
        let secret = "s3cret-\(UUID().uuidString)"
        // (size=: the origin answers without echoing the request, whose query holds the secret.)
        let spec: [String: Any] = ["url": url(path, "api_key=\(secret)&size=10"), "cache": ["ttl": 600]]
        XCTAssertEqual(try client.fetch(spec).outcome, "miss")
        XCTAssertEqual(try client.fetch(spec).outcome, "hit")
        XCTAssertEqual(
            try client.fetch(["url": url(path, "api_key=other&size=10"), "cache": ["ttl": 600]]).outcome, "miss",
            "the value still counts in the key")
        let listed = try client.request("GET", "/cache/entries").json["entries"] as? [[String: Any]] ?? []
        XCTAssertTrue(listed.allSatisfy { ($0["url"] as? String)?.contains("api_key=REDACTED") == true }, "\(listed)")
        // An unsafe request to the URL still invalidates it (RFC 9111 §4.4), and a purge by URL finds it.
        _ = try client.fetch(["url": url(path, "api_key=\(secret)&size=10"), "method": "POST"])
        XCTAssertEqual(try client.fetch(spec).outcome, "miss", "invalidated")
        let purge = try client.request(
            "POST", "/cache/purge", headers: ["Content-Type": "application/json"],
            body: Array(try JSONSerialization.data(withJSONObject: ["urls": [url(path, "api_key=\(secret)&size=10")]])))
        XCTAssertGreaterThanOrEqual(purge.json["removed"] as? Int ?? 0, 1, purge.text)
        _ = try client.fetch(spec)
        stopLarder(larder)
        for suffix in ["", "-wal"] {
            let data = FileManager.default.contents(atPath: databasePath + suffix) ?? Data()
            XCTAssertNil(data.range(of: Data(secret.utf8)), "the secret is not in \(databasePath + suffix)")
        }
    }
}
