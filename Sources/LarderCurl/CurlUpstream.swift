// Upstream requests over libcurl's multi interface, driven by one thread.
//
// One thread owns the multi handle and every easy handle: it adds new transfers, runs
// `curl_multi_perform`, collects finished ones and sleeps in `curl_multi_poll`. Other threads
// only enqueue work under a lock and wake it with `curl_multi_wakeup`, so no easy handle is
// ever touched by two threads. Connections are kept in the multi handle's pool and reused.
//
// Redirects are followed here, not by libcurl, so each hop's URL is checked against the
// access policy (scheme and allowed hosts) before it is requested; every connection's actual
// address is checked in the open-socket callback, before `connect`, whatever the name was.
//
// Bounds, so that many large or many concurrent fetches cannot exhaust memory: at most
// `maxTransfers` transfers run at once (others wait in order, their deadlines running), and the
// bodies being received add up to at most `maxInflightBodyBytes` — a transfer that would go
// over is paused (libcurl's CURL_WRITEFUNC_PAUSE: nothing more is read from its socket) until
// another one finishes, except the oldest transfer, which always proceeds so that the loop can
// never wait on itself. Memory for bodies in flight is thus at most the budget plus one body.

import CCurl
import Dispatch
import Foundation
public import LarderCore
public import LarderEngine
public import Logging
import LarderSync
#if canImport(Glibc)
import Glibc
#endif

public final class CurlUpstream: Upstream, @unchecked Sendable {
    // @unchecked Sendable: `multi` and `transfers` are used only on the loop thread; `inbox`
    // is lock-protected; `curl_multi_wakeup` is documented as callable from any thread.

    /// Call once, before any thread starts (libcurl's global init is not thread-safe).
    public static func globalInit() {
        curl_global_init(Int(CURL_GLOBAL_DEFAULT))
    }

    public static let maxRedirects = 5

    private let multi: UnsafeMutableRawPointer
    private let policy: UpstreamAccessPolicy
    private let clock: Clock
    private let logger: Logger
    private let userAgent: String
    private let inbox = Locked<Inbox>(Inbox())
    private var transfers: [UnsafeMutableRawPointer: Transfer] = [:]
    /// Exchanges waiting for a transfer slot, in arrival order (loop thread only).
    private var waiting: [Exchange] = []
    private let maxTransfers: Int
    private let budget: BodyBudget
    private var nextSequence = 0
    /// Easy handles of finished transfers, reset and kept for the next ones (libcurl keeps
    /// connections in the multi handle's cache; reusing handles saves their set-up too).
    private var idleHandles: [UnsafeMutableRawPointer] = []
    private static let idleHandleLimit = 64
    private let finished = DispatchSemaphore(value: 0)
    private let started = Atomic<Bool>(false)

    private struct Inbox {
        var exchanges: [Exchange] = []
        var cancelled: [Exchange] = []
        var stopping = false
    }

    /// `HOST:PORT:ADDRESS[,ADDRESS…]` entries that replace DNS for those names (CURLOPT_RESOLVE),
    /// as curl's `--resolve`: the access policy still checks every address connected to.
    private let resolveList: UnsafeMutablePointer<curl_slist>?
    /// `--redact-query`: secret query values stay out of the log lines written here.
    private let redaction: QueryRedaction

    public init(policy: UpstreamAccessPolicy, clock: Clock, userAgent: String, logger: Logger,
                maxTransfers: Int = 256, maxInflightBodyBytes: Int = 256 << 20, resolve: [String] = [],
                redaction: QueryRedaction = QueryRedaction()) {
        self.redaction = redaction
        guard let multi = curl_multi_init() else { fatalError("curl_multi_init failed") }
        self.multi = multi
        var list: UnsafeMutablePointer<curl_slist>?
        for entry in resolve { list = curl_slist_append(list, entry) }
        self.resolveList = list
        self.maxTransfers = max(1, maxTransfers)
        self.budget = BodyBudget(limit: max(1, maxInflightBodyBytes))
        self.policy = policy
        self.clock = clock
        self.userAgent = userAgent
        self.logger = logger
        larder_curl_multi_setopt_long(multi, CURLMOPT_MAXCONNECTS, 256)
    }

