// GET /metrics through the real server, read with the Prometheus text parser
// (prometheus_client, from PyPI): it parses, and its counters match the traffic sent.

import Foundation
import LarderCore
import LarderService
import LarderServiceTesting
import XCTest

final class MetricsTests: IntegrationTestCase {
    /// Every sample as "name{label="value",…}" → value, sorted labels, via prometheus_client.
    private func parse(_ exposition: [UInt8]) throws -> [String: Double] {
        let script = """
            import sys, json
            from prometheus_client.parser import text_string_to_metric_families
            out = {}
            for family in text_string_to_metric_families(sys.stdin.read()):
                for sample in family.samples:
                    labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
                    out[f"{sample.name}{{{labels}}}"] = sample.value
            print(json.dumps(out))
            """
        let (status, data, errors) = try runToEnd(URL(fileURLWithPath: "/usr/bin/env"), ["python3", "-c", script], stdin: Data(exposition))
        let problem = String(decoding: errors, as: UTF8.self)
        if problem.contains("No module named 'prometheus_client'") {
            throw skipOrFail("prometheus_client is not installed (scripts/setup installs it)")
        }
        XCTAssertEqual(status, 0, "the exposition parses: \(problem)")
        return try JSONSerialization.jsonObject(with: data) as? [String: Double] ?? [:]
    }

