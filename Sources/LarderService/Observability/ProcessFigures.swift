// The standard Prometheus process metrics (process_cpu_seconds_total, process_*_memory_bytes,
// process_open_fds, process_max_fds, process_start_time_seconds), read as the Go and Python
// clients read them on Linux: /proc/self/stat (proc(5)) for CPU time, memory and start time,
// /proc/stat's `btime` to turn the start time from clock ticks after boot into epoch seconds,
// /proc/self/fd and the open-file limit for descriptors. Parsing is kept apart from reading so
// that it can be tested on given text.

import Foundation

#if canImport(Glibc)
    import Glibc
#endif

struct ProcessFigures: Equatable {
    /// User and system CPU time, in seconds.
    var cpuSeconds: Double
    var residentBytes: Int
    var virtualBytes: Int
    /// When the process started, in seconds since the epoch.
    var startTime: Double

    /// The figures now; nil where /proc cannot be read.
    static func read() -> ProcessFigures? {
        guard let stat = try? String(contentsOfFile: "/proc/self/stat", encoding: .utf8), let bootTime else { return nil }
        return parse(
            stat: stat, bootTime: bootTime, ticksPerSecond: Double(sysconf(Int32(_SC_CLK_TCK))),
            pageSize: Int(sysconf(Int32(_SC_PAGESIZE))))
    }

    /// The boot time, which does not change while the process runs: read once.
    private static let bootTime: Double? = (try? String(contentsOfFile: "/proc/stat", encoding: .utf8)).flatMap(bootTime(procStat:))

    /// The figures in the text of /proc/PID/stat.
    static func parse(stat: String, bootTime: Double, ticksPerSecond: Double, pageSize: Int) -> ProcessFigures? {
        // Field 2, the command name, is in parentheses and may itself hold spaces and
        // parentheses: the fields after it start after the last ')'. There, field n of proc(5)
        // is at index n - 3: utime 14, stime 15, starttime 22, vsize 23, rss 24 (in pages).
        guard ticksPerSecond > 0, let close = stat.lastIndex(of: ")") else { return nil }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        guard fields.count > 21, let user = Double(fields[11]), let system = Double(fields[12]), let start = Double(fields[19]),
            let virtual = Int(fields[20]), let resident = Int(fields[21])
        else { return nil }
        return ProcessFigures(
            cpuSeconds: (user + system) / ticksPerSecond, residentBytes: resident * pageSize, virtualBytes: virtual,
            startTime: bootTime + start / ticksPerSecond)
    }

    /// The boot time, in seconds since the epoch, from the text of /proc/stat (its `btime` line).
    static func bootTime(procStat: String) -> Double? {
        for line in procStat.split(separator: "\n") where line.hasPrefix("btime ") {
            return Double(line.dropFirst("btime ".count).trimmingCharacters(in: .whitespaces))
        }
        return nil
    }

    /// Descriptors open now (the one that lists them included, as the other clients count).
    static func openDescriptors() -> Int? {
        (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd"))?.count
    }

    /// The open-file limit (the soft one: what opening a file runs into).
    static func maxDescriptors() -> Int? {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return nil }
        return limit.rlim_cur == rlim_t.max ? nil : Int(clamping: limit.rlim_cur)
    }
}