    deinit {
        curl_slist_free_all(resolveList)
        curl_multi_cleanup(multi)
    }

    /// Starts the loop thread.
    public func start() {
        guard !started.exchange(true, ordering: .relaxed) else { return }
        // Named from inside: swift-corelibs-foundation names the OS thread (top -H, perf) only
        // when the name is set on the running thread.
        let thread = Thread { [self] in
            Thread.current.name = "larder-curl"
            run()
        }
        thread.start()
    }

    public func send(_ request: UpstreamRequest, completion: @escaping @Sendable (Result<UpstreamResponse, LarderError>) -> Void) {
        let exchange = Exchange(request: request, completion: completion, requestTime: clock.now())
        let accepted = inbox.withLock { inbox -> Bool in
            guard !inbox.stopping else { return false }
            inbox.exchanges.append(exchange)
            return true
        }
        guard accepted else {
            return completion(.failure(LarderError(.shuttingDown, "Larder is shutting down")))
        }
        curl_multi_wakeup(multi)
        request.cancellation?.onCancel { [self] in
            inbox.withLock { $0.cancelled.append(exchange) }
            curl_multi_wakeup(multi)
        }
    }

    /// Fails every transfer in flight with `shutting_down`, stops the thread and waits for it.
    public func shutdown() {
        let wasStopping = inbox.withLock { inbox -> Bool in
            defer { inbox.stopping = true }
            return inbox.stopping
        }
        guard !wasStopping, started.load(ordering: .relaxed) else { return }
        curl_multi_wakeup(multi)
        finished.wait()
    }

    // MARK: - Loop thread

    private func run() {
        var running: Int32 = 0
        while true {
            let (incoming, cancelled, stopping) = inbox.withLock { inbox -> ([Exchange], [Exchange], Bool) in
                defer {
                    inbox.exchanges.removeAll(keepingCapacity: true)
                    inbox.cancelled.removeAll()
                }
                return (inbox.exchanges, inbox.cancelled, inbox.stopping)
            }
            if stopping {
                for exchange in incoming + waiting { exchange.fail(LarderError(.shuttingDown, "Larder is shutting down")) }
                waiting.removeAll()
                for (handle, transfer) in transfers {
                    curl_multi_remove_handle(multi, handle)
                    transfer.exchange.fail(LarderError(.shuttingDown, "Larder is shutting down"))
                    retire(transfer)
                }
                transfers.removeAll()
                for handle in idleHandles { curl_easy_cleanup(handle) }
                idleHandles.removeAll()
                finished.signal()
                return
            }
            for exchange in incoming { begin(exchange) }
            for exchange in cancelled { abort(exchange) }
            expireWaiting()
            curl_multi_perform(multi, &running)
            var remaining: Int32 = 0
            while let message = curl_multi_info_read(multi, &remaining) {
                guard message.pointee.msg == CURLMSG_DONE, let handle = message.pointee.easy_handle else { continue }
                let result = larder_curl_msg_result(message)
                if let transfer = remove(handle) {
                    finish(transfer, result: result)
                }
            }
            startWaiting()
            resumePaused()
            curl_multi_poll(multi, nil, 0, 1000, nil)
        }
    }

    /// Aborts a cancelled exchange: removing its easy handle mid-transfer closes the connection
    /// (it cannot be reused), so the origin sees the request abandoned.
    private func abort(_ exchange: Exchange) {
        let error = LarderError(.cancelled, "the request was cancelled")
        if let index = waiting.firstIndex(where: { $0 === exchange }) {
            waiting.remove(at: index)
            return exchange.fail(error)
        }
        guard let handle = transfers.first(where: { $0.value.exchange === exchange })?.key, let transfer = remove(handle) else { return }
        exchange.fail(error)
        retire(transfer)
    }

