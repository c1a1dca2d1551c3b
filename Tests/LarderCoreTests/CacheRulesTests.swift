import LarderCore
import XCTest

#if canImport(Glibc)
    import Glibc
#endif

final class FreshnessTests: XCTestCase {
    private let now = 1_800_000_000.0

    private func lifetime(_ headers: [(String, String)]) -> Double {
        let fields = headers.map { HeaderField($0.0, $0.1) }
        return CacheRules.freshnessLifetime(
            cacheControl: CacheControl(fields.values("cache-control")), headers: fields,
            receivedAt: now
        ).seconds
    }

    func testSMaxAgeOverMaxAgeOverExpires() {
        let date = HTTPDate.format(now)
        let expires = HTTPDate.format(now + 500)
        XCTAssertEqual(lifetime([("Cache-Control", "max-age=60, s-maxage=120"), ("Expires", expires), ("Date", date)]), 120)
        XCTAssertEqual(lifetime([("Cache-Control", "max-age=60"), ("Expires", expires), ("Date", date)]), 60)
        XCTAssertEqual(lifetime([("Expires", expires), ("Date", date)]), 500)
        XCTAssertEqual(lifetime([("Expires", expires)]), 500, "Date absent: measured from receipt")
        XCTAssertEqual(lifetime([]), 0)
    }

    func testHeuristicFreshnessIsATenthOfTheTimeSinceLastModifiedCappedAtADay() {
        let date = HTTPDate.format(now)
        XCTAssertEqual(lifetime([("Date", date), ("Last-Modified", HTTPDate.format(now - 10_000))]), 1_000)
        XCTAssertEqual(lifetime([("Date", date), ("Last-Modified", HTTPDate.format(now - 10_000_000))]), 86_400)
        XCTAssertEqual(lifetime([("Date", date), ("Last-Modified", HTTPDate.format(now + 100))]), 0, "a future Last-Modified")
        XCTAssertEqual(
            lifetime([("Cache-Control", "max-age=5"), ("Last-Modified", HTTPDate.format(now - 10_000))]), 5,
            "explicit freshness wins")
        let fields = [HeaderField("Date", date), HeaderField("Last-Modified", HTTPDate.format(now - 10_000))]
        XCTAssertEqual(
            CacheRules.freshnessLifetime(status: 302, cacheControl: CacheControl([]), headers: fields, receivedAt: now).source,
            .none, "302 is not heuristically cacheable")
        XCTAssertEqual(
            CacheRules.freshnessLifetime(
                status: 302, cacheControl: CacheControl(["public"]), headers: fields,
                receivedAt: now
            ).seconds,
            1_000, "unless marked public")
        XCTAssertEqual(
            CacheRules.freshnessLifetime(status: 404, cacheControl: CacheControl([]), headers: fields, receivedAt: now).source,
            .heuristic)
    }

    func testInitialAgeFollowsSection4_2_3() {
        let date = HTTPDate.format(now - 30)
        // Apparent age: arrival minus Date.
        XCTAssertEqual(CacheRules.initialAge(headers: [HeaderField("Date", date)], requestTime: now - 1, responseTime: now), 30)
        // Age header plus the time the exchange took, when larger.
        XCTAssertEqual(
            CacheRules.initialAge(
                headers: [HeaderField("Date", date), HeaderField("Age", "100")],
                requestTime: now - 2, responseTime: now), 102)
        // §5.1: first member of a list; invalid values ignored.
        XCTAssertEqual(CacheRules.initialAge(headers: [HeaderField("Age", "7, 9")], requestTime: now, responseTime: now), 7)
        XCTAssertEqual(CacheRules.initialAge(headers: [HeaderField("Age", "-5")], requestTime: now, responseTime: now), 0)
        XCTAssertEqual(CacheRules.initialAge(headers: [HeaderField("Age", "soon")], requestTime: now - 3, responseTime: now), 3)
        XCTAssertEqual(
            CacheRules.initialAge(
                headers: [HeaderField("Date", HTTPDate.format(now + 60))], requestTime: now,
                responseTime: now), 0,
            "a Date in the future gives no negative age")
    }

    func testInvalidValuesMeanStale() {
        XCTAssertEqual(lifetime([("Expires", "0")]), 0, "RFC 9111 §5.3: invalid Expires = already expired")
        XCTAssertEqual(lifetime([("Expires", HTTPDate.format(now - 100)), ("Date", HTTPDate.format(now))]), 0)
        XCTAssertEqual(lifetime([("Cache-Control", "max-age=abc")]), 0)
        XCTAssertEqual(lifetime([("Cache-Control", "max-age=10, max-age=20")]), 0, "conflicting duplicates")
        XCTAssertEqual(lifetime([("Cache-Control", "max-age=10, max-age=10")]), 10, "identical duplicates are fine")
        XCTAssertEqual(lifetime([("Cache-Control", "no-cache, max-age=100")]), 0)
        XCTAssertEqual(
            lifetime([("Cache-Control", "no-cache=\"X-A\", max-age=100")]), 100,
            "§5.2.2.4: a qualified no-cache withholds fields, it does not force revalidation")
    }

    func testAPostResponseAnswersGetOnlyWithExplicitFreshnessAndItsOwnContentLocation() {
        let fresh = [HeaderField("Cache-Control", "max-age=60")]
        XCTAssertTrue(CacheRules.postResponseAnswersGet(status: 200, headers: fresh, contentLocationIsTarget: true, receivedAt: now))
        XCTAssertFalse(CacheRules.postResponseAnswersGet(status: 200, headers: fresh, contentLocationIsTarget: false, receivedAt: now))
        XCTAssertFalse(CacheRules.postResponseAnswersGet(status: 500, headers: fresh, contentLocationIsTarget: true, receivedAt: now))
        let heuristic = [HeaderField("Date", HTTPDate.format(now)), HeaderField("Last-Modified", HTTPDate.format(now - 10_000))]
        XCTAssertFalse(
            CacheRules.postResponseAnswersGet(status: 200, headers: heuristic, contentLocationIsTarget: true, receivedAt: now),
            "heuristic freshness is not enough")
    }

