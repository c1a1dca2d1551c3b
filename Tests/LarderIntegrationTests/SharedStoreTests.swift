// Several Larder instances on one Redis (issue 10): hits shared, purges and namespace versions
// reaching every instance's memory tier, misses coalesced across instances, Redis lost and back.
// Each test starts its own redis-server on a loopback port.

import Foundation
import LarderCore
import LarderService
import LarderServiceTesting
import LarderSync
import XCTest

final class SharedStoreTests: SharedStoreTestCase {
    func testAHitStoredByOneInstanceIsServedByAnother() throws {
        let first = try startShared().connection()
        let second = try startShared().connection()
        let path = uniquePath()
        let spec: [String: Any] = ["url": url(path, "cc=max-age%3D600"), "cache": ["tags": ["shared"]]]
        XCTAssertEqual(try first.fetch(spec).outcome, "miss")
        let hit = try second.fetch(spec)
        XCTAssertEqual(hit.outcome, "hit", hit.text)
        XCTAssertEqual(hit.originCount, 1)
        XCTAssertEqual(origin.count(path), 1, "one origin request for both instances")
        // The proxy's entries too.
        let proxied = try startShared { $0.upstreams = [NamedUpstream(name: "origin", baseURL: self.origin.base)] }.connection()
        let again = try startShared { $0.upstreams = [NamedUpstream(name: "origin", baseURL: self.origin.base)] }.connection()
        XCTAssertEqual(
            try proxied.request("GET", "/proxy/origin\(path)/p?cc=max-age%3D600").headers["cache-status"]?.contains("fwd=uri-miss"), true)
        XCTAssertEqual(try again.request("GET", "/proxy/origin\(path)/p?cc=max-age%3D600").headers["cache-status"]?.contains("hit"), true)
    }

    func testANegativelyCachedErrorIsSharedAndKeepsItsOwnLifetime() throws {
        let configure: (inout LarderConfiguration) -> Void = {
            $0.upstreams = [NamedUpstream(name: "origin", baseURL: self.origin.base)]
            $0.negativeTTL = NegativeTTL([404: 30])
        }
        let first = try startShared(configure).connection()
        let second = try startShared(configure).connection()
        let path = uniquePath()
        XCTAssertEqual(
            try first.request("GET", "/proxy/origin\(path)?status=404").headers["cache-status"]?.contains("stored; ttl=30"), true)
        let hit = try second.request("GET", "/proxy/origin\(path)?status=404")
        XCTAssertEqual(hit.status, 404)
        XCTAssertEqual(hit.headers["cache-status"], "larder; hit; ttl=30")
        // Read back from Redis, a caller's ttl still does not judge it.
        let fetched: [String: Any] = ["url": url(path + "/f", "status=404"), "cache": ["ttl": 3600, "negativeTtl": ["404": 10]]]
        XCTAssertEqual(try first.fetch(fetched).cache["stored"] as? Bool, true)
        clock.advance(by: 9)
        XCTAssertEqual(try second.fetch(fetched).outcome, "hit")
        clock.advance(by: 2)
        XCTAssertEqual(try second.fetch(fetched).outcome, "miss")
        XCTAssertEqual(origin.count(path), 1)
        XCTAssertEqual(origin.count(path + "/f"), 2)
    }