    /// Takes a handle off the multi handle and out of the transfers, giving back its body budget
    /// (and so perhaps making another transfer the oldest).
    private func remove(_ handle: UnsafeMutableRawPointer) -> Transfer? {
        curl_multi_remove_handle(multi, handle)
        guard let transfer = transfers.removeValue(forKey: handle) else { return nil }
        budget.release(transfer)
        budget.oldest = transfers.values.lazy.map(\.sequence).min() ?? 0
        return transfer
    }

    /// Starts waiting exchanges while there are free slots.
    private func startWaiting() {
        guard !waiting.isEmpty, transfers.count < maxTransfers else { return }
        let count = min(waiting.count, maxTransfers - transfers.count)
        let starting = waiting.prefix(count)
        waiting.removeFirst(count)
        for exchange in starting { begin(exchange) }
    }

    /// Fails waiting exchanges whose deadline passed before they got a slot.
    private func expireWaiting() {
        guard !waiting.isEmpty else { return }
        let now = clock.now()
        waiting.removeAll { exchange in
            guard exchange.deadline <= now else { return false }
            exchange.fail(LarderError(.upstreamTimeout, "upstream did not answer within \(exchange.request.timeoutMs) ms (waited for a transfer slot)"))
            return true
        }
    }

    /// Unpauses transfers that waited for body budget, now that some was released or the oldest
    /// transfer changed. Each one asks for budget again and pauses again if there is none —
    /// except the oldest, which always proceeds (so this must run even when the budget is still
    /// full). Unpausing may deliver data at once (and pause again), so the list is taken first.
    private func resumePaused() {
        guard !budget.paused.isEmpty, budget.released else { return }
        budget.released = false
        let paused = budget.paused
        budget.paused.removeAll()
        for transfer in paused where transfers[transfer.handle] === transfer {
            larder_curl_unpause(transfer.handle)
        }
    }

    /// Starts the exchange's current hop, or queues it when every transfer slot is taken.
    private func begin(_ exchange: Exchange) {
        let remainingMs = Int((exchange.deadline - clock.now()) * 1000)
        guard remainingMs > 0 else {
            return exchange.fail(LarderError(.upstreamTimeout, "upstream did not answer within \(exchange.request.timeoutMs) ms"))
        }
        guard transfers.count < maxTransfers else {
            waiting.append(exchange)
            return
        }
        if let refusal = policy.refusal(forHost: String(exchange.url.bareHost)) {
            return exchange.fail(LarderError(.upstreamForbidden, refusal))
        }
        guard let handle = idleHandles.popLast() ?? curl_easy_init() else {
            return exchange.fail(LarderError(.upstreamUnreachable, "cannot create a transfer"))
        }
        nextSequence += 1
        let transfer = Transfer(handle: handle, exchange: exchange, policy: policy, budget: budget, sequence: nextSequence)
        budget.oldest = transfers.isEmpty ? nextSequence : min(budget.oldest, nextSequence)
        transfer.configure(userAgent: userAgent, timeoutMs: remainingMs, resolve: resolveList)
        transfers[handle] = transfer
        curl_multi_add_handle(multi, handle)
    }

    /// Frees what a finished transfer holds; its handle is reset and kept for another.
    private func retire(_ transfer: Transfer) {
        transfer.release()
        if idleHandles.count < Self.idleHandleLimit {
            curl_easy_reset(transfer.handle)
            idleHandles.append(transfer.handle)
        } else {
            curl_easy_cleanup(transfer.handle)
        }
    }