    func testQualifiedNoCacheAndPrivateWithholdOnlyTheirFields() {
        let headers = [
            HeaderField("Cache-Control", "max-age=60, no-cache=\"X-A\", private=\"x-b, X-C\""),
            HeaderField("X-A", "1"), HeaderField("x-b", "2"), HeaderField("X-C", "3"), HeaderField("X-D", "4")
        ]
        XCTAssertEqual(CacheRules.storableHeaders(headers).map(\.name), ["Cache-Control", "X-D"])
        let decision = CacheRules.store(
            StoreInputs(
                policy: .useProtocol, method: .get, ttl: nil, partitioned: false, status: 200,
                headers: headers, bodySize: 1, maxBodySize: 10, requestTime: now, responseTime: now))
        guard case .store(let stored) = decision else { return XCTFail("a qualified private is stored: \(decision)") }
        XCTAssertEqual(stored.lifetime, 60)
        XCTAssertTrue(CacheControl(["private"]).hasUnqualified("private"))
        XCTAssertFalse(CacheControl(["private=\"X\""]).hasUnqualified("private"))
    }

    func testCacheControlParsing() {
        let parsed = CacheControl(["Public, MAX-AGE=\"30\", community=\"UCI, \\\"x\\\"\"", "private"])
        XCTAssertTrue(parsed.has("public"))
        XCTAssertTrue(parsed.has("private"))
        XCTAssertEqual(parsed.seconds("max-age"), .value(30))
        XCTAssertEqual(parsed.directives.first { $0.name == "community" }?.value, "UCI, \"x\"")
        XCTAssertEqual(CacheControl(["max-age=99999999999"]).seconds("max-age"), .value(2_147_483_648))
        XCTAssertEqual(CacheControl([""]).directives.count, 0)
        XCTAssertEqual(CacheControl(["max-age=003600"]).seconds("max-age"), .value(3600))
        XCTAssertEqual(CacheControl(["max-age='3600'"]).seconds("max-age"), .invalid, "single quotes are not quotes")
        XCTAssertEqual(
            CacheControl(["extension=\"max-age=100\", max-age=1"]).seconds("max-age"), .value(1),
            "max-age inside a quoted string is not a directive")
        XCTAssertEqual(CacheControl(["max-age =100"]).seconds("max-age"), .absent, "no whitespace before =")
        XCTAssertEqual(CacheControl(["max-age= 100"]).seconds("max-age"), .absent, "no whitespace after =")
        XCTAssertTrue(CacheControl(["no-cache , max-age=5"]).has("no-cache"), "whitespace before a comma is fine")
        let unusual = CacheControl(["\tx=\"caf\u{E9} \\\u{E9}\", y=\"open, max-age=7", "z=\"a\\"])
        XCTAssertEqual(unusual.directives.first { $0.name == "x" }?.value, "caf\u{E9} \u{E9}", "UTF-8 inside quotes")
        XCTAssertTrue(unusual.has("y"))
        XCTAssertNil(unusual.directives.first { $0.name == "y" }?.value, "an unterminated quoted string has no value")
        XCTAssertEqual(unusual.seconds("max-age"), .absent, "what follows an unterminated quote is inside it")
        XCTAssertNil(unusual.directives.first { $0.name == "z" }?.value, "a trailing backslash leaves the quote open")
        XCTAssertEqual(CacheControl(["\tMax-Age=5\t, NO-STORE"]).directives.map(\.name), ["max-age", "no-store"])
        XCTAssertEqual(CacheControl(["max-age=5 \t, private"]).seconds("max-age"), .value(5), "trailing spaces are trimmed")
    }

    func testCDNCacheControlIsAStructuredFieldDictionary() {
        func targeted(_ value: String, _ others: [(String, String)] = []) -> CacheControl? {
            CacheRules.targetedCacheControl([HeaderField("CDN-Cache-Control", value)] + others.map { HeaderField($0.0, $0.1) })
        }
        XCTAssertEqual(targeted("max-age=3600, foobar")?.seconds("max-age"), .value(3600))
        XCTAssertEqual(targeted("max-age=99999999999")?.seconds("max-age"), .value(2_147_483_648))
        XCTAssertEqual(targeted("no-store")?.has("no-store"), true)
        XCTAssertEqual(targeted("private, no-cache")?.has("no-cache"), true)
        // RFC 9213 §2.1: a field that is not a valid Dictionary is ignored as a whole…
        XCTAssertNil(targeted("max-age=10000, &&&&&"))
        XCTAssertNil(targeted("MaX-aGe=3600"), "Dictionary keys are lower-case")
        XCTAssertNil(targeted("max-age =100"))
        // …and a directive of the wrong type is ignored on its own.
        XCTAssertEqual(targeted("max-age=\"10000\"")?.seconds("max-age"), .absent)
        XCTAssertEqual(targeted("max-age=-5")?.seconds("max-age"), .invalid)

        // The effective directives: a valid CDN-Cache-Control replaces Cache-Control, an invalid one does not.
        let noStore = [("Cache-Control", "no-store")]
        func effective(cdn: String) -> CacheControl {
            CacheRules.effectiveCacheControl([HeaderField("CDN-Cache-Control", cdn), HeaderField("Cache-Control", "no-store")])
        }
        XCTAssertFalse(effective(cdn: "max-age=60").has("no-store"))
        XCTAssertTrue(effective(cdn: "max-age=60, &&&").has("no-store"))
        XCTAssertNotNil(targeted("max-age=60", noStore))
    }