    func testASoftPurgeOnOneInstanceIsRevalidatedOnAnother() throws {
        let first = try startShared().connection()
        let second = try startShared().connection()
        let path = uniquePath()
        let spec: [String: Any] = ["url": url(path, "cc=max-age%3D600&etag=%22s1%22"), "cache": ["tags": ["shared-soft"]]]
        XCTAssertEqual(try first.fetch(spec).outcome, "miss")
        XCTAssertEqual(try second.fetch(spec).outcome, "hit", "now in the second's memory tier too")
        let purge = try first.request(
            "POST", "/cache/purge", headers: ["Content-Type": "application/json"],
            body: Array(#"{"tags": ["shared-soft"], "soft": true}"#.utf8))
        XCTAssertEqual(purge.json["invalidated"] as? Int, 1, purge.text)
        let revalidated = try eventually {
            try second.fetch(spec)
        } until: {
            $0.outcome == "revalidated"
        }
        XCTAssertEqual(revalidated.upstreamBody["n"] as? Int, 1, "the stored body, confirmed by a 304")
        XCTAssertEqual(origin.requests(path).last?.headers["if-none-match"], "\"s1\"")
        XCTAssertEqual(try first.fetch(spec).outcome, "hit", "the revalidated entry is shared")
    }

    func testACacheGroupInvalidatedOnOneInstanceIsRevalidatedOnAnother() throws {
        let configure: (inout LarderConfiguration) -> Void = { $0.upstreams = [NamedUpstream(name: "origin", baseURL: self.origin.base)] }
        let first = try startShared(configure).connection()
        let second = try startShared(configure).connection()
        let path = uniquePath()
        let target = "/proxy/origin\(path)/a?cc=max-age%3D600&etag=%22g1%22&h=Cache-Groups:%22shared-group%22"
        _ = try first.request("GET", target)
        XCTAssertEqual(try second.request("GET", target).headers["cache-status"], "larder; hit; ttl=600")
        let post = try first.request("POST", "/proxy/origin\(path)/write?h=Cache-Group-Invalidation:%22shared-group%22", body: [1])
        XCTAssertEqual(post.status, 200)
        let revalidated = try eventually {
            try second.request("GET", target)
        } until: {
            $0.headers["cache-status"] == "larder; fwd=stale; fwd-status=304; stored; ttl=600"
        }
        XCTAssertEqual(revalidated.status, 200)
        XCTAssertEqual(origin.requests("\(path)/a").last?.headers["if-none-match"], "\"g1\"")
    }

    func testAResponseStoredUnderNoVarySearchIsSharedAndEachInstanceLearnsItsRule() throws {
        let first = try startShared().connection()
        let second = try startShared().connection()
        let path = uniquePath()
        let rule = "cc=max-age%3D600&h=No-Vary-Search:params%3D(%22utm%22)"
        XCTAssertEqual(try first.fetch(["url": url(path, "\(rule)&utm=a")]).outcome, "miss")
        XCTAssertEqual(try first.fetch(["url": url(path, "\(rule)&utm=b")]).outcome, "hit")
        // Stored under the key of the URL without utm, which the second instance finds as it is…
        XCTAssertEqual(try second.fetch(["url": url(path, rule)]).outcome, "hit")
        // …and learns the rule from the first response it stores itself.
        XCTAssertEqual(try second.fetch(["url": url(path, "\(rule)&utm=c")]).outcome, "miss")
        XCTAssertEqual(try second.fetch(["url": url(path, "\(rule)&utm=d")]).outcome, "hit")
        XCTAssertEqual(origin.count(path), 2)
    }

    func testPurgesAndNamespaceVersionsReachEveryInstancesMemoryTier() throws {
        let first = try startShared().connection()
        let second = try startShared().connection()
        let base = uniquePath()
        let spec = { (name: String) -> [String: Any] in ["url": self.url("\(base)/\(name)"), "cache": ["ttl": 600, "namespace": "pages"]] }
        _ = try first.fetch(spec("a"))
        XCTAssertEqual(try second.fetch(spec("a")).outcome, "hit", "now in the second instance's memory tier too")

        XCTAssertEqual(try first.request("DELETE", "/cache?namespace=pages").json["removed"] as? Int, 1)
        XCTAssertTrue(
            try eventually {
                ((try second.request("GET", "/cache/stats").json["memoryTier"] as? [String: Any])?["bytes"] as? Int) == 0
            }, "the second instance's memory tier forgot the purged entry")
        XCTAssertEqual(try second.fetch(spec("a")).outcome, "miss")
        XCTAssertEqual(try first.fetch(spec("a")).outcome, "hit", "stored again by the second")

        let bumped = try first.request(
            "POST", "/cache/namespaces/pages/version", headers: ["Content-Type": "application/json"],
            body: Array(#"{"bump":true}"#.utf8))
        XCTAssertEqual(bumped.json["version"] as? Int, 1, bumped.text)
        XCTAssertTrue(
            try eventually {
                let namespaces = try second.request("GET", "/cache/namespaces").json["namespaces"] as? [[String: Any]] ?? []
                return namespaces.first { $0["name"] as? String == "pages" }?["version"] as? Int == 1
            }, "the second instance uses the new version")
        let after = try second.fetch(spec("a"))
        XCTAssertEqual(after.outcome, "miss")
        XCTAssertEqual(after.cache["version"] as? Int, 1)
        XCTAssertEqual(origin.count("\(base)/a"), 3)
    }

    func testConcurrentColdRequestsOnThreeInstancesMakeOneOriginRequest() throws {
        let ports = try (0..<3).map { _ in try startShared().port }
        let path = uniquePath()
        let body = String(
            decoding: try JSONSerialization.data(withJSONObject: ["url": url(path, "delay=300&cc=max-age%3D600")]), as: UTF8.self)
        let outcomes = Locked<[String: Int]>([:])
        XCTAssertTrue(
            concurrently(150) { index in
                guard let connection = try? TestConnection(port: ports[index % 3]), let response = try? connection.fetchRaw(body) else {
                    return outcomes.withLock { $0["error", default: 0] += 1 }
                }
                outcomes.withLock { $0[response.outcome ?? "status \(response.status)", default: 0] += 1 }
            })
        let counted = outcomes.withLock { $0 }
        XCTAssertEqual(origin.count(path), 1, "\(counted)")
        XCTAssertEqual(counted["miss"], 1, "\(counted)")
        XCTAssertEqual(counted["hit"], 149, "\(counted)")
    }

    func testAStoredMissSendsRedisFourCommands() throws {
        // What Redis is sent per miss, read from MONITOR: a client's commands show with its
        // address, a script's own calls with "lua". The lookup, the lease, the entry with the
        // lease's release, the URL's index.
        let client = try startShared().connection()
        let path = uniquePath()
        XCTAssertEqual(try client.fetch(["url": url(path + "/warm", "cc=max-age%3D600")]).outcome, "miss")
        let monitor = try RedisMonitor(port: redis.port)
        defer { monitor.stop() }
        let misses = 30
        for index in 0..<misses {
            XCTAssertEqual(try client.fetch(["url": url(path + "/\(index)", "cc=max-age%3D600")]).outcome, "miss")
        }
        let lines = try monitor.linesUntilMarker(using: redis)
        let sent = lines.filter { !$0.contains(" lua]") }
        let named = Dictionary(grouping: sent) { line in
            line.split(separator: "\"").dropFirst().first.map { $0.uppercased() } ?? "?"
        }.mapValues(\.count)
        XCTAssertEqual(named["HGETALL"], misses, "\(named)")
        XCTAssertNil(named["PTTL"], "the lease's deadline comes with the attempt to take it")
        // Besides the misses' own, a timer's command (hit counts, the secret's check) or an
        // admission's look at Redis's memory may fall in the window.
        XCTAssertLessThanOrEqual(sent.count, 4 * misses + 3, "\(named)")
        XCTAssertEqual(origin.count(path + "/0"), 1)
    }

    func testALeaderThatDiesIsReplacedWhenItsLeaseLapses() throws {
        // A lease taken by an instance that is gone (set by hand): the next cold request waits
        // for it to lapse, then leads itself.
        let larder = try startShared()
        let client = try larder.connection()
        let path = uniquePath()
        let spec: [String: Any] = ["url": url(path), "cache": ["ttl": 600]]
        let first = try client.fetch(spec)
        let key = try XCTUnwrap(first.cache["key"] as? String)
        XCTAssertEqual(try client.request("DELETE", "/cache/entries/\(key)").status, 204)
        try redis.command(["SET", "larder:{\(key)}:lease", "dead-instance", "PX", "700"])
        let started = Date()
        let second = try client.fetch(spec)
        XCTAssertEqual(second.outcome, "miss")
        XCTAssertGreaterThanOrEqual(Date().timeIntervalSince(started), 0.6, "it waited for the lease")
        XCTAssertEqual(origin.count(path), 2)
    }

    func testRedisLostWhileRunningPassesThroughAndCachingResumes() throws {
        let larder = try startShared()
        let client = try larder.connection()
        let path = uniquePath()
        let spec: [String: Any] = ["url": url(path), "cache": ["ttl": 600]]
        XCTAssertEqual(try client.request("GET", "/healthz").json["storage"] as? String, "ok")
        let port = redis.port
        redis.stop()
        let passed = try client.fetch(spec)
        XCTAssertEqual(passed.status, 200, "answered from the origin")
        XCTAssertEqual(passed.cache["stored"] as? Bool, false)
        XCTAssertEqual(try client.request("GET", "/healthz").json["storage"] as? String, "degraded")
        XCTAssertTrue(try client.request("GET", "/metrics").text.contains("larder_store_errors_total"))

        redis = try RedisServer(port: port)
        XCTAssertTrue(try eventually { try client.fetch(spec).cache["stored"] as? Bool == true }, "stores again once Redis is back")
        XCTAssertEqual(try client.request("GET", "/healthz").json["storage"] as? String, "ok")
        XCTAssertEqual(try client.fetch(spec).outcome, "hit")
    }

    /// GET /readyz: 503 while Redis fails (its secret check every 10 s keeps failing too), and
    /// 200 again once it answers; /livez and /healthz stay 200. With --ready-while-degraded, 200
    /// throughout.
    func testReadyzLeavesRotationWhileRedisFailsAndComesBack() throws {
        let client = try startShared().connection()
        let lenient = try startShared { $0.readyWhileDegraded = true }.connection()
        let spec: [String: Any] = ["url": url(uniquePath()), "cache": ["ttl": 600]]
        XCTAssertEqual(try client.request("GET", "/readyz").status, 200)
        let port = redis.port
        redis.stop()
        XCTAssertEqual(try client.fetch(spec).cache["stored"] as? Bool, false)
        let unready = try client.request("GET", "/readyz")
        XCTAssertEqual(unready.status, 503, unready.text)
        XCTAssertEqual(unready.json["status"] as? String, "not_ready")
        XCTAssertEqual(unready.json["storage"] as? String, "degraded")
        XCTAssertEqual(try client.request("GET", "/livez").status, 200, "alive all the same")
        XCTAssertEqual(try client.request("GET", "/healthz").status, 200)
        XCTAssertEqual(try client.fetch(spec).status, 200, "and still answering, uncached")

        XCTAssertEqual(try lenient.fetch(spec).cache["stored"] as? Bool, false)
        let stillReady = try lenient.request("GET", "/readyz")
        XCTAssertEqual(stillReady.status, 200, "--ready-while-degraded")
        XCTAssertEqual(stillReady.json["storage"] as? String, "degraded")

        redis = try RedisServer(port: port)
        XCTAssertTrue(try eventually { try client.fetch(spec).cache["stored"] as? Bool == true }, "stores again once Redis is back")
        let ready = try client.request("GET", "/readyz")
        XCTAssertEqual(ready.status, 200, "healthy again: ready at once")
        XCTAssertEqual(ready.json["storage"] as? String, "ok")
    }

    func testRedisDownAtStartFailsUnlessPassThroughIsChosen() throws {
        let port = redis.port
        redis.stop()
        XCTAssertThrowsError(
            try startLarder { configuration in
                configuration.store = "redis://127.0.0.1:\(port)"
                configuration.secretPath = self.secretFile
            })
        let larder = try startLarder { configuration in
            configuration.store = "redis://127.0.0.1:\(port)"
            configuration.secretPath = self.secretFile
            configuration.storeFallbackPassThrough = true
        }
        let client = try larder.connection()
        let response = try client.fetch(["url": url(uniquePath()), "cache": ["ttl": 600]])
        XCTAssertEqual(response.status, 200)
        XCTAssertEqual(response.cache["stored"] as? Bool, false)
        XCTAssertEqual(try client.request("GET", "/healthz").json["storage"] as? String, "degraded")
    }

    func testADamagedValueIsAMissNeverServed() throws {
        let client = try startShared().connection()
        let path = uniquePath()
        let spec: [String: Any] = ["url": url(path), "cache": ["ttl": 600]]
        let key = try XCTUnwrap(try client.fetch(spec).cache["key"] as? String)
        // A second instance (empty memory tier) reads what Redis holds.
        let reader = try startShared().connection()
        XCTAssertEqual(try reader.fetch(spec).outcome, "hit")
        try redis.command(["HSET", "larder:{\(key)}:e", "e:\(key)", "LRD1 cut short"])
        let third = try startShared().connection()
        let response = try third.fetch(spec)
        XCTAssertEqual(response.outcome, "miss", "the damaged value was not served")
        XCTAssertEqual(origin.count(path), 2)
    }

    /// Issue 33's admission on the shared store: while Redis is full (used_memory at 90% of
    /// maxmemory or more), a first-time object is served unstored and only a ghost of its key is
    /// written; asked for again, on any instance, it is written; explicit intent (a ttl) is written
    /// at once. Below the limit everything is written.
    func testWhileRedisIsFullAnObjectIsWrittenWhenAskedForAgain() throws {
        let first = try startShared().connection()
        let second = try startShared().connection()
        let base = uniquePath()
        let spec = { (name: String) -> [String: Any] in ["url": self.url("\(base)/\(name)", "cc=max-age%3D600")] }
        XCTAssertEqual(try first.fetch(spec("before")).cache["stored"] as? Bool, true, "below the limit: written")

        // Redis at about 93% of its maxmemory: full for admission, with room left (260 KiB, a
        // filler making the memory larger) for what the instances write until they have looked,
        // before Redis's own eviction starts at 100% (it could take the ghosts).
        _ = try redis.send(["SET", "filler", String(repeating: "x", count: 4 << 20)])
        let info = try XCTUnwrap(redis.send(["INFO", "memory"]).text)
        let used = try XCTUnwrap(
            info.split(whereSeparator: \.isNewline).first { $0.hasPrefix("used_memory:") }.flatMap { Int($0.dropFirst(12)) })
        XCTAssertEqual(try redis.command(["CONFIG", "SET", "maxmemory", String(used * 100 / 93)]), "+OK")
        // Each instance looks at Redis's memory at most once a second, as saves come.
        func firstRefusal(on client: TestConnection) throws -> (name: String, key: String)? {
            var refused: (name: String, key: String)?
            _ = try eventually {
                let name = "probe-\(UUID().uuidString)"
                let response = try client.fetch(spec(name))
                guard response.cache["stored"] as? Bool == false else { return false }
                refused = (name, response.cache["key"] as? String ?? "")
                return true
            }
            return refused
        }
        // The second first: the entries it writes until it has looked could push Redis into
        // evicting the first one's ghost.
        XCTAssertNotNil(try firstRefusal(on: second), "the second instance has seen it too")
        let (name, key) = try XCTUnwrap(try firstRefusal(on: first), "a first-time object is refused once Redis is full")
        XCTAssertFalse(try redis.allKeys().contains("larder:{\(key)}:e"), "nothing written for it")
        XCTAssertTrue(try redis.allKeys().contains("larder:{\(key)}:g"), "its ghost is")

        let again = try second.fetch(spec(name))
        XCTAssertEqual(again.outcome, "miss")
        XCTAssertEqual(again.cache["stored"] as? Bool, true, "asked for again, on another instance: written")
        XCTAssertFalse(try redis.allKeys().contains("larder:{\(key)}:g"), "the ghost is spent")
        XCTAssertEqual(try first.fetch(spec(name)).outcome, "hit", "from Redis")
        XCTAssertEqual(origin.count("\(base)/\(name)"), 2)

        let explicit: [String: Any] = ["url": url("\(base)/explicit"), "cache": ["ttl": 600]]
        XCTAssertEqual(try first.fetch(explicit).cache["stored"] as? Bool, true, "a caller's ttl is written at once")
        XCTAssertEqual(try second.fetch(explicit).outcome, "hit")
        XCTAssertEqual(origin.count("\(base)/explicit"), 1)

        let firstAdmission = try XCTUnwrap(
            (try first.request("GET", "/cache/stats").json["stored"] as? [String: Any])?["admission"] as? [String: Any])
        XCTAssertGreaterThanOrEqual(firstAdmission["rejected"] as? Int ?? 0, 1, "\(firstAdmission)")
        XCTAssertGreaterThanOrEqual(firstAdmission["admitted"] as? Int ?? 0, 1, "the explicit entry")
        let secondAdmission = try XCTUnwrap(
            (try second.request("GET", "/cache/stats").json["stored"] as? [String: Any])?["admission"] as? [String: Any])
        XCTAssertEqual(secondAdmission["ghostHits"] as? Int, 1, "\(secondAdmission)")
        let metrics = try first.request("GET", "/metrics").text
        XCTAssertTrue(
            metrics.split(separator: "\n").contains { $0.hasPrefix("larder_admission_rejected_total ") && !$0.hasSuffix(" 0") },
            "the refusals are in /metrics")
    }

    func testTheAdminAPIWorksOnTheSharedStore() throws {
        let first = try startShared().connection()
        let second = try startShared().connection()
        let base = uniquePath()
        _ = try first.fetch(["url": url("\(base)/1"), "cache": ["ttl": 600, "namespace": "alpha", "tags": ["t1"]]])
        _ = try first.fetch(["url": url("\(base)/2"), "cache": ["ttl": 600, "namespace": "alpha"]])
        _ = try first.fetch(["url": url("\(base)/3", "h=Surrogate-Key:t2"), "cache": ["ttl": 600, "namespace": "beta"]])

        let stats = try second.request("GET", "/cache/stats")
        XCTAssertEqual((stats.json["stored"] as? [String: Any])?["entries"] as? Int, 3, stats.text)
        var listed: [[String: Any]] = []
        var cursor: String?
        repeat {
            let page = try second.request("GET", "/cache/entries?limit=1" + (cursor.map { "&cursor=\($0)" } ?? ""))
            XCTAssertEqual(page.status, 200, page.text)
            listed += page.json["entries"] as? [[String: Any]] ?? []
            cursor = page.json["nextCursor"] as? String
        } while cursor != nil
        XCTAssertEqual(Set(listed.compactMap { $0["url"] as? String }).count, 3)
        XCTAssertEqual((try second.request("GET", "/cache/entries?namespace=alpha").json["entries"] as? [Any])?.count, 2)

        let key = try XCTUnwrap(listed.first { ($0["url"] as? String)?.hasSuffix("/1") == true }?["key"] as? String)
        let shown = try second.request("GET", "/cache/entries/\(key)?body=true")
        XCTAssertEqual(((shown.json["variants"] as? [[String: Any]])?.first?["tags"] as? [String]), ["t1"], shown.text)
        XCTAssertNotNil((shown.json["variants"] as? [[String: Any]])?.first?["response"])

        XCTAssertEqual(try second.request("DELETE", "/cache?tag=t2").json["removed"] as? Int, 1)
        // The other instance's memory tier forgets it as the message arrives (cache-only: a look
        // that never goes upstream).
        XCTAssertTrue(
            try eventually {
                try first.fetch(["url": url("\(base)/3", "h=Surrogate-Key:t2"), "cache": ["namespace": "beta", "policy": "cache-only"]])
                    .status == 504
            }, "purged on one instance, gone on the other")
        XCTAssertEqual(try second.request("DELETE", "/cache/entries/\(key)").status, 204)
        XCTAssertEqual(try second.request("DELETE", "/cache/entries/\(key)").status, 404)

        let written = try second.request(
            "PUT", "/cache/entries", headers: ["Content-Type": "application/json"],
            body: Array(
                try JSONSerialization.data(withJSONObject: [
                    "request": ["url": url("\(base)/seeded"), "cache": ["ttl": 600]],
                    "response": ["bodyText": "by hand"]
                ])))
        XCTAssertEqual(written.status, 201, written.text)
        let seeded = try first.fetch(["url": url("\(base)/seeded"), "cache": ["ttl": 600]])
        XCTAssertEqual(seeded.outcome, "hit")
        XCTAssertEqual(seeded.json["bodyText"] as? String, "by hand")

        XCTAssertGreaterThanOrEqual(try first.request("DELETE", "/cache?all=true").json["removed"] as? Int ?? 0, 2)
        XCTAssertEqual((try second.request("GET", "/cache/stats").json["stored"] as? [String: Any])?["entries"] as? Int, 0)
    }

    func testWarmJobsRunOnTheSharedStore() throws {
        let client = try startShared().connection()
        let base = uniquePath()
        let body = try JSONSerialization.data(withJSONObject: ["urls": [url("\(base)/1"), url("\(base)/2")], "cache": ["ttl": 600]])
        let created = try client.request("POST", "/cache/warm", headers: ["Content-Type": "application/json"], body: Array(body))
        XCTAssertEqual(created.status, 202, created.text)
        let id = try XCTUnwrap(created.json["job"] as? String)
        XCTAssertTrue(try eventually { try client.request("GET", "/cache/warm/\(id)").json["state"] as? String == "done" })
        let other = try startShared().connection()
        XCTAssertEqual(try other.fetch(["url": url("\(base)/2"), "cache": ["ttl": 600]]).outcome, "hit")
        XCTAssertEqual(try other.request("GET", "/cache/warm/\(id)").json["done"] as? Int, 2, "jobs are in the shared store")
    }
}

/// Larder on a real Redis Cluster (3 masters, 3 replicas): entries spread over the masters,
/// shared between instances, and a master killed mid-test is failed over while Larder answers.
final class RedisClusterTests: IntegrationTestCase {
    private var cluster: RedisClusterNodes!

    private var secretFile: String!

    override func setUpWithError() throws {
        try super.setUpWithError()
        cluster = try RedisClusterNodes()
        secretFile = try makeSecretFile()
    }

    override func tearDown() {
        super.tearDown()
        cluster?.stop()
    }

    private func startOnCluster() throws -> RunningLarder {
        try startLarder { configuration in
            configuration.store = self.cluster.url
            configuration.secretPath = self.secretFile
            configuration.databasePath = self.directory.appendingPathComponent("unused-\(UUID().uuidString).sqlite").path
        }
    }

    func testEntriesSpreadOverTheMastersAndAreShared() throws {
        let first = try startOnCluster().connection()
        let second = try startOnCluster().connection()
        let base = uniquePath()
        for index in 0..<30 {
            XCTAssertEqual(try first.fetch(["url": url("\(base)/\(index)"), "cache": ["ttl": 600, "tags": ["all"]]]).outcome, "miss")
        }
        for index in 0..<30 {
            XCTAssertEqual(try second.fetch(["url": url("\(base)/\(index)"), "cache": ["ttl": 600]]).outcome, "hit", "index \(index)")
        }
        let populated = cluster.masters().filter {
            (Int((try? $0.bulk(["DBSIZE"]))?.trimmingCharacters(in: .whitespacesAndNewlines) ?? "") ?? 0) > 0
        }
        XCTAssertEqual(populated.count, 3, "entries on every master")
        let stats = try second.request("GET", "/cache/stats")
        XCTAssertEqual((stats.json["stored"] as? [String: Any])?["entries"] as? Int, 30, stats.text)
        var listed = 0
        var cursor: String?
        repeat {
            let page = try second.request("GET", "/cache/entries?limit=7" + (cursor.map { "&cursor=\($0)" } ?? ""))
            listed += (page.json["entries"] as? [Any])?.count ?? 0
            cursor = page.json["nextCursor"] as? String
        } while cursor != nil
        XCTAssertEqual(listed, 30, "the listing visits every master")
        XCTAssertEqual(try first.request("DELETE", "/cache?tag=all").json["removed"] as? Int, 30)
        try eventually { (try second.request("GET", "/cache/stats").json["memoryTier"] as? [String: Any])?["bytes"] as? Int == 0 }
        XCTAssertEqual(try second.fetch(["url": url("\(base)/7"), "cache": ["ttl": 600]]).outcome, "miss", "forgotten by every instance")
    }

    func testAMasterKilledMidTestIsFailedOverWhileLarderKeepsAnswering() throws {
        let client = try startOnCluster().connection()
        let base = uniquePath()
        for index in 0..<20 { _ = try client.fetch(["url": url("\(base)/\(index)"), "cache": ["ttl": 600]]) }
        let victim = try XCTUnwrap(cluster.masters().first)
        victim.stop()
        // During the failover: every answer is the origin's or a correct stored one.
        for index in 0..<20 {
            let response = try client.fetch(["url": url("\(base)/after-\(index)"), "cache": ["ttl": 600]])
            XCTAssertEqual(response.status, 200)
            XCTAssertEqual(response.upstreamBody["path"] as? String, "\(base)/after-\(index)")
        }
        XCTAssertTrue(cluster.waitUntilHealthy(), "a replica took over")
        // Caching works again on every slot: a second instance (empty memory tier) hits what
        // the first stores now.
        let second = try startOnCluster().connection()
        XCTAssertTrue(
            (0..<20).allSatisfy { index in
                (try? client.fetch(["url": url("\(base)/later-\(index)"), "cache": ["ttl": 600]]).cache["stored"] as? Bool) == true
            })
        for index in 0..<20 {
            XCTAssertEqual(try second.fetch(["url": url("\(base)/later-\(index)"), "cache": ["ttl": 600]]).outcome, "hit", "index \(index)")
        }
    }
}