    private func finish(_ transfer: Transfer, result: CURLcode) {
        defer { retire(transfer) }
        let exchange = transfer.exchange
        var status = 0
        larder_curl_getinfo_long(transfer.handle, CURLINFO_RESPONSE_CODE, &status)
        guard result == CURLE_OK else {
            if let validator = resumeValidator(exchange, transfer, status: status, result: result) {
                return resume(exchange, after: transfer, status: status, validator: validator)
            }
            return exchange.fail(transfer.error(for: result, timeoutMs: exchange.request.timeoutMs))
        }
        if let partial = exchange.partial {
            // A resumed download: a 206 continuing exactly where the cut was completes it; a 200
            // (the representation changed, If-Range said so) replaces it.
            if status == 206, let range = transfer.headers.values("content-range").first,
               range.hasPrefix("bytes \(partial.body.count)-") {
                return exchange.succeed(UpstreamResponse(status: 200, headers: partial.headers, body: partial.body + transfer.body,
                                                         requestTime: exchange.requestTime, responseTime: clock.now()))
            }
            guard status == 200 else {
                return exchange.fail(LarderError(.upstreamError, "\(exchange.url.authority) answered \(status) when a cut download was resumed"))
            }
        }
        if exchange.request.followRedirects, [301, 302, 303, 307, 308].contains(status),
           let location = transfer.headers.values("location").first {
            return redirect(exchange, status: status, location: location)
        }
        exchange.succeed(UpstreamResponse(status: status, headers: transfer.headers, body: transfer.body,
                                          requestTime: exchange.requestTime, responseTime: clock.now()))
    }

    /// Resuming a cut download (YTKNetwork's resumable downloads, RFC 9110 §14.2 and §13.1.5):
    /// only for exchanges that ask for it, a GET whose 200 (or resumed 206) was cut mid-body,
    /// at most 3 times, and only with a validator that makes If-Range safe: a strong ETag, or
    /// Last-Modified. Returns that validator.
    private func resumeValidator(_ exchange: Exchange, _ transfer: Transfer, status: Int, result: CURLcode) -> String? {
        guard exchange.request.resumable, exchange.method == .get, exchange.resumes < 3,
              result == CURLE_PARTIAL_FILE || result == CURLE_RECV_ERROR,
              status == 200 || (status == 206 && exchange.partial != nil), !transfer.body.isEmpty else { return nil }
        let headers = exchange.partial?.headers ?? transfer.headers
        if let etag = headers.values("etag").first, !etag.hasPrefix("W/") { return etag }
        return headers.values("last-modified").first
    }

    private func resume(_ exchange: Exchange, after transfer: Transfer, status: Int, validator: String) {
        if status == 206, let partial = exchange.partial {
            exchange.partial = (partial.headers, partial.body + transfer.body)
        } else {
            exchange.partial = (transfer.headers, transfer.body)
        }
        exchange.resumes += 1
        exchange.headers.removeAll { $0.name.caseInsensitiveEquals("range") || $0.name.caseInsensitiveEquals("if-range") }
        exchange.headers.append(HeaderField("Range", "bytes=\(exchange.partial!.body.count)-"))
        exchange.headers.append(HeaderField("If-Range", validator))
        logger.debug("resuming a cut download", metadata: ["url": "\(redaction.apply(exchange.url.absoluteString))", "from": "\(exchange.partial!.body.count)"])
        begin(exchange)
    }

    /// RFC 9110 §15.4: follow with the method the status calls for.
    private func redirect(_ exchange: Exchange, status: Int, location: String) {
        guard exchange.hops < Self.maxRedirects else {
            return exchange.fail(LarderError(.tooManyRedirects, "more than \(Self.maxRedirects) redirects"))
        }
        guard let resolved = URL(string: location, relativeTo: URL(string: exchange.url.absoluteString))?.absoluteString else {
            return exchange.fail(LarderError(.upstreamError, "redirect to an invalid location"))
        }
        let next: UpstreamURL
        do {
            // Parsed (not just resolved) so that a scheme other than http(s) is refused by name.
            next = try UpstreamURL(parsing: resolved, field: "location")
        } catch {
            return exchange.fail(LarderError(.upstreamForbidden, "redirect refused: \(error.message)"))
        }
        exchange.hops += 1
        // 303 turns anything but HEAD into GET; 301 and 302 turn POST into GET (as browsers do).
        if (status == 303 && exchange.method != .head) || ((status == 301 || status == 302) && exchange.method == .post) {
            exchange.method = .get
            exchange.body = nil
            exchange.headers.removeAll { $0.name.caseInsensitiveEquals("content-type") }
        }
        // Credentials never follow a redirect to another origin, nor do the fields a named
        // upstream's configuration added (an API key is a credential by another name).
        if !next.isSameOrigin(as: exchange.url) {
            let bound = exchange.request.originBoundHeaders
            exchange.headers.removeAll { field in
                field.name.caseInsensitiveEquals("authorization") || field.name.caseInsensitiveEquals("cookie")
                    || bound.contains(field.name.lowercasedASCII)
            }
        }
        exchange.url = next
        begin(exchange)
    }
}