    func testHTTPDateForms() {
        let expected = 784_111_777.0
        XCTAssertEqual(HTTPDate.parse("Sun, 06 Nov 1994 08:49:37 GMT"), expected)
        XCTAssertEqual(HTTPDate.parse("Sunday, 06-Nov-94 08:49:37 GMT"), expected)
        XCTAssertEqual(HTTPDate.parse("Sun Nov  6 08:49:37 1994"), expected)
        XCTAssertEqual(HTTPDate.format(expected), "Sun, 06 Nov 1994 08:49:37 GMT")
        XCTAssertNil(HTTPDate.parse("yesterday"))
        XCTAssertNil(HTTPDate.parse("Sun, 06 Nov 1994 25:49:37 GMT"))
        // Names ignore case; the rest of the grammar is exact (RFC 9110 §5.6.7).
        XCTAssertEqual(HTTPDate.parse("SUN, 06 NOV 1994 08:49:37 gmt"), expected)
        XCTAssertEqual(HTTPDate.parse(" Sun, 06 Nov 1994 08:49:37 GMT "), expected, "surrounding whitespace is not the value's")
        XCTAssertEqual(HTTPDate.parse("Thursday, 18-Aug-50 02:01:18 GMT"), HTTPDate.parse("Thu, 18 Aug 2050 02:01:18 GMT"))
        XCTAssertEqual(HTTPDate.parse("Thu Aug  8 02:01:18 2050"), HTTPDate.parse("Thu, 08 Aug 2050 02:01:18 GMT"))
        XCTAssertNotNil(HTTPDate.parse("Sun, 21 Nov 2286 04:46:39 GMT"))
        for invalid in [
            "Thu, 18 Aug 2050 02:01:18 UTC", "Thu, 18 Aug 2050 02:01:18 AEST", "Thu, 18 Aug 50 02:01:18 GMT",
            "Thu 18 Aug 2050 02:01:18 GMT", "Thu, 18  Aug  2050 02:01:18 GMT", "Thu, 18-Aug-2050 02:01:18 GMT",
            "Thu, 18 Aug 2050 02.01.18 GMT", "Thu, 18 Aug 2050 2:01:18 GMT", "0", "Thu, 18 Aug 2050 02:01:18"
        ] {
            XCTAssertNil(HTTPDate.parse(invalid), invalid)
        }
    }
}

final class StoreDecisionTests: XCTestCase {
    private func decide(
        policy: CachePolicy = .useProtocol, method: HTTPMethod = .get, ttl: Double? = nil, partitioned: Bool = false,
        status: Int = 200, headers: [(String, String)] = [], size: Int = 10
    ) -> StoreDecision {
        CacheRules.store(
            StoreInputs(
                policy: policy, method: method, ttl: ttl, partitioned: partitioned, status: status,
                headers: headers.map { HeaderField($0.0, $0.1) }, bodySize: size, maxBodySize: 100,
                requestTime: 0, responseTime: 0))
    }

    func testEachRefusalHasItsRule() {
        XCTAssertEqual(decide(policy: .noStore), .refuse(.policyNoStore))
        XCTAssertEqual(decide(method: .put, ttl: 10), .refuse(.methodNotCacheable))
        XCTAssertEqual(decide(method: .post), .refuse(.methodNotCacheable))
        XCTAssertEqual(decide(status: 404), .refuse(.statusNotCacheable))
        XCTAssertEqual(decide(status: 304), .refuse(.statusNotCacheable))
        XCTAssertEqual(decide(ttl: 100, headers: [("Cache-Control", "no-store")]), .refuse(.responseNoStore))
        XCTAssertEqual(decide(headers: [("Cache-Control", "private, max-age=5")]), .refuse(.responsePrivate))
        XCTAssertEqual(decide(size: 101), .refuse(.objectTooLarge))
        XCTAssertEqual(decide(headers: [("Cache-Control", "max-age=5"), ("Vary", "Accept-Language")]), .store(StoredFreshness(lifetime: 5)))
        XCTAssertEqual(decide(headers: [("Cache-Control", "max-age=5"), ("Vary", "*")]), .refuse(.responseVaries))
        var asked = StoreInputs(
            policy: .useProtocol, method: .get, ttl: nil, partitioned: false, status: 200, headers: [],
            bodySize: 1, maxBodySize: 10, requestTime: 0, responseTime: 0)
        asked.directives = RequestDirectives(headers: [HeaderField("Cache-Control", "no-store")])
        XCTAssertEqual(CacheRules.store(asked), .refuse(.requestNoStore))
    }

    func testA206IsStoredOnlyAsAPart() {
        var part = StoreInputs(
            policy: .useProtocol, method: .get, ttl: nil, partitioned: false, status: 206,
            headers: [HeaderField("Cache-Control", "max-age=30")], bodySize: 1, maxBodySize: 10,
            requestTime: 0, responseTime: 0)
        XCTAssertEqual(CacheRules.store(part), .refuse(.statusNotCacheable))
        part.partial = true
        XCTAssertEqual(CacheRules.store(part), .store(StoredFreshness(lifetime: 30)))
    }

    func testStaleAllowancesAreRecorded() {
        XCTAssertEqual(
            decide(headers: [("Cache-Control", "max-age=5, stale-while-revalidate=30, stale-if-error=600")]),
            .store(StoredFreshness(lifetime: 5, staleWhileRevalidate: 30, staleIfError: 600)))
        XCTAssertEqual(
            decide(headers: [("Cache-Control", "max-age=5, must-revalidate")]),
            .store(StoredFreshness(lifetime: 5, mustRevalidate: true)))
        XCTAssertEqual(
            decide(headers: [("Cache-Control", "max-age=5, proxy-revalidate")]),
            .store(StoredFreshness(lifetime: 5, mustRevalidate: true)))
    }

