// Upstream requests over libcurl's multi interface, run by drivers (CurlDriver): one per HTTP
// event loop, on the loop's own thread (`loopCompanion`), and one on a thread of its own for
// requests sent from anywhere else (background revalidation, warm jobs, batch items whose
// turn came on another thread). A request sent from a loop's thread runs on that loop: it is
// read from the client, sent, answered and written back without changing threads. Each driver
// owns its multi handle and easy handles; other threads only enqueue work under a lock and
// wake it, so no easy handle is ever touched by two threads. Connections are kept in each
// multi handle's pool and reused.
//
// Redirects are followed here, not by libcurl, so each hop's URL is checked against the
// access policy (scheme and allowed hosts) before it is requested; every connection's actual
// address is checked in the open-socket callback, before `connect`, whatever the name was.
//
// Bounds, so that many large or many concurrent fetches cannot exhaust memory, shared by all the
// drivers (TransferBounds): at most `maxTransfers` transfers run at once (others wait in order
// on their driver, their deadlines running), and the bodies being received add up to at most
// `maxInflightBodyBytes` — a transfer that would go over is paused (libcurl's
// CURL_WRITEFUNC_PAUSE: nothing more is read from its socket) until another one finishes,
// except the oldest transfer, which always proceeds so that no driver can wait on itself.
// Memory for bodies in flight is thus at most the budget plus one body.

import CCurl
import Dispatch
import Foundation
public import LarderCore
public import LarderEngine
public import LarderSync
public import Logging

#if canImport(Glibc)
    import Glibc
#endif

public final class CurlUpstream: Upstream, @unchecked Sendable {
    // @unchecked Sendable: `loopDrivers` is lock-protected; the rest is fixed at init.

    /// Call once, before any thread starts (libcurl's global init is not thread-safe).
    public static func globalInit() {
        curl_global_init(Int(CURL_GLOBAL_DEFAULT))
    }

    public static let maxRedirects = RedirectPolicy.maxHops

    private let settings: CurlSettings
    private let bounds: TransferBounds
    /// Runs what is sent from threads that are not event loops.
    private let background: CurlDriver
    /// The event loops' drivers (`loopCompanion`), to stop them with the rest.
    private let loopDrivers = Locked<[CurlDriver]>([])
    private let started = Atomic<Bool>(false)

    public init(
        policy: UpstreamAccessPolicy, clock: Clock, userAgent: String, logger: Logger,
        maxTransfers: Int = 256, maxInflightBodyBytes: Int = 256 << 20, resolve: [String] = [],
        redaction: QueryRedaction = QueryRedaction()
    ) {
        settings = CurlSettings(
            policy: policy, clock: clock, userAgent: userAgent, logger: logger, resolve: resolve,
            redaction: redaction)
        bounds = TransferBounds(maxTransfers: maxTransfers, maxBodyBytes: maxInflightBodyBytes)
        background = CurlDriver(settings: settings, bounds: bounds)
    }

    /// The most bytes of bodies being received there ever were at once, over all drivers
    /// (`maxInflightBodyBytes` bounds it, but for the oldest transfer's body); for tests.
    public var peakInflightBodyBytes: Int { bounds.peakBodyBytes }

    /// Starts the thread that runs requests sent from outside the event loops.
    public func start() {
        guard !started.exchange(true, ordering: .relaxed) else { return }
        background.runOnOwnThread(name: "larder-curl")
    }

    /// A driver for one HTTP event loop (HTTPServerConfiguration.loopCompanion): requests sent
    /// from that loop's thread run on it.
    public func loopCompanion() -> any EventLoopCompanion {
        let driver = CurlDriver(settings: settings, bounds: bounds)
        loopDrivers.withLock { $0.append(driver) }
        return driver
    }

    public func send(_ request: UpstreamRequest, completion: @escaping @Sendable (Result<UpstreamResponse, LarderError>) -> Void) {
        let exchange = Exchange(request: request, completion: completion, requestTime: settings.clock.now())
        // The loop this thread runs, when it is one of this upstream's; else the background driver.
        let driver = CurlDriver.current.flatMap { $0.settings === settings ? $0 : nil } ?? background
        guard driver.enqueue(exchange) else {
            return completion(.failure(LarderError(.shuttingDown, "Larder is shutting down")))
        }
        request.cancellation?.onCancel { driver.cancel(exchange) }
    }

    /// Fails every transfer in flight with `shutting_down` and stops every driver (the loops'
    /// drivers fail what is sent to them from then on).
    public func shutdown() {
        background.stop()
        for driver in loopDrivers.withLock({ $0 }) { driver.stop() }
    }
}

/// What every driver of one upstream shares, fixed at init.
final class CurlSettings: @unchecked Sendable {
    // @unchecked Sendable: immutable; `resolveList` is only read by libcurl after init.
    let policy: UpstreamAccessPolicy
    let clock: Clock
    let userAgent: String
    let logger: Logger
    /// `HOST:PORT:ADDRESS[,ADDRESS…]` entries that replace DNS for those names (CURLOPT_RESOLVE),
    /// as curl's `--resolve`: the access policy still checks every address connected to.
    let resolveList: UnsafeMutablePointer<curl_slist>?
    /// `--redact-query`: secret query values stay out of the log lines written here.
    let redaction: QueryRedaction

    init(policy: UpstreamAccessPolicy, clock: Clock, userAgent: String, logger: Logger, resolve: [String], redaction: QueryRedaction) {
        self.policy = policy
        self.clock = clock
        self.userAgent = userAgent
        self.logger = logger
        var list: UnsafeMutablePointer<curl_slist>?
        for entry in resolve { list = curl_slist_append(list, entry) }
        resolveList = list
        self.redaction = redaction
    }

    deinit { curl_slist_free_all(resolveList) }
}