/// One logical request, across its redirect hops. Confined to the loop thread.
private final class Exchange: @unchecked Sendable {
    let request: UpstreamRequest
    let completion: @Sendable (Result<UpstreamResponse, LarderError>) -> Void
    let requestTime: Double
    let deadline: Double
    var url: UpstreamURL
    var method: HTTPMethod
    var headers: [HeaderField]
    var body: [UInt8]?
    var hops = 0
    /// A download cut short: the first response's header fields and the bytes so far.
    var partial: (headers: [HeaderField], body: [UInt8])?
    var resumes = 0

    init(request: UpstreamRequest, completion: @escaping @Sendable (Result<UpstreamResponse, LarderError>) -> Void, requestTime: Double) {
        self.request = request
        self.completion = completion
        self.requestTime = requestTime
        self.deadline = requestTime + Double(request.timeoutMs) / 1000
        self.url = request.url
        self.method = request.method
        self.headers = request.headers
        self.body = request.body
    }

    /// Completed (answered or failed): later calls are ignored (a cancellation can race an answer).
    private var done = false

    func fail(_ error: LarderError) {
        guard !done else { return }
        done = true
        request.cancellation?.release()
        completion(.failure(error))
    }

    func succeed(_ response: UpstreamResponse) {
        guard !done else { return }
        done = true
        request.cancellation?.release()
        completion(.success(response))
    }
}

/// Bytes of bodies being received, against the limit. Confined to the loop thread (the
/// write callback runs inside curl_multi_perform there).
private final class BodyBudget {
    let limit: Int
    var used = 0
    /// Transfers paused for lack of budget, to unpause when some is released.
    var paused: [Transfer] = []
    /// The sequence number of the oldest transfer in progress, which is never paused.
    var oldest = 0
    /// A transfer ended since paused ones were last retried (budget freed, or a new oldest).
    var released = false

    init(limit: Int) { self.limit = limit }

    /// Whether `transfer` may take `count` more bytes now (it takes them if so).
    func take(_ count: Int, for transfer: Transfer) -> Bool {
        guard used + count <= limit || transfer.sequence <= oldest else { return false }
        used += count
        transfer.accounted += count
        return true
    }

    /// Gives back what a finished transfer held.
    func release(_ transfer: Transfer) {
        used -= transfer.accounted
        transfer.accounted = 0
        released = true
    }
}

/// One hop: an easy handle and what its callbacks collect. Retained (through `Unmanaged`)
/// while libcurl may call back into it; `release` balances that.
private final class Transfer {
    let handle: UnsafeMutableRawPointer
    let exchange: Exchange
    let policy: UpstreamAccessPolicy
    let budget: BodyBudget
    let sequence: Int
    /// Body bytes counted against the budget.
    var accounted = 0
    var headers: [HeaderField] = []
    var body: [UInt8] = []
    var tooLarge = false
    var refusal: String?
    /// The upstream answered 101 Switching Protocols, which Larder never asks for.
    var switchedProtocols = false
    /// The status of the response being read (0 before its status line).
    var status = 0
    private var headerList: UnsafeMutablePointer<curl_slist>?
    private let errorBuffer = UnsafeMutablePointer<CChar>.allocate(capacity: Int(CURL_ERROR_SIZE))
    private var unmanaged: Unmanaged<Transfer>?

    init(handle: UnsafeMutableRawPointer, exchange: Exchange, policy: UpstreamAccessPolicy, budget: BodyBudget, sequence: Int) {
        self.handle = handle
        self.exchange = exchange
        self.policy = policy
        self.budget = budget
        self.sequence = sequence
        errorBuffer.initialize(to: 0)
    }