    func testNonSuccessStatusesAreStoredOnlyWhenTheResponseMakesThemFresh() {
        XCTAssertEqual(decide(status: 404, headers: [("Cache-Control", "max-age=30")]), .store(StoredFreshness(lifetime: 30)))
        XCTAssertEqual(decide(status: 301, headers: [("Cache-Control", "max-age=3600")]), .store(StoredFreshness(lifetime: 3600)))
        XCTAssertEqual(decide(status: 404), .refuse(.statusNotCacheable), "no freshness, not stored")
        XCTAssertEqual(
            decide(ttl: 60, status: 404, headers: [("Cache-Control", "max-age=30")]), .store(StoredFreshness(lifetime: 30)),
            "kept for its own lifetime, not the caller's ttl (which judges 2xx entries only)")
        XCTAssertEqual(decide(ttl: 60, status: 404), .refuse(.statusNotCacheable), "a caller's ttl never keeps an error")
        XCTAssertEqual(decide(status: 206, headers: [("Cache-Control", "max-age=30")]), .refuse(.statusNotCacheable))
        XCTAssertEqual(decide(status: 304, headers: [("Cache-Control", "max-age=30")]), .refuse(.statusNotCacheable))
        XCTAssertEqual(decide(status: 100, headers: [("Cache-Control", "max-age=30")]), .refuse(.statusNotCacheable))
    }

    func testMustUnderstandOverridesNoStoreForUnderstoodStatuses() {
        XCTAssertEqual(decide(headers: [("Cache-Control", "max-age=5, no-store, must-understand")]), .store(StoredFreshness(lifetime: 5)))
        XCTAssertEqual(
            decide(status: 299, headers: [("Cache-Control", "max-age=5, no-store, must-understand")]),
            .refuse(.statusNotCacheable), "a status Larder does not understand")
        XCTAssertEqual(decide(headers: [("Cache-Control", "max-age=5, no-store")]), .refuse(.responseNoStore))
    }

    func testStoredResponses() {
        XCTAssertEqual(decide(headers: [("Cache-Control", "max-age=5")]), .store(StoredFreshness(lifetime: 5)))
        XCTAssertEqual(decide(method: .post, ttl: 10), .store(StoredFreshness(lifetime: 0, ttl: 10)))
        XCTAssertEqual(decide(partitioned: true, headers: [("Cache-Control", "private, max-age=5")]), .store(StoredFreshness(lifetime: 5)))
        XCTAssertEqual(decide(status: 204), .store(StoredFreshness(lifetime: 0)))
        // §4.2.4: no-cache forbids serving stale, as must-revalidate does.
        XCTAssertEqual(
            decide(policy: .reload, headers: [("Cache-Control", "no-cache")]),
            .store(StoredFreshness(lifetime: 0, mustRevalidate: true)))
    }

    /// Operators issue: an entry stored under a caller's ttl expires when that ttl ends, not at
    /// the origin's max-age, while each lookup still judges freshness by its own ttl.
    func testAnEntryExpiresAtTheEndOfTheLifetimeItWasStoredUnder() throws {
        guard case .store(let stored) = decide(ttl: 3600, headers: [("Cache-Control", "max-age=60, stale-if-error=30")]) else {
            return XCTFail("not stored")
        }
        XCTAssertEqual(stored, StoredFreshness(lifetime: 60, staleIfError: 30, ttl: 3600))
        let entry = stored.entry(storedAt: 1000, version: 0)
        XCTAssertEqual(entry.storedTTL, 3600)
        XCTAssertEqual(entry.expiresAt, 4600, "the ttl, from when it was stored")
        XCTAssertEqual(entry.staleUntil, 4630)
        XCTAssertTrue(entry.isFresh(now: 4599, ttl: 3600))
        XCTAssertFalse(entry.isFresh(now: 1061, ttl: nil), "a request without a ttl still goes by HTTP")
        guard case .store(let own) = decide(headers: [("Cache-Control", "max-age=60")]) else { return XCTFail("not stored") }
        let http = own.entry(storedAt: 1000, version: 0)
        XCTAssertNil(http.storedTTL)
        XCTAssertEqual(http.expiresAt, 1060)
        var aged = http
        aged.initialAge = 20
        XCTAssertEqual(aged.expiresAt, 1040, "less the age it arrived with")
    }

    func testSMaxageForbidsStaleOnlyInASharedCache() {
        let headers = [HeaderField("Cache-Control", "s-maxage=5")]
        func decision(shared: Bool) -> StoreDecision {
            CacheRules.store(
                StoreInputs(
                    policy: .useProtocol, method: .get, ttl: nil, partitioned: false, status: 200, headers: headers,
                    bodySize: 1, maxBodySize: 100, requestTime: 0, responseTime: 0, shared: shared))
        }
        XCTAssertEqual(decision(shared: true), .store(StoredFreshness(lifetime: 5, mustRevalidate: true)))
        XCTAssertEqual(decision(shared: false), .store(StoredFreshness(lifetime: 5)))
    }
}

final class LookupDecisionTests: XCTestCase {
    private let stored = EntryFreshness(storedAt: 1000, freshnessLifetime: 60, version: 3)

    private func decide(
        _ policy: CachePolicy, method: HTTPMethod = .get, ttl: Double? = nil, version: Int64 = 3,
        entry: EntryFreshness?, now: Double
    ) -> LookupDecision {
        CacheRules.lookup(policy: policy, method: method, ttl: ttl, version: version, entry: entry, now: now)
    }

