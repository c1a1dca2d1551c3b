// The `# HELP` line of every metric family, added to the exposition when it is scraped.
//
// Why not given to swift-prometheus: its swift-metrics factory registers every metric with an
// empty help text, and its registry requires every label set of a family to have the same help
// (it traps otherwise), so a help text cannot be given for metrics made through the factory.
// The exposition's `# TYPE` lines name each family once; its `# HELP` line goes before it.
// A family missing here has no `# HELP` line (MetricsTests fails on it).

enum MetricHelp {
    static let texts: [String: String] = [
        "larder_build_info":
            "Larder's version and the git revision it was built from (revision unknown when the build did not say); always 1",
        "larder_requests_total": "Answers by route and HTTP status",
        "larder_request_duration_seconds": "Time from a request's arrival to its answer, by route",
        "larder_cache_lookups_total":
            "Cache lookups by outcome (hit, miss, stale, revalidated, bypass, coalesced) and namespace (other past --metrics-namespaces)",
        "larder_upstream_requests_total": "Upstream exchanges by upstream (a named upstream, or fetch for /fetch URLs) and HTTP status",
        "larder_upstream_duration_seconds": "Upstream exchange durations, by upstream",
        "larder_upstream_errors_total": "Upstream requests that got no response, by error code",
        "larder_cache_entries": "Entries the store holds",
        "larder_cache_bytes": "Bytes the store holds",
        "larder_cache_capacity_bytes": "Bytes the store may hold (--max-bytes; 0 without a limit)",
        "larder_storage_healthy": "1 while the store works; 0 while writes fail (a full disk) or a shared store is out of reach",
        "larder_cache_evictions_total": "Entries evicted for capacity",
        "larder_cache_eviction_backlog":
            "Objects evicted whose rows wait to be deleted in background batches (after a large eviction); counted in bytes until then",
        "larder_cache_expired_removals_total": "Entries removed by the retention sweep",
        "larder_store_errors_total": "Store operations that failed",
        "larder_store_writes_shed_total": "Responses answered but not stored because more than 32 MiB waited for its commit",
        "larder_access_log_dropped_total": "Access-log lines dropped because standard error was read slower than requests came",
        "larder_store_lookups_skipped_total": "Lookups of keys never stored that the key filter answered without reading the database",
        "larder_cache_purged_total":
            "Entries purged through the admin API, by mode: hard (removed) or soft (marked stale, kept for revalidation)",
        "larder_uncacheable_passes_total":
            "Misses sent upstream at once, without waiting on another request, because their cache key's last answer could not be stored",
        "larder_uncacheable_keys": "Keys remembered as uncacheable (--uncacheable-memory; 10,000 at most)",
        "larder_namespace_bytes": "Bytes a namespace with a budget (--namespace-max-bytes) holds, as capacity counts them",
        "larder_namespace_entries": "Entries a namespace with a budget holds",
        "larder_namespace_max_bytes": "A namespace's budget (--namespace-max-bytes)",
        "larder_namespace_evictions": "Entries a namespace's budget evicted since start (its own oldest)",
        "larder_compressed_stores_total": "Bodies stored compressed at rest (zstd; --compress-min-bytes, --compress-type)",
        "larder_compression_saved_bytes_total": "Bytes the bodies stored compressed did not take: their size less their stored size",
        "larder_compression_dictionaries_trained_total":
            "Compression dictionaries trained from namespaces' bodies and kept (--compress-dictionary-samples)",
        "larder_store_rejected_entries_total": "Values read from a shared store that failed authentication or were malformed, removed",
        "larder_memory_tier_bytes": "Bytes the memory tier holds",
        "larder_admission_admitted_total":
            "Entries the admission policy had written to the database, at once or on proof of reuse (Redis: written while full)",
        "larder_admission_held_total": "New entries held in memory for proof of reuse because the store was full",
        "larder_admission_rejected_total":
            "Held entries that left without being written (disk writes saved; Redis: first-time entries not written while full)",
        "larder_admission_promoted_total": "Entries moved from S3-FIFO's small queue to its main queue",
        "larder_admission_frequency_admitted_total":
            "Entries the frequency sketch let into the main queue from the small queue without a hit there",
        "larder_admission_frequency_refused_total":
            "Entries asked for before that the frequency sketch kept out of the main queue (its next victim was asked for about as often)",
        "larder_admission_ghost_hits_total":
            "Entries admitted straight to the main queue because the ghost list remembered their key "
            + "(Redis: written because their ghost key was found)",
        "larder_admission_evicted_total": "Entries that left each S3-FIFO queue (small, main)",
        "larder_admission_reinserted_total": "Main-queue entries sent round again because they were asked for",
        "larder_admission_held_entries": "Entries held in memory for proof of reuse now",
        "larder_admission_held_bytes": "Bytes of the entries held in memory for proof of reuse now",
        "larder_body_files_open": "Body files whose descriptors are kept open between hits",
        "larder_request_memo_bytes": "Estimated bytes of parsed requests the request memos hold",
        "larder_warm_jobs": "Warm jobs by state",
        "larder_http_connections": "Connections open on each listener",
        "larder_http_connection_limit": "Connections each listener may have open at once",
        "larder_heap_bytes": "glibc's heap: bytes in use, and bytes free inside its arenas",
        "process_cpu_seconds_total": "User and system CPU time spent, in seconds",
        "process_open_fds": "Open file descriptors",
        "process_max_fds": "The open-file limit",
        "process_start_time_seconds": "When the process started, in seconds since the epoch",
        "process_resident_memory_bytes": "Resident memory, in bytes",
        "process_virtual_memory_bytes": "Virtual memory, in bytes"
    ]

    /// `exposition` with a `# HELP` line before each `# TYPE` line whose family has a text here.
    static func adding(to exposition: [UInt8]) -> [UInt8] {
        let typePrefix = Array("# TYPE ".utf8)
        var result: [UInt8] = []
        result.reserveCapacity(exposition.count + texts.count * 96)
        for line in exposition.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false) {
            if line.starts(with: typePrefix) {
                let name = String(decoding: line.dropFirst(typePrefix.count).prefix { $0 != UInt8(ascii: " ") }, as: UTF8.self)
                if let text = texts[name] {
                    // The format escapes backslashes and line feeds in help; the texts above have neither.
                    result.append(contentsOf: "# HELP \(name) \(text)\n".utf8)
                }
            }
            result.append(contentsOf: line)
            result.append(UInt8(ascii: "\n"))
        }
        // The split gave one empty piece after the final line feed, which added one too many.
        if exposition.last == UInt8(ascii: "\n") || exposition.isEmpty { result.removeLast() }
        return result
    }
}