    deinit {
        errorBuffer.deallocate()
    }

    func configure(userAgent: String, timeoutMs: Int, resolve: UnsafeMutablePointer<curl_slist>?) {
        let context = Unmanaged.passRetained(self)
        unmanaged = context
        let opaque = context.toOpaque()
        let request = exchange.request
        larder_curl_setopt_string(handle, CURLOPT_URL, exchange.url.absoluteString)
        larder_curl_setopt_string(handle, CURLOPT_PROTOCOLS_STR, "http,https")
        larder_curl_setopt_string(handle, CURLOPT_REDIR_PROTOCOLS_STR, "http,https")
        larder_curl_setopt_long(handle, CURLOPT_FOLLOWLOCATION, 0)
        larder_curl_setopt_long(handle, CURLOPT_NOSIGNAL, 1)
        // Never through a proxy from the environment: the address checks apply to the origin.
        larder_curl_setopt_string(handle, CURLOPT_PROXY, "")
        if let resolve { larder_curl_setopt_pointer(handle, CURLOPT_RESOLVE, UnsafeMutableRawPointer(resolve)) }
        larder_curl_setopt_long(handle, CURLOPT_TIMEOUT_MS, timeoutMs)
        larder_curl_setopt_offset(handle, CURLOPT_MAXFILESIZE_LARGE, curl_off_t(request.maxBodyBytes))
        larder_curl_setopt_pointer(handle, CURLOPT_ERRORBUFFER, errorBuffer)
        larder_curl_setopt_pointer(handle, CURLOPT_PRIVATE, opaque)
        larder_curl_setopt_data_callback(handle, CURLOPT_WRITEFUNCTION, writeCallback)
        larder_curl_setopt_pointer(handle, CURLOPT_WRITEDATA, opaque)
        larder_curl_setopt_data_callback(handle, CURLOPT_HEADERFUNCTION, headerCallback)
        larder_curl_setopt_pointer(handle, CURLOPT_HEADERDATA, opaque)
        larder_curl_setopt_opensocket(handle, openSocketCallback)
        larder_curl_setopt_pointer(handle, CURLOPT_OPENSOCKETDATA, opaque)

        switch exchange.method {
        case .get:
            larder_curl_setopt_long(handle, CURLOPT_HTTPGET, 1)
        case .head:
            larder_curl_setopt_long(handle, CURLOPT_NOBODY, 1)
        default:
            // Any other method (PUT, DELETE, a method Larder does not know) is sent as named,
            // with the body as given.
            if exchange.method != .post {
                larder_curl_setopt_string(handle, CURLOPT_CUSTOMREQUEST, exchange.method.rawValue)
            }
            if let body = exchange.body {
                larder_curl_setopt_offset(handle, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(body.count))
                body.withUnsafeBytes { bytes in
                    // COPYPOSTFIELDS: libcurl keeps its own copy, so `body` need not outlive the call.
                    _ = larder_curl_setopt_pointer(handle, CURLOPT_COPYPOSTFIELDS, UnsafeMutableRawPointer(mutating: bytes.baseAddress ?? UnsafeRawPointer(errorBuffer)))
                }
            } else if exchange.method == .post {
                larder_curl_setopt_offset(handle, CURLOPT_POSTFIELDSIZE_LARGE, 0)
                larder_curl_setopt_string(handle, CURLOPT_COPYPOSTFIELDS, "")
            }
        }

        var list: UnsafeMutablePointer<curl_slist>?
        var hasUserAgent = false
        var hasContentType = false
        for field in exchange.headers {
            if field.name.caseInsensitiveEquals("user-agent") { hasUserAgent = true }
            if field.name.caseInsensitiveEquals("content-type") { hasContentType = true }
            // "Name:" alone would remove a libcurl default; "Name;" sends an empty value.
            let line = field.value.isEmpty ? "\(field.name);" : "\(field.name): \(field.value)"
            if FieldBytes.hasRawBytes(line) {
                // Bytes that are not UTF-8 (obs-text) go out as they came in.
                let raw = FieldBytes.bytes(line) + [0]
                raw.withUnsafeBufferPointer { bytes in
                    bytes.withMemoryRebound(to: CChar.self) { list = curl_slist_append(list, $0.baseAddress) }
                }
            } else {
                list = curl_slist_append(list, line)
            }
        }
        if !hasUserAgent { list = curl_slist_append(list, "User-Agent: \(userAgent)") }
        // No "Expect: 100-continue" round trip for larger bodies.
        list = curl_slist_append(list, "Expect:")
        // libcurl labels a body it is given as a form (application/x-www-form-urlencoded);
        // the body is the caller's, and so is its type, or lack of one.
        if !hasContentType { list = curl_slist_append(list, "Content-Type:") }
        headerList = list
        larder_curl_setopt_pointer(handle, CURLOPT_HTTPHEADER, UnsafeMutableRawPointer(list))
    }