    func testProtocolPolicyUsesStoredLifetimeOrTTL() {
        XCTAssertEqual(decide(.useProtocol, entry: stored, now: 1059), .serve(fresh: true))
        XCTAssertEqual(decide(.useProtocol, entry: stored, now: 1060), .fetch)
        XCTAssertEqual(decide(.useProtocol, ttl: 300, entry: stored, now: 1299), .serve(fresh: true), "ttl overrides the headers")
        XCTAssertEqual(decide(.useProtocol, ttl: 10, entry: stored, now: 1011), .fetch, "…both ways")
        XCTAssertEqual(decide(.useProtocol, entry: nil, now: 0), .fetch)
    }

    func testVersionMismatchIsNeverServed() {
        XCTAssertEqual(decide(.useProtocol, version: 4, entry: stored, now: 1001), .fetch)
        XCTAssertEqual(decide(.cacheElseLoad, version: 4, entry: stored, now: 1001), .fetch)
        XCTAssertEqual(decide(.cacheOnly, version: 4, entry: stored, now: 1001), .failNotCached)
    }

    func testOtherPolicies() {
        XCTAssertEqual(decide(.reload, entry: stored, now: 1001), .fetch)
        XCTAssertEqual(decide(.noStore, entry: stored, now: 1001), .fetch)
        XCTAssertEqual(decide(.cacheElseLoad, entry: stored, now: 99_999), .serve(fresh: false))
        XCTAssertEqual(decide(.cacheElseLoad, entry: stored, now: 1001), .serve(fresh: true))
        XCTAssertEqual(decide(.cacheElseLoad, entry: nil, now: 1001), .fetch)
        XCTAssertEqual(decide(.cacheOnly, entry: stored, now: 99_999), .serve(fresh: false))
        XCTAssertEqual(decide(.cacheOnly, entry: nil, now: 1001), .failNotCached)
    }

    func testUncacheableMethodsNeverReadTheCache() {
        XCTAssertEqual(decide(.useProtocol, method: .put, entry: stored, now: 1001), .fetch)
        XCTAssertEqual(decide(.useProtocol, method: .post, entry: stored, now: 1001), .fetch)
        XCTAssertEqual(decide(.useProtocol, method: .post, ttl: 100, entry: stored, now: 1001), .serve(fresh: true))
    }

    func testStaleWhileRevalidateWindow() {
        let entry = EntryFreshness(storedAt: 1000, freshnessLifetime: 60, version: 3, staleWhileRevalidate: 30)
        XCTAssertEqual(decide(.useProtocol, entry: entry, now: 1059), .serve(fresh: true))
        XCTAssertEqual(decide(.useProtocol, entry: entry, now: 1089), .serveStaleAndRefresh)
        XCTAssertEqual(decide(.useProtocol, entry: entry, now: 1090), .fetch, "past the window")
        // The caller's window replaces the directive's.
        XCTAssertEqual(
            CacheRules.lookup(
                policy: .useProtocol, method: .get, ttl: nil, version: 3, entry: stored, now: 1100,
                stale: StaleWindows(whileRevalidate: 100)), .serveStaleAndRefresh)
        var strict = entry
        strict.mustRevalidate = true
        XCTAssertEqual(decide(.useProtocol, entry: strict, now: 1070), .fetch, "must-revalidate forbids serving stale")
    }

    func testStaleIfErrorWindow() {
        let entry = EntryFreshness(storedAt: 1000, freshnessLifetime: 60, version: 3, staleIfError: 100)
        XCTAssertTrue(CacheRules.mayServeStaleOnError(entry, now: 1159, ttl: nil, window: nil))
        XCTAssertFalse(CacheRules.mayServeStaleOnError(entry, now: 1160, ttl: nil, window: nil))
        XCTAssertTrue(CacheRules.mayServeStaleOnError(stored, now: 5000, ttl: nil, window: 86400), "the caller's window")
        XCTAssertFalse(CacheRules.mayServeStaleOnError(stored, now: 1100, ttl: nil, window: nil), "no directive, no window")
        var strict = entry
        strict.mustRevalidate = true
        XCTAssertFalse(CacheRules.mayServeStaleOnError(strict, now: 1100, ttl: nil, window: 1000))
        // RFC 5861 §4: the request's stale-if-error may widen the window, never narrow it.
        XCTAssertTrue(CacheRules.mayServeStaleOnError(entry, now: 1200, ttl: nil, window: nil, requested: 300))
        XCTAssertTrue(CacheRules.mayServeStaleOnError(entry, now: 1159, ttl: nil, window: nil, requested: 1))
        XCTAssertFalse(CacheRules.mayServeStaleOnError(stored, now: 1100, ttl: nil, window: nil, requested: 1))
        XCTAssertFalse(CacheRules.mayServeStaleOnError(strict, now: 1100, ttl: nil, window: nil, requested: 1000))
        XCTAssertEqual(RequestDirectives(headers: [HeaderField("Cache-Control", "stale-if-error=30")]).staleIfError, 30)
        XCTAssertEqual([500, 502, 503, 504].map(CacheRules.isServerError), [true, true, true, true])
        XCTAssertFalse(CacheRules.isServerError(501))
        XCTAssertFalse(CacheRules.isServerError(404))
    }

