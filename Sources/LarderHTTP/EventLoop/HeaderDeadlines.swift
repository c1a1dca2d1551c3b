// The whole-section header deadline (slow-header attacks). libmicrohttpd's connection timeout
// is an idle timeout: a client that sends one header line every few seconds never falls silent
// for long enough, and held a connection (and its memory pool) for as long as it liked. So each
// loop keeps, for each of its connections, the time by which the header section it is reading
// must be complete, and shuts down (shutdown(2)) the sockets that pass it; libmicrohttpd then
// reads the end of the stream and closes the connection as it does for any client that left.
//
//   - A new connection: its first header section within `--header-timeout` of being accepted.
//   - A kept-alive connection: its next header section within the idle timeout plus the header
//     timeout of the previous response (a client that waits out most of the idle timeout still
//     has the header timeout to send its request). This deadline is stamped by the next check
//     (within `stampInterval`) rather than when the response completes, so a request costs two
//     stores and no clock read.
//
// While a request is being answered its connection has no deadline (the idle timeout and the
// upstream deadlines apply). Everything here runs on the loop's thread: libmicrohttpd calls
// back on the thread that runs its daemon (and, at stop, on the stopping thread after the loop
// thread ended). The clock and shutdown(2) are passed in by the loop-facing calls, so the
// bookkeeping runs in unit tests on a clock they move themselves.

import Dispatch

#if canImport(Glibc)
    import Glibc
#endif

/// One connection's header deadline; owned by its loop's `HeaderDeadlines`.
final class ConnectionDeadline {
    /// No header section is being read (a request is being answered).
    static let none: UInt64 = 0
    /// Waiting for the next request; the next check stamps the deadline.
    static let unstamped: UInt64 = .max

    fileprivate let fd: Int32
    fileprivate unowned let owner: HeaderDeadlines
    /// Monotonic nanoseconds by which the header section must be complete, or a marker above.
    fileprivate var due: UInt64
    /// Where it sits in the owner's list.
    fileprivate var slot = 0

    fileprivate init(fd: Int32, owner: HeaderDeadlines, due: UInt64) {
        self.fd = fd
        self.owner = owner
        self.due = due
    }

    /// The header section is complete: no deadline while the request is answered.
    func headerSectionComplete() { due = Self.none }

    /// The response is sent: the next header section has a deadline again.
    func awaitNextRequest() {
        due = Self.unstamped
        owner.stampSoon()
    }

    /// The connection closed.
    func closed() { owner.remove(self) }
}

/// The header deadlines of one event loop's connections.
final class HeaderDeadlines {
    /// Deadlines are checked at most this often (they are kept up to this much late), so that
    /// many connections whose deadlines fall close together cost one pass, not one each.
    static let granularity: UInt64 = 100_000_000
    /// A kept-alive connection's deadline is stamped at most this long after its response.
    static let stampInterval: UInt64 = 1_000_000_000

    private let firstSection: UInt64
    private let laterSection: UInt64
    private var watched: [ConnectionDeadline] = []
    /// When the next check is due (monotonic nanoseconds; .max: nothing to check).
    private(set) var nextCheck: UInt64 = .max
    /// When `check` last read the clock (a stale value only makes the next stamping come sooner).
    private var lastLook: UInt64 = 0

    /// `headerTimeout`: the first section's limit; `idleTimeout`: the daemon's idle timeout.
    init(headerTimeoutSeconds: Int, idleTimeoutSeconds: Int) {
        firstSection = UInt64(max(1, headerTimeoutSeconds)) * 1_000_000_000
        laterSection = firstSection + UInt64(max(1, idleTimeoutSeconds)) * 1_000_000_000
    }

    static func now() -> UInt64 { DispatchTime.now().uptimeNanoseconds }

    /// A connection was accepted (`now`: monotonic nanoseconds).
    func add(fd: Int32, now: UInt64 = HeaderDeadlines.now()) -> ConnectionDeadline {
        let deadline = ConnectionDeadline(fd: fd, owner: self, due: now + firstSection)
        deadline.slot = watched.count
        watched.append(deadline)
        nextCheck = min(nextCheck, deadline.due)
        return deadline
    }

    /// A connection closed.
    func remove(_ deadline: ConnectionDeadline) {
        let slot = deadline.slot
        guard slot < watched.count, watched[slot] === deadline else { return }
        let last = watched.removeLast()
        if slot < watched.count {
            watched[slot] = last
            last.slot = slot
        }
    }

    fileprivate func stampSoon() {
        nextCheck = min(nextCheck, lastLook + Self.stampInterval)
    }

    /// Milliseconds until the next check, for the loop's wait (nil: none due). Reads the clock
    /// only when a check is pending.
    func millisecondsToNextCheck(now clock: @autoclosure () -> UInt64 = HeaderDeadlines.now()) -> Int32? {
        guard nextCheck != .max else { return nil }
        let now = clock()
        guard nextCheck > now else { return 0 }
        return Int32(clamping: (nextCheck - now + 999_999) / 1_000_000)
    }

    /// Called every loop round: when a check is due, shuts down the sockets whose header
    /// section is late and stamps the deadlines of connections waiting for their next request.
    /// Returns whether it shut any down.
    func check() -> Bool {
        check(now: Self.now()) { shutdown($0, Int32(SHUT_RDWR)) }
    }

    /// `check` with its clock (read only when a check is pending) and its way of shutting a
    /// socket down given.
    func check(now clock: @autoclosure () -> UInt64, shutDown: (Int32) -> Void) -> Bool {
        guard nextCheck != .max else { return false }
        let now = clock()
        lastLook = now
        guard now >= nextCheck else { return false }
        var next = UInt64.max
        var shut = false
        for deadline in watched where deadline.due != ConnectionDeadline.none {
            if deadline.due == ConnectionDeadline.unstamped { deadline.due = now + laterSection }
            if deadline.due <= now {
                // libmicrohttpd reads the end of the stream in this round's MHD_run and closes
                // the connection (the descriptor stays its own until then).
                shutDown(deadline.fd)
                deadline.due = ConnectionDeadline.none
                shut = true
            } else {
                next = min(next, deadline.due)
            }
        }
        nextCheck = next == .max ? .max : max(next, now + Self.granularity)
        return shut
    }
}