    /// Frees the handle and the header list, and drops the callbacks' reference.
    /// Frees what the transfer holds besides its handle (which the upstream retires).
    func release() {
        curl_slist_free_all(headerList)
        headerList = nil
        unmanaged?.release()
        unmanaged = nil
    }

    func error(for code: CURLcode, timeoutMs: Int) -> LarderError {
        let detail = errorBuffer.pointee != 0 ? String(cString: errorBuffer) : String(cString: curl_easy_strerror(code))
        if let refusal {
            return LarderError(.upstreamForbidden, "connection refused by policy: \(refusal)")
        }
        if switchedProtocols {
            return LarderError(.upstreamError, "\(exchange.url.authority) switched protocols (101), which Larder did not ask for")
        }
        if tooLarge || code == CURLE_FILESIZE_EXCEEDED {
            return LarderError(.upstreamTooLarge, "upstream body is larger than \(exchange.request.maxBodyBytes) bytes")
        }
        switch code {
        case CURLE_OPERATION_TIMEDOUT:
            return LarderError(.upstreamTimeout, "upstream did not answer within \(timeoutMs) ms")
        case CURLE_COULDNT_RESOLVE_HOST:
            return LarderError(.upstreamUnreachable, "cannot resolve host '\(exchange.url.host)': \(detail)")
        case CURLE_WEIRD_SERVER_REPLY, CURLE_BAD_CONTENT_ENCODING, CURLE_PARTIAL_FILE:
            // It answered, but not with a response that can be read to its end.
            return LarderError(.upstreamError, "\(exchange.url.authority) sent an unreadable response: \(detail)")
        default:
            return LarderError(.upstreamUnreachable, "\(exchange.url.authority): \(detail)")
        }
    }

    /// Takes one header line; returns false to abort the transfer.
    /// One header line as libcurl hands it over (with its CRLF), read as bytes: a status
    /// line, a field, a continuation, or the blank line ending a header section.
    func receiveHeaderLine(_ raw: UnsafeBufferPointer<UInt8>) -> Bool {
        var end = raw.count
        while end > 0, raw[end - 1] == 0x0D || raw[end - 1] == 0x0A { end -= 1 }
        let line = UnsafeBufferPointer(rebasing: raw[0..<end])
        if line.starts(with: Self.httpPrefix) {
            // The status code: the digits after the first space.
            var code = 0
            if var index = line.firstIndex(of: 0x20) {
                index += 1
                while index < line.count, (0x30...0x39).contains(line[index]) {
                    code = code * 10 + Int(line[index] - 0x30)
                    index += 1
                }
            }
            // 101 would hand the connection over to another protocol and wait on it forever:
            // Larder never sends Upgrade, so it is an error (RFC 9110 §15.2.2).
            if code == 101 {
                switchedProtocols = true
                return false
            }
            status = code
            // A new status line: an interim (1xx) response came first; start over.
            headers.removeAll(keepingCapacity: true)
            return true
        }
        guard !line.isEmpty else {
            // The end of a final response's header section: its announced length, for progress.
            if status == 200, exchange.partial == nil, let progress = exchange.request.progress,
               let length = headers.values("content-length").first.flatMap({ Int($0.trimmingSpaces) }) {
                progress.add(expected: length)
            }
            return true
        }
        if line[0] == 0x20 || line[0] == 0x09 {
            // obs-fold (RFC 9112 §5.2): a continuation of the previous field.
            if !headers.isEmpty { headers[headers.count - 1].value += " " + Self.trimmedString(line) }
            return true
        }
        guard let colon = line.firstIndex(of: UInt8(ascii: ":")) else { return true }
        headers.append(HeaderField(FieldBytes.string(UnsafeBufferPointer(rebasing: line[..<colon])),
                                   Self.trimmedString(UnsafeBufferPointer(rebasing: line[(colon + 1)...]))))
        return true
    }