    func testRequestDirectivesParsing() {
        let parsed = RequestDirectives(headers: [HeaderField("Cache-Control", "max-age=10, min-fresh=5, max-stale, only-if-cached")])
        XCTAssertEqual(parsed.maxAge, 10)
        XCTAssertEqual(parsed.minFresh, 5)
        XCTAssertEqual(parsed.maxStale, .infinity)
        XCTAssertTrue(parsed.onlyIfCached)
        XCTAssertEqual(RequestDirectives(headers: [HeaderField("Cache-Control", "max-stale=30")]).maxStale, 30)
        XCTAssertEqual(RequestDirectives(headers: [HeaderField("Cache-Control", "max-age=x")]).maxAge, 0)
        XCTAssertTrue(RequestDirectives(headers: [HeaderField("Pragma", "no-cache")]).noCache)
        XCTAssertFalse(
            RequestDirectives(headers: [HeaderField("Pragma", "no-cache"), HeaderField("Cache-Control", "max-age=5")]).noCache,
            "Pragma only counts without Cache-Control")
    }

    func testRequestDirectivesNarrowWhatIsServed() {
        func decide(_ header: String, entry: EntryFreshness? = nil, now: Double) -> LookupDecision {
            CacheRules.lookup(
                policy: .useProtocol, method: .get, ttl: nil, version: 3, entry: entry ?? stored, now: now,
                directives: RequestDirectives(headers: [HeaderField("Cache-Control", header)]))
        }
        XCTAssertEqual(decide("no-cache", now: 1001), .fetch)
        XCTAssertEqual(decide("max-age=10", now: 1005), .serve(fresh: true))
        XCTAssertEqual(decide("max-age=10", now: 1011), .fetch, "older than the caller accepts")
        XCTAssertEqual(decide("min-fresh=30", now: 1020), .serve(fresh: true))
        XCTAssertEqual(decide("min-fresh=30", now: 1031), .fetch, "not fresh for long enough")
        XCTAssertEqual(decide("max-stale=100", now: 1150), .serve(fresh: false))
        XCTAssertEqual(decide("max-stale=100", now: 1161), .fetch)
        XCTAssertEqual(decide("max-stale", now: 99_999), .serve(fresh: false))
        var strict = stored
        strict.mustRevalidate = true
        XCTAssertEqual(decide("max-stale", entry: strict, now: 1100), .fetch, "must-revalidate beats max-stale")
        XCTAssertEqual(decide("only-if-cached", now: 1001), .serve(fresh: true))
        XCTAssertEqual(decide("only-if-cached", now: 2000), .failNotCached)
        XCTAssertEqual(
            CacheRules.lookup(
                policy: .useProtocol, method: .get, ttl: nil, version: 3, entry: nil, now: 0,
                directives: RequestDirectives(headers: [HeaderField("Cache-Control", "only-if-cached")])),
            .failNotCached)
    }

    func testAgeAndRemaining() {
        XCTAssertEqual(stored.age(now: 1012, ttl: nil), 12)
        XCTAssertEqual(stored.age(now: 900, ttl: nil), 0, "a clock that went backwards never gives a negative age")
        let aged = EntryFreshness(storedAt: 1000, freshnessLifetime: 60, version: 3, initialAge: 50)
        XCTAssertEqual(aged.age(now: 1012, ttl: nil), 62, "HTTP age counts the age on arrival")
        XCTAssertEqual(aged.age(now: 1012, ttl: 300), 12, "a ttl counts from when it was stored")
        XCTAssertFalse(aged.isFresh(now: 1012, ttl: nil))
        XCTAssertEqual(stored.remaining(now: 1012, ttl: 300), 288)
        XCTAssertEqual(stored.remaining(now: 2000, ttl: nil), 0)
    }
}

final class AccessPolicyTests: XCTestCase {
    /// Parses with the C library, as the adapter's addresses come from it.
    private func address(_ text: String) -> IPAddress {
        if text.contains(":") {
            var raw = in6_addr()
            precondition(inet_pton(AF_INET6, text, &raw) == 1, text)
            return withUnsafeBytes(of: raw) { IPAddress(bytes: Array($0))! }
        }
        var raw = in_addr()
        precondition(inet_pton(AF_INET, text, &raw) == 1, text)
        return withUnsafeBytes(of: raw) { IPAddress(bytes: Array($0))! }
    }

    func testMetadataAndLinkLocalAreAlwaysRefused() {
        let open = UpstreamAccessPolicy()
        XCTAssertNotNil(open.refusal(forAddress: address("169.254.169.254")))
        XCTAssertNotNil(open.refusal(forAddress: address("169.254.0.1")))
        XCTAssertNotNil(open.refusal(forAddress: address("fe80::1")))
        XCTAssertNotNil(open.refusal(forAddress: address("fd00:ec2::254")))
        XCTAssertNotNil(open.refusal(forAddress: address("::ffff:169.254.169.254")), "IPv4-mapped")
        XCTAssertNil(open.refusal(forAddress: address("127.0.0.1")))
        XCTAssertNil(open.refusal(forAddress: address("10.1.2.3")))
        XCTAssertNil(open.refusal(forAddress: address("93.184.216.34")))
    }

    func testDenyPrivate() {
        let strict = UpstreamAccessPolicy(denyPrivate: true)
        for refused in [
            "127.0.0.1", "127.255.0.1", "10.0.0.1", "172.16.0.1", "172.31.255.255", "192.168.1.1", "100.64.0.1",
            "0.0.0.0", "::1", "::", "fc00::1", "fd12:3456::1", "::ffff:127.0.0.1", "224.0.0.1"
        ] {
            XCTAssertNotNil(strict.refusal(forAddress: address(refused)), refused)
        }
        for allowed in ["172.32.0.1", "8.8.8.8", "2001:db8::1", "93.184.216.34"] {
            XCTAssertNil(strict.refusal(forAddress: address(allowed)), allowed)
        }
    }

