// Where access-log lines go: formatted by the thread that answered the request into a buffer of
// its event loop's own, and written by one background thread in batches. A hit then costs its
// line's formatting (no system call, no lock another loop takes; a text line makes no string),
// and a slow reader of standard error (a full pipe, a stalled collector) never holds an event
// loop: a full buffer drops the line, counts it, and the writer says how many it lost
// (`larder_access_log_dropped_total` and a warning line).
//
// Lines reach the output at most `interval` after they were formatted, or sooner when a buffer
// fills past a quarter; shutdown writes what is left (waiting at most `closeTimeout` for an
// output that does not take it). A kill -9 loses the lines not yet written: those of the last
// interval while the output keeps up.

import Dispatch
import Foundation
import LarderCore
import LarderSync
import Logging

#if canImport(Glibc)
    import Glibc
#endif

/// Where access-log lines are written, and in what format and from what level.
public struct AccessLogOutput: Sendable {
    /// The level and format, read for every line (a reload changes them).
    public let control: LogControl
    /// Writes whole lines, each ending in a newline.
    public let write: @Sendable (UnsafeRawBufferPointer) -> Void

    public init(control: LogControl, write: @escaping @Sendable (UnsafeRawBufferPointer) -> Void) {
        self.control = control
        self.write = write
    }

    /// Standard error.
    public static func standardError(_ control: LogControl) -> AccessLogOutput {
        descriptor(2, control: control)
    }

    /// An open file descriptor. To a pipe or a socket, lines go in writes of at most PIPE_BUF
    /// bytes cut at line ends: a pipe keeps such a write whole, so other threads' log lines
    /// cannot land inside an access line.
    static func descriptor(_ descriptor: Int32, control: LogControl) -> AccessLogOutput {
        var status = stat()
        let whole = fstat(descriptor, &status) == 0 && (status.st_mode & S_IFMT) == S_IFREG
        let chunk = whole ? Int.max : Int(PIPE_BUF)
        return AccessLogOutput(control: control) { lines in
            var start = 0
            while start < lines.count {
                var end = lines.count
                if end - start > chunk {
                    // The last line end within the chunk; a longer line goes whole.
                    end = start + chunk
                    while end > start, lines[end - 1] != UInt8(ascii: "\n") { end -= 1 }
                    if end == start { end = lines[start...].firstIndex(of: UInt8(ascii: "\n")).map { $0 + 1 } ?? lines.count }
                }
                LarderLogHandler.writeAll(UnsafeRawBufferPointer(rebasing: lines[start..<end]), to: descriptor)
                start = end
            }
        }
    }
}

/// The buffers of the event loops and the thread that writes them out.
final class AccessLogWriter: Sendable {
    /// A buffer holding more than this drops lines until the writer empties it.
    static let bufferLimit = 1 << 20
    /// The writer is woken early when a buffer passes this.
    static let wakeAt = bufferLimit / 4

    private final class Shard: Sendable {
        struct Pending {
            var bytes: [UInt8] = []
            var dropped = 0
            var clock = LineClock()
        }
        let pending = Locked(Pending())
    }

    let output: AccessLogOutput
    private let shards: [Shard]
    private let interval: Double
    private let wake = DispatchSemaphore(value: 0)
    private let stopping = Atomic<Bool>(false)
    private let ended = DispatchSemaphore(value: 0)
    private let droppedTotal = Atomic<Int>(0)
    /// One flush at a time: the writer's turns and `flush()` would otherwise write one buffer's
    /// batches out of order.
    private let flushing = Locked(())
    /// How long `close` waits for the writer to hand the last lines to the output.
    static let closeTimeout = 5.0

    /// `shards`: one buffer per event loop (a request's line goes to its loop's).
    init(output: AccessLogOutput, shards: Int, interval: Double = 0.05) {
        self.output = output
        self.shards = (0..<max(1, shards)).map { _ in Shard() }
        self.interval = interval
        let thread = Thread { [self] in
            nameCurrentThread("larder-accesslog")
            run()
        }
        thread.start()
    }

    /// Lines dropped because a buffer was full, since start.
    var dropped: Int { droppedTotal.load(ordering: .relaxed) }

    /// Whether a line at info level is written now (the level is the service's, changed live).
    var isEnabled: Bool { output.control.level <= .info }

    var format: LogFormat { output.control.format }

    /// Appends the line `write` formats (with its newline) to loop `loop`'s buffer, or counts it
    /// dropped when the buffer is full; `write` gets the buffer's clock for the line's time.
    func append(loop: Int, _ write: (inout [UInt8], inout LineClock) -> Void) {
        let shard = shards[loop % shards.count]
        let wakeWriter = shard.pending.withLock { pending -> Bool in
            let before = pending.bytes.count
            guard before < Self.bufferLimit else {
                pending.dropped += 1
                return false
            }
            if pending.bytes.capacity == 0 { pending.bytes.reserveCapacity(64 << 10) }
            write(&pending.bytes, &pending.clock)
            return before < Self.wakeAt && pending.bytes.count >= Self.wakeAt
        }
        if wakeWriter { wake.signal() }
    }

    /// Writes out every buffer now (the writer does this every `interval`).
    func flush() {
        var spare: [UInt8] = []
        flush(into: &spare)
    }

    /// Stops the writer after it wrote out what the buffers hold, or after `closeTimeout` when
    /// the output does not take them (a pipe nobody reads must not hold up shutdown).
    func close() {
        guard !stopping.exchange(true, ordering: .acquiringAndReleasing) else { return }
        wake.signal()
        _ = ended.wait(timeout: .now() + Self.closeTimeout)
    }

    private func run() {
        var spare: [UInt8] = []
        while !stopping.load(ordering: .acquiring) {
            _ = wake.wait(timeout: .now() + interval)
            flush(into: &spare)
        }
        flush(into: &spare)
        ended.signal()
    }

    /// Swaps each buffer for `spare` (kept empty with its capacity, so neither side allocates
    /// again) and writes what it held.
    private func flush(into spare: inout [UInt8]) {
        flushing.withLock { _ in flushShards(into: &spare) }
    }

    private func flushShards(into spare: inout [UInt8]) {
        for shard in shards {
            var dropped = 0
            shard.pending.withLock { pending in
                swap(&pending.bytes, &spare)
                dropped = pending.dropped
                pending.dropped = 0
            }
            if !spare.isEmpty {
                spare.withUnsafeBytes { output.write($0) }
                spare.removeAll(keepingCapacity: true)
            }
            if dropped > 0 {
                droppedTotal.add(dropped, ordering: .relaxed)
                var line: [UInt8] = []
                var clock = LineClock()
                AccessLog.appendNotice(
                    "the access log dropped \(dropped) lines: its output was slower than the requests", level: .warning,
                    format: format, clock: &clock, to: &line)
                line.withUnsafeBytes { output.write($0) }
            }
        }
    }
}