    private static let httpPrefix = Array("HTTP/".utf8)

    /// The bytes without leading and trailing spaces and tabs, as a field value.
    private static func trimmedString(_ bytes: UnsafeBufferPointer<UInt8>) -> String {
        var start = 0, end = bytes.count
        while start < end, bytes[start] == 0x20 || bytes[start] == 0x09 { start += 1 }
        while end > start, bytes[end - 1] == 0x20 || bytes[end - 1] == 0x09 { end -= 1 }
        return FieldBytes.string(UnsafeBufferPointer(rebasing: bytes[start..<end]))
    }
}

// MARK: - C callbacks (capture nothing; context arrives through the void* slot)

private let writeCallback: larder_curl_data_callback = { data, size, count, context in
    let transfer = Unmanaged<Transfer>.fromOpaque(context!).takeUnretainedValue()
    let length = size * count
    guard transfer.body.count + length <= transfer.exchange.request.maxBodyBytes else {
        transfer.tooLarge = true
        return 0 // makes libcurl abort with CURLE_WRITE_ERROR
    }
    guard transfer.budget.take(length, for: transfer) else {
        // Over the in-flight budget: libcurl keeps these bytes and offers them again on unpause.
        transfer.budget.paused.append(transfer)
        return larder_curl_writefunc_pause()
    }
    transfer.exchange.request.progress?.add(received: length)
    data.withMemoryRebound(to: UInt8.self, capacity: length) { bytes in
        transfer.body.append(contentsOf: UnsafeBufferPointer(start: bytes, count: length))
    }
    return length
}

private let headerCallback: larder_curl_data_callback = { data, size, count, context in
    let transfer = Unmanaged<Transfer>.fromOpaque(context!).takeUnretainedValue()
    let length = size * count
    let accepted = data.withMemoryRebound(to: UInt8.self, capacity: length) { bytes in
        transfer.receiveHeaderLine(UnsafeBufferPointer(start: bytes, count: length))
    }
    return accepted ? length : 0
}

private let openSocketCallback: larder_curl_opensocket_callback = { context, purpose, address in
    let transfer = Unmanaged<Transfer>.fromOpaque(context!).takeUnretainedValue()
    let family = address.pointee.family
    let ip: IPAddress? = withUnsafeMutablePointer(to: &address.pointee.addr) { pointer in
        let raw = UnsafeRawPointer(pointer)
        if family == AF_INET {
            let sin = raw.assumingMemoryBound(to: sockaddr_in.self).pointee
            return withUnsafeBytes(of: sin.sin_addr) { IPAddress(bytes: Array($0)) }
        } else if family == AF_INET6 {
            let sin6 = raw.assumingMemoryBound(to: sockaddr_in6.self).pointee
            return withUnsafeBytes(of: sin6.sin6_addr) { IPAddress(bytes: Array($0)) }
        }
        return nil
    }
    guard let ip else {
        transfer.refusal = "address family \(family) is not allowed"
        return larder_curl_socket_bad()
    }
    if let refusal = transfer.policy.refusal(forAddress: ip) {
        transfer.refusal = refusal
        return larder_curl_socket_bad()
    }
    return socket(family, address.pointee.socktype, address.pointee.protocol)
}