    func testAllowHostPatterns() {
        let policy = UpstreamAccessPolicy(allowHosts: ["api.example.com", "*.cdn.example.com"])
        XCTAssertNil(policy.refusal(forHost: "api.example.com"))
        XCTAssertNil(policy.refusal(forHost: "API.Example.COM"))
        XCTAssertNil(policy.refusal(forHost: "a.b.cdn.example.com"))
        XCTAssertNotNil(policy.refusal(forHost: "cdn.example.com"))
        XCTAssertNotNil(policy.refusal(forHost: "evilcdn.example.com"))
        XCTAssertNotNil(policy.refusal(forHost: "example.com"))
        XCTAssertNil(UpstreamAccessPolicy().refusal(forHost: "anything.test"))
    }
}

final class TargetedAndNegativeCachingTests: XCTestCase {
    private func inputs(
        status: Int, headers: [(String, String)] = [], ttl: Double? = nil, negative: [Int: Double] = [:]
    ) -> StoreInputs {
        var inputs = StoreInputs(
            policy: .useProtocol, method: .get, ttl: ttl, partitioned: false, status: status,
            headers: headers.map { HeaderField($0.0, $0.1) }, bodySize: 1, maxBodySize: 10, requestTime: 0, responseTime: 0)
        inputs.negativeTTL = NegativeTTL(negative)
        return inputs
    }

    func testTheFirstValidTargetedFieldWins() {
        let headers = [
            HeaderField("Larder-Cache-Control", "max-age=300"), HeaderField("CDN-Cache-Control", "max-age=100"),
            HeaderField("Cache-Control", "max-age=10")
        ]
        XCTAssertEqual(CacheRules.effectiveCacheControl(headers).seconds("max-age"), .value(300), "Larder's own field first")
        XCTAssertEqual(
            CacheRules.effectiveCacheControl(headers, targeted: ["cdn-cache-control"]).seconds("max-age"), .value(100),
            "a list without it ignores it")
        XCTAssertEqual(CacheRules.effectiveCacheControl(headers, targeted: []).seconds("max-age"), .value(10))
        // RFC 9213 §2.2: an invalid field is skipped for the next one in the list.
        let invalid = [HeaderField("Larder-Cache-Control", "max-age=300, &&&")] + headers.dropFirst()
        XCTAssertEqual(CacheRules.effectiveCacheControl(invalid).seconds("max-age"), .value(100))
        // Its directives decide storing too: no-store for Larder alone.
        let own = [HeaderField("Larder-Cache-Control", "no-store"), HeaderField("Cache-Control", "public, max-age=600")]
        var decision = inputs(status: 200)
        decision.headers = own
        XCTAssertEqual(CacheRules.store(decision), .refuse(.responseNoStore))
        decision.targetedFields = []
        XCTAssertEqual(CacheRules.store(decision), .store(StoredFreshness(lifetime: 600)))
    }

    func testNegativeLifetimesApplyOnlyWithoutExplicitFreshness() {
        XCTAssertEqual(CacheRules.store(inputs(status: 404)), .refuse(.statusNotCacheable), "none set: RFC 9111 alone")
        XCTAssertEqual(CacheRules.store(inputs(status: 404, negative: [404: 30])), .store(StoredFreshness(lifetime: 30)))
        XCTAssertEqual(CacheRules.store(inputs(status: 502, negative: [502: 5])), .store(StoredFreshness(lifetime: 5)))
        XCTAssertEqual(CacheRules.store(inputs(status: 503, negative: [502: 5])), .refuse(.statusNotCacheable), "by status")
        XCTAssertEqual(CacheRules.store(inputs(status: 404, negative: [404: 0])), .refuse(.statusNotCacheable), "0 is off")
        // The response's own explicit freshness wins, whatever it is…
        XCTAssertEqual(
            CacheRules.store(inputs(status: 404, headers: [("Cache-Control", "max-age=5")], negative: [404: 30])),
            .store(StoredFreshness(lifetime: 5)))
        XCTAssertEqual(
            CacheRules.store(inputs(status: 404, headers: [("Cache-Control", "max-age=0")], negative: [404: 30])),
            .refuse(.statusNotCacheable))
        // …a heuristic one does not: the lifetime chosen is meant.
        let lastModified = [("Date", "Sun, 06 Nov 1994 08:49:37 GMT"), ("Last-Modified", "Sun, 06 Nov 1994 07:49:37 GMT")]
        XCTAssertEqual(
            CacheRules.store(inputs(status: 404, headers: lastModified, negative: [404: 30])), .store(StoredFreshness(lifetime: 30)))
        // The refusals still refuse.
        XCTAssertEqual(
            CacheRules.store(inputs(status: 404, headers: [("Cache-Control", "no-store")], negative: [404: 30])),
            .refuse(.responseNoStore))
        XCTAssertEqual(
            CacheRules.store(inputs(status: 404, headers: [("Cache-Control", "private")], negative: [404: 30])),
            .refuse(.responsePrivate))
        // A caller's ttl keeps no error, but a negative lifetime given with it does, under its own lifetime.
        XCTAssertEqual(CacheRules.store(inputs(status: 404, ttl: 3600)), .refuse(.statusNotCacheable))
        XCTAssertEqual(CacheRules.store(inputs(status: 404, ttl: 3600, negative: [404: 30])), .store(StoredFreshness(lifetime: 30)))
        // Counted from storing: an Age the answer came with does not use it up.
        XCTAssertEqual(
            CacheRules.store(inputs(status: 404, headers: [("Age", "100")], negative: [404: 30])), .store(StoredFreshness(lifetime: 30)))
        // A 5xx kept by a negative lifetime does not replace a stored success; with freshness
        // of its own, or a 404, it does.
        var over = inputs(status: 502, negative: [502: 5, 404: 5])
        over.replacesSuccess = true
        XCTAssertEqual(CacheRules.store(over), .refuse(.storedSuccessKept))
        over.headers = [HeaderField("Cache-Control", "max-age=5")]
        XCTAssertEqual(CacheRules.store(over), .store(StoredFreshness(lifetime: 5)))
        over.headers = []
        over.status = 404
        XCTAssertEqual(CacheRules.store(over), .store(StoredFreshness(lifetime: 5)))
        // An empty targeted field is as if absent.
        XCTAssertEqual(
            CacheRules.store(inputs(status: 200, headers: [("CDN-Cache-Control", ""), ("Cache-Control", "max-age=100")])),
            .store(StoredFreshness(lifetime: 100)))
    }