    func testTheExpositionParsesAndItsCountersMatchTheTraffic() throws {
        let larder = try startLarder { configuration in
            configuration.upstreams = [NamedUpstream(name: "origin", baseURL: origin.base)]
            configuration.metricsNamespaces = 2
        }
        let client = try larder.connection()
        let base = uniquePath()
        for namespace in ["alpha", "beta", "gamma", "delta"] {
            _ = try client.fetch(["url": url("\(base)/\(namespace)"), "cache": ["ttl": 600, "namespace": namespace]])
            _ = try client.fetch(["url": url("\(base)/\(namespace)"), "cache": ["ttl": 600, "namespace": namespace]])
        }
        _ = try client.request("GET", "/proxy/origin\(base)/p?cc=max-age%3D60")
        _ = try client.request("GET", "/proxy/origin\(base)/p?cc=max-age%3D60")
        _ = try client.fetch(["url": "http://127.0.0.1:1/refused", "cache": ["policy": "no-store"]])
        _ = try client.request("GET", "/nowhere")

        let scraped = try client.request("GET", "/metrics")
        XCTAssertEqual(scraped.status, 200)
        XCTAssertEqual(scraped.headers["content-type"]?.hasPrefix("text/plain; version=0.0.4"), true)
        let samples = try parse(scraped.body)

        XCTAssertEqual(samples[#"larder_requests_total{route="fetch",status="200"}"#], 8)
        XCTAssertEqual(samples[#"larder_requests_total{route="fetch",status="502"}"#], 1)
        XCTAssertEqual(samples[#"larder_requests_total{route="proxy",status="200"}"#], 2)
        XCTAssertEqual(samples[#"larder_requests_total{route="other",status="404"}"#], 1)
        XCTAssertEqual(samples[#"larder_request_duration_seconds_count{route="fetch"}"#], 9)
        // Namespaces: the first two seen keep their label, the rest are "other".
        XCTAssertEqual(samples[#"larder_cache_lookups_total{namespace="alpha",outcome="miss"}"#], 1)
        XCTAssertEqual(samples[#"larder_cache_lookups_total{namespace="alpha",outcome="hit"}"#], 1)
        XCTAssertEqual(samples[#"larder_cache_lookups_total{namespace="other",outcome="hit"}"#], 3, "gamma, delta, the proxy")
        XCTAssertEqual(samples[#"larder_cache_lookups_total{namespace="proxy:origin",outcome="hit"}"#], nil, "past the limit")
        XCTAssertEqual(samples[#"larder_cache_lookups_total{namespace="other",outcome="miss"}"#], 3, "gamma, delta, the proxy")
        XCTAssertEqual(
            samples[#"larder_cache_lookups_total{namespace="other",outcome="bypass"}"#] ?? 0, 0, "a failed request is no lookup outcome")
        XCTAssertEqual(samples[#"larder_cache_lookups_total{namespace="alpha",outcome="coalesced"}"#], 0)
        XCTAssertEqual(samples[#"larder_upstream_requests_total{status="200",upstream="fetch"}"#], 4)
        XCTAssertEqual(samples[#"larder_upstream_requests_total{status="200",upstream="origin"}"#], 1)
        XCTAssertEqual(samples[#"larder_upstream_errors_total{code="upstream_unreachable"}"#], 1)
        XCTAssertEqual(samples[#"larder_upstream_duration_seconds_count{upstream="fetch"}"#], 4)
        XCTAssertEqual(samples[#"larder_cache_entries{}"#], 5)
        XCTAssertGreaterThan(samples[#"larder_cache_bytes{}"#] ?? 0, 0)
        XCTAssertEqual(samples[#"larder_cache_evictions_total{}"#], 0)
        XCTAssertEqual(samples[#"larder_cache_eviction_backlog{}"#], 0)
        // How many misses the key filter answered depends on when its start-up build ended
        // (KeyFilterTests counts them); the counter is exported either way.
        XCTAssertNotNil(samples[#"larder_store_lookups_skipped_total{}"#])
        XCTAssertEqual(samples[#"larder_access_log_dropped_total{}"#], 0)
        XCTAssertGreaterThan(samples[#"larder_memory_tier_bytes{}"#] ?? 0, 0)
        XCTAssertEqual(samples[#"larder_warm_jobs{state="running"}"#], 0)
        XCTAssertGreaterThan(samples[#"process_resident_memory_bytes{}"#] ?? 0, 1_048_576)
        // The heap holds at least the memory tier's entries. (Under a sanitizer, whose allocator
        // replaces glibc's, mallinfo2 reports nothing, in this process as in the server's.)
        if glibcHeapInUse() > 0 {
            XCTAssertGreaterThan(
                samples[#"larder_heap_bytes{state="in_use"}"#] ?? 0,
                max(1_048_576, samples[#"larder_memory_tier_bytes{}"#] ?? .infinity))
        }
        XCTAssertNotNil(samples[#"larder_heap_bytes{state="free"}"#])
        XCTAssertGreaterThan(samples[#"larder_request_memo_bytes{}"#] ?? 0, 0, "the /fetch requests above are remembered")
        XCTAssertGreaterThan(samples[#"process_open_fds{}"#] ?? 0, 3)
        XCTAssertGreaterThan(samples[#"process_start_time_seconds{}"#] ?? 0, 1_700_000_000)
    }

    /// The families named by the exposition's `# TYPE` lines, and those its `# HELP` lines describe
    /// (each with a text) right before them.
    private func families(_ exposition: String) -> (typed: [String], helped: Set<String>) {
        var typed: [String] = []
        var helped: Set<String> = []
        var previous = ""
        for line in exposition.split(separator: "\n").map(String.init) {
            let words = line.split(separator: " ", maxSplits: 3).map(String.init)
            if words.count == 4, words[0] == "#", words[1] == "TYPE" {
                typed.append(words[2])
                let help = previous.split(separator: " ", maxSplits: 3).map(String.init)
                if help.count == 4, help[0] == "#", help[1] == "HELP", help[2] == words[2], !help[3].isEmpty { helped.insert(words[2]) }
            }
            previous = line
        }
        return (typed, helped)
    }

    func testEveryFamilyHasAHelpLineBeforeAndAfterTraffic() throws {
        let larder = try startLarder { $0.upstreams = [NamedUpstream(name: "origin", baseURL: self.origin.base)] }
        let client = try larder.connection()
        let before = families(try client.request("GET", "/metrics").text)
        XCTAssertGreaterThan(before.typed.count, 20)
        XCTAssertEqual(Set(before.typed).subtracting(before.helped).sorted(), [], "families without a # HELP line at start")

        // Traffic makes the families that appear with it: lookups, upstream exchanges, statuses.
        let path = uniquePath()
        _ = try client.fetch(["url": url(path), "cache": ["ttl": 600]])
        _ = try client.fetch(["url": url(path), "cache": ["ttl": 600]])
        _ = try client.request("GET", "/proxy/origin\(path)/p?cc=max-age%3D60")
        _ = try client.request("GET", "/nowhere")
        let scraped = try client.request("GET", "/metrics")
        let after = families(scraped.text)
        XCTAssertTrue(after.typed.contains("larder_cache_lookups_total"))
        XCTAssertTrue(after.typed.contains("larder_upstream_duration_seconds"))
        XCTAssertEqual(Set(after.typed).subtracting(after.helped).sorted(), [], "families without a # HELP line")
        XCTAssertEqual(after.typed.count, Set(after.typed).count, "each family once")
        XCTAssertFalse(try parse(scraped.body).isEmpty, "prometheus_client reads it, HELP lines and all")
    }

    func testBuildInfoAndTheProcessMetrics() throws {
        let client = try startLarder().connection()
        let samples = try parse(try client.request("GET", "/metrics").body)
        XCTAssertEqual(samples[#"larder_build_info{revision="\#(LarderVersion.revision)",version="\#(LarderVersion.string)"}"#], 1)
        XCTAssertEqual(samples.keys.filter { $0.hasPrefix("larder_build_info{") }.count, 1)

        let open = try XCTUnwrap(samples["process_open_fds{}"])
        XCTAssertGreaterThan(open, 3, "stdin, stdout, stderr, the database, the listening socket")
        var limit = rlimit()
        XCTAssertEqual(getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit), 0)
        XCTAssertEqual(samples["process_max_fds{}"], Double(limit.rlim_cur), "the soft open-file limit")
        XCTAssertGreaterThanOrEqual(samples["process_max_fds{}"] ?? 0, open)
        let resident = try XCTUnwrap(samples["process_resident_memory_bytes{}"])
        XCTAssertGreaterThan(resident, 1_048_576)
        XCTAssertGreaterThan(try XCTUnwrap(samples["process_virtual_memory_bytes{}"]), resident)
        let cpu = try XCTUnwrap(samples["process_cpu_seconds_total{}"])
        XCTAssertGreaterThan(cpu, 0, "this process has run")

        // The start time is this process's, as ps(1) tells it (in whole seconds since).
        let now = Date().timeIntervalSince1970
        let start = try XCTUnwrap(samples["process_start_time_seconds{}"])
        XCTAssertLessThanOrEqual(start, now)
        XCTAssertGreaterThan(start, now - 3600 * 24, "not some other epoch")
        let ps = Process()
        ps.executableURL = URL(fileURLWithPath: "/bin/ps")
        ps.arguments = ["-o", "etimes=", "-p", "\(getpid())"]
        let output = Pipe()
        ps.standardOutput = output
        try ps.run()
        let elapsed = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        ps.waitUntilExit()
        let seconds = try XCTUnwrap(Double(elapsed.trimmingCharacters(in: .whitespacesAndNewlines)), elapsed)
        XCTAssertEqual(start, Date().timeIntervalSince1970 - seconds, accuracy: 2.5)

        // CPU time only grows: spend 50 ms of it (several of the kernel's ticks).
        func cpuTime() -> Double {
            var time = timespec()
            clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &time)
            return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
        }
        let until = cpuTime() + 0.05
        while cpuTime() < until {}
        let later = try parse(try client.request("GET", "/metrics").body)
        XCTAssertGreaterThan(later["process_cpu_seconds_total{}"] ?? 0, cpu)
    }

    func testEveryKnownUpstreamErrorIsCountedFromZero() throws {
        let client = try startLarder().connection()
        let codes = [
            "upstream_unreachable", "upstream_timeout", "upstream_too_large", "upstream_forbidden", "upstream_error",
            "too_many_redirects", "cancelled", "shutting_down"
        ]
        let before = try parse(try client.request("GET", "/metrics").body)
        for code in codes {
            XCTAssertEqual(before[#"larder_upstream_errors_total{code="\#(code)"}"#], 0, code)
        }
        _ = try client.fetch(["url": "http://127.0.0.1:1/refused", "cache": ["policy": "no-store"]])
        let after = try parse(try client.request("GET", "/metrics").body)
        XCTAssertEqual(after[#"larder_upstream_errors_total{code="upstream_unreachable"}"#], 1)
        for code in codes where code != "upstream_unreachable" {
            XCTAssertEqual(after[#"larder_upstream_errors_total{code="\#(code)"}"#], 0, code)
        }
    }

    /// `--request-memo-mb` bounds what the memos hold (estimated bytes), and 0 turns them off
    /// without changing any answer.
    func testTheRequestMemoBudgetBoundsWhatIsRemembered() throws {
        let base = uniquePath()
        for budget in [0, 1 << 20] {
            let client = try startLarder { $0.requestMemoBytes = budget }.connection()
            // ~1.6 KB each in the estimate: 800 of them are more than the whole budget. Each is
            // sent twice, as a request is remembered the second time it is seen.
            for index in 0..<800 {
                let spec: [String: Any] = ["url": url("\(base)/memo/\(budget)/\(index)"), "cache": ["ttl": 600]]
                XCTAssertEqual(try client.fetch(spec).json["status"] as? Int, 200)
                XCTAssertEqual(try client.fetch(spec).outcome, "hit")
            }
            XCTAssertEqual(try client.fetch(["url": url("\(base)/memo/\(budget)/0"), "cache": ["ttl": 600]]).outcome, "hit")
            let held = try parse(try client.request("GET", "/metrics").body)[#"larder_request_memo_bytes{}"#] ?? -1
            if budget == 0 {
                XCTAssertEqual(held, 0, "memos off")
            } else {
                XCTAssertGreaterThan(held, 0)
                XCTAssertLessThanOrEqual(held, Double(budget), "within --request-memo-mb")
            }
        }
    }

    func testAMetricsTokenGuardsMetricsOnly() throws {
        let client = try startLarder { $0.metricsToken = "scrape-me" }.connection()
        let refused = try client.request("GET", "/metrics")
        XCTAssertEqual(refused.status, 401)
        XCTAssertEqual(refused.errorCode, "unauthorized")
        XCTAssertEqual(try client.request("GET", "/metrics", headers: ["Authorization": "Bearer scrape-me"]).status, 200)
        XCTAssertEqual(try client.request("GET", "/cache/stats").status, 200, "the admin routes have their own token")
    }

    /// docker/grafana/larder.json queries only metrics /metrics really exposes.
    func testEveryMetricTheDashboardQueriesIsExposed() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let dashboard = try XCTUnwrap(
            JSONSerialization.jsonObject(with: Data(contentsOf: root.appendingPathComponent("docker/grafana/larder.json")))
                as? [String: Any])
        let panels = try XCTUnwrap(dashboard["panels"] as? [[String: Any]])
        let expressions = panels.flatMap { ($0["targets"] as? [[String: Any]] ?? []).compactMap { $0["expr"] as? String } }
        XCTAssertGreaterThanOrEqual(expressions.count, 10)
        let pattern = try NSRegularExpression(pattern: "\\b(larder|process)_[a-z_]+")
        var queried: Set<String> = []
        for expression in expressions {
            for match in pattern.matches(in: expression, range: NSRange(expression.startIndex..., in: expression)) {
                queried.insert(String(expression[Range(match.range, in: expression)!]))
            }
        }
        XCTAssertTrue(
            queried.isSuperset(of: [
                "larder_requests_total", "larder_cache_lookups_total", "larder_request_duration_seconds_bucket",
                "larder_upstream_errors_total", "larder_cache_bytes", "larder_cache_evictions_total", "larder_storage_healthy",
                "larder_store_errors_total", "larder_store_writes_shed_total", "larder_http_connections"
            ]),
            """
            request rate, hit ratio, outcomes, latency, upstream errors, bytes, evictions, storage health, store errors, \
            shed writes and connections: \(queried.sorted())
            """)
        // Every query is scoped to the instances chosen in the `instance` variable, whose values
        // come from a metric /metrics exposes.
        let variables = try XCTUnwrap((dashboard["templating"] as? [String: Any])?["list"] as? [[String: Any]])
        let instance = try XCTUnwrap(variables.first { $0["name"] as? String == "instance" }, "an instance variable")
        let variableQuery = try XCTUnwrap((instance["query"] as? [String: Any])?["query"] as? String)
        XCTAssertTrue(variableQuery.hasPrefix("label_values(") && variableQuery.hasSuffix(", instance)"), variableQuery)
        for match in pattern.matches(in: variableQuery, range: NSRange(variableQuery.startIndex..., in: variableQuery)) {
            queried.insert(String(variableQuery[Range(match.range, in: variableQuery)!]))
        }
        let selector = try NSRegularExpression(pattern: #"\b(larder|process)_[a-z_]+(\{[^}]*\})?"#)
        for expression in expressions {
            for match in selector.matches(in: expression, range: NSRange(expression.startIndex..., in: expression)) {
                let series = String(expression[Range(match.range, in: expression)!])
                XCTAssertTrue(series.contains(#"instance=~"$instance""#), "\(series) in \(expression) is not scoped to $instance")
            }
        }

        let larder = try startLarder { $0.upstreams = [NamedUpstream(name: "origin", baseURL: self.origin.base)] }
        let client = try larder.connection()
        let path = uniquePath()
        _ = try client.fetch(["url": url(path), "cache": ["ttl": 600]])
        _ = try client.fetch(["url": url(path), "cache": ["ttl": 600]])
        _ = try client.fetch(["url": "http://127.0.0.1:1/refused", "cache": ["policy": "no-store"]])
        let exposed = Set(try parse(try client.request("GET", "/metrics").body).keys.map { String($0.prefix { $0 != "{" }) })
        for name in queried.sorted() {
            XCTAssertTrue(exposed.contains(name), "the dashboard queries \(name), which /metrics does not expose")
        }
    }

    func testConnectionGaugesCountEachListenersOpenConnections() throws {
        let larder = try startLarder { $0.maxConnections = 64 }
        let scraper = try larder.connection()
        func connections() throws -> (open: Double?, limit: Double?) {
            let samples = try parse(try scraper.request("GET", "/metrics").body)
            return (samples[#"larder_http_connections{listener="main"}"#], samples[#"larder_http_connection_limit{listener="main"}"#])
        }
        let before = try connections()
        XCTAssertEqual(before.limit, 64)
        XCTAssertGreaterThanOrEqual(before.open ?? 0, 1, "the scraping connection itself")
        var held: [TestConnection] = []
        for _ in 0..<3 {
            let client = try larder.connection()
            XCTAssertEqual(try client.request("GET", "/healthz").status, 200)
            held.append(client)
        }
        XCTAssertEqual(try connections().open, (before.open ?? 0) + 3)
        // Closed connections leave the count once the server has seen them go.
        for client in held { client.closeSocket() }
        XCTAssertEqual(try eventually(every: 0.02, { try connections().open }) { $0 == before.open }, before.open)
    }
}