    func testACallersTTLJudgesOnlySuccessfulEntries() {
        var entry = EntryFreshness(storedAt: 1000, freshnessLifetime: 30, version: 0)
        XCTAssertTrue(entry.isFresh(now: 1100, ttl: 3600))
        entry.judgedByCallerTTL = false
        XCTAssertFalse(entry.isFresh(now: 1100, ttl: 3600), "a 404 kept 30 s is not kept an hour for a caller's ttl")
        XCTAssertTrue(entry.isFresh(now: 1029, ttl: 3600))
        XCTAssertEqual(entry.remaining(now: 1010, ttl: 3600), 20)
    }

    func testNegativeLifetimesOverrideStatusByStatus() throws {
        let deployment = NegativeTTL([404: 30, 502: 5])
        let upstream = NegativeTTL([404: 0, 500: 2])
        XCTAssertEqual(deployment.overridden(by: upstream), NegativeTTL([404: 0, 500: 2, 502: 5]))
        XCTAssertNil(deployment.overridden(by: upstream).lifetime(for: 404))
        XCTAssertEqual(deployment.overridden(by: NegativeTTL()), deployment)

        let parsed = try NegativeTTL.parse(.object(["404": .number(30), "502": .number(JSONNumber("2.5")!)]), field: "cache.negativeTtl")
        XCTAssertEqual(parsed, NegativeTTL([404: 30, 502: 2.5]))
        for (member, field) in [
            ("200", "cache.negativeTtl.200"), ("304", "cache.negativeTtl.304"), ("4044", "cache.negativeTtl"),
            ("abc", "cache.negativeTtl")
        ] {
            XCTAssertThrowsError(try NegativeTTL.parse(.object([member: .number(5)]), field: "cache.negativeTtl")) { error in
                XCTAssertEqual((error as? LarderError)?.field, field)
            }
        }
        XCTAssertThrowsError(try NegativeTTL.parse(.object(["404": .number(-1)]), field: "cache.negativeTtl"))
        XCTAssertThrowsError(try NegativeTTL.parse(.object(["404": .string("30s")]), field: "cache.negativeTtl"))
        XCTAssertThrowsError(try NegativeTTL.parse(.array([]), field: "cache.negativeTtl"))
    }
}

final class SoftPurgeRulesTests: XCTestCase {
    func testASoftPurgedEntryIsStaleFromThenOnAndItsWindowsCountFromThen() {
        var entry = EntryFreshness(storedAt: 1000, freshnessLifetime: 600, version: 0, staleIfError: 60)
        XCTAssertTrue(entry.isFresh(now: 1100, ttl: nil))
        entry.invalidatedAt = 1100
        XCTAssertFalse(entry.isFresh(now: 1100, ttl: nil))
        XCTAssertFalse(entry.isFresh(now: 1100, ttl: 3600), "whatever a caller's ttl says")
        XCTAssertEqual(entry.remaining(now: 1100, ttl: nil), 0)
        XCTAssertEqual(entry.staleness(now: 1130, ttl: nil), 30)
        XCTAssertTrue(CacheRules.mayServeStaleOnError(entry, now: 1159, ttl: nil, window: nil))
        XCTAssertFalse(CacheRules.mayServeStaleOnError(entry, now: 1160, ttl: nil, window: nil))
        XCTAssertEqual(entry.expiresAt, 1100)
        XCTAssertEqual(entry.staleUntil, 1160)
        // Before the mark it was still fresh; stale already, the longer staleness counts.
        XCTAssertTrue(entry.isFresh(now: 1099, ttl: nil))
        entry.invalidatedAt = 2000
        XCTAssertEqual(entry.staleness(now: 2100, ttl: nil), 500)
        // A revalidation stores a new freshness: no mark.
        XCTAssertNil(StoredFreshness(lifetime: 600).entry(storedAt: 2100, version: 0).invalidatedAt)
    }
}

final class ForwardReasonTests: XCTestCase {
    func testWhyARequestGoesUpstream() {
        func reason(
            cacheable: Bool = true, policy: CachePolicy = .useProtocol, partOnly: Bool = false, entryFresh: Bool? = nil,
            other: Bool = false, variants: Bool = false
        ) -> ForwardReason {
            ForwardReason.of(
                cacheable: cacheable, policy: policy, partOnly: partOnly, entryFresh: entryFresh, foundOtherVersion: other,
                otherVariants: variants)
        }
        XCTAssertEqual(reason(cacheable: false, policy: .noStore), .method)
        XCTAssertEqual(reason(policy: .noStore, entryFresh: true), .bypass)
        XCTAssertEqual(reason(policy: .reload), .request)
        XCTAssertEqual(reason(partOnly: true), .partial)
        XCTAssertEqual(reason(entryFresh: true), .request, "a fresh entry the request refused")
        XCTAssertEqual(reason(entryFresh: false), .stale)
        XCTAssertEqual(reason(other: true), .miss)
        XCTAssertEqual(reason(variants: true), .varyMiss)
        XCTAssertEqual(reason(), .uriMiss)
    }
}
